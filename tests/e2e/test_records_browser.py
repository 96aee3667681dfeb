"""Issue 24 item 1 in a real browser (headless Chromium): Records' search (button and Enter), its filters and
its Previous/Next paging answer with the matching rows, not red "Error" badges; the score filters start blank."""
from __future__ import annotations

import pytest
from test_admin_browser import error_badges

pytestmark = [pytest.mark.slow, pytest.mark.browser]
PAGING_SOURCE = "e2e-records-paging"
PAGING_PROMPTS = 25  # one more page than Records' 20 rows
UNIQUE_PROMPT = "A quokka reviews the records tab"


def seed_paging_prompts(db_path: str) -> None:
    from labeler.services.data import prompts
    from storage import open_db

    db = open_db(db_path)
    try:
        prompts.add_prompts(db, [f"Paging record number {k:02d} of the records test" for k in range(PAGING_PROMPTS)],
                            source=PAGING_SOURCE)
        # A word no other test's prompt or answer has: the shared app's database grows with every test before.
        prompts.add_prompts(db, [UNIQUE_PROMPT], source="e2e-records-search")
    finally:
        db.conn.close()


def note_says(page, text: str) -> None:
    page.wait_for_function("(t) => (document.getElementById('records-note') || {}).innerText?.includes(t)",
                           arg=text, timeout=20_000)


def table_column(page, elem_id: str, column: int) -> list[str]:
    """A column of a gr.Dataframe as shown: Gradio 6 draws the visible rows as div[role=row] > div[role=gridcell]."""
    return page.evaluate("([id, k]) => [...document.querySelectorAll(`#${id} div[role=row]`)]"
                         ".map(r => (r.querySelectorAll('[role=gridcell]')[k] || {}).innerText?.trim() || '')",
                         [elem_id, column])


def table_prompts(page) -> list[str]:
    return table_column(page, "records-table", 1)


def pick(page, elem_id: str, option: str) -> None:
    page.click(f"#{elem_id} input")
    page.click(f"ul[role=listbox] li:has-text('{option}')")


def test_search_filters_and_paging(running_app, login):
    seed_paging_prompts(running_app.db_path)
    page = login(running_app.url, *running_app.admin, ready="button[role=tab]:has-text('Records')")
    page.click("button[role=tab]:has-text('Records')")
    note_says(page, "page 1 of")

    # Enter in the search box searches.
    box = page.locator("#records-search textarea, #records-search input").first
    box.fill("quokka")
    box.press("Enter")
    note_says(page, "1 records · page 1 of 1")
    assert [text for text in table_prompts(page) if text] == [UNIQUE_PROMPT]

    # The Search button with a source filter: the 25 paging prompts, 20 on page 1.
    box.fill("")
    pick(page, "records-source", PAGING_SOURCE)
    page.click("#records-search-button")
    note_says(page, f"{PAGING_PROMPTS} records · page 1 of 2")
    first_page = table_prompts(page)
    assert len(first_page) == 20 and first_page[0].startswith("Paging record number 00")

    # Next and Previous move between the two pages.
    page.click("#records-next")
    note_says(page, "page 2 of 2")
    second_page = table_prompts(page)
    assert [text[:23] for text in second_page] == [f"Paging record number {k:02d}" for k in range(20, 25)]
    page.click("#records-next")  # past the last page: stays there
    page.wait_for_timeout(800)
    note_says(page, "page 2 of 2")
    page.click("#records-previous")
    note_says(page, "page 1 of 2")
    assert table_prompts(page) == first_page

    # A label-state filter narrows to nothing here: none of the paging prompts has a gold answer.
    pick(page, "records-state", "gold")
    page.click("#records-search-button")
    note_says(page, "0 records")
    assert error_badges(page) == 0
    # Item 5: the score filters are blank (no filter), not 0.
    assert page.locator("#records-min-score input, #records-min-score textarea").first.input_value() == ""
    assert page.locator("#records-max-score input, #records-max-score textarea").first.input_value() == ""
    for box_id in ("records-open-id", "records-label-id"):  # (the gold item box is in a closed accordion)
        assert page.locator(f"#{box_id} input, #{box_id} textarea").first.input_value() == ""
    # Clicking a row opens it (its id fills the box).
    page.click("#records-source input")
    pick(page, "records-state", "any")
    page.click("#records-search-button")
    note_says(page, f"{PAGING_PROMPTS} records")
    page.locator("#records-table div[role=row] [role=gridcell]").nth(1).click()
    page.wait_for_function("() => (document.getElementById('records-detail') || {}).innerText?.includes('Paging record')",
                           timeout=20_000)
    assert page.locator("#records-open-id textarea, #records-open-id input").first.input_value().isdigit()
    assert error_badges(page) == 0
    page.close()
