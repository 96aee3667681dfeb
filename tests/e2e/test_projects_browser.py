"""Projects managed in the browser (issue 49, item 1), in headless Chromium: an admin creates a chat project
(answer length, measure) and works in it; the project picker switches back; a prompt picked in Data > 1. Prompts
is retired and restored. Another person's project stays theirs."""
from __future__ import annotations

import pytest
from helpers import serving

pytestmark = [pytest.mark.slow, pytest.mark.browser]
ADMIN, ANNOTATOR, PASSWORD = "boss", "ann", "a-long-password-1"


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    from labeler.services.data import accounts, prompts
    from storage import open_db

    root = tmp_path_factory.mktemp("projects-browser")
    db = open_db(root / "studio.db")
    accounts.create_user(db, ADMIN, PASSWORD, role="admin")
    accounts.create_user(db, ANNOTATOR, PASSWORD)
    prompts.add_prompts(db, ["An opening", "Another opening"], source="test")
    db.conn.close()
    with serving(root / "studio.db", root) as served:
        yield served, str(root / "studio.db")


def pick(page, dropdown: str, option: str) -> None:
    page.click(f"{dropdown} input")
    page.click(f"[role=option]:has-text('{option}')")


def test_an_admin_creates_a_project_switches_and_retires_a_prompt(studio, login, db_rows):
    served, db_path = studio
    page = login(served.url, ADMIN, PASSWORD, ready="#studio-project")
    assert "project **default**" not in page.inner_text("#studio-whoami")  # rendered, not markdown source
    assert "project default" in page.inner_text("#studio-whoami")
    page.click("button[role=tab]:has-text('Admin')")
    page.wait_for_selector("#admin-new-project", state="visible", timeout=30_000)
    page.locator("#admin-new-project").get_by_text("New project", exact=True).first.click()
    page.fill("#admin-new-project-name textarea", "nimbus")
    page.fill("#admin-new-project-tokens input", "64")
    # The exact option: the blank one's words name people too ("default: people's blind comparisons once ...").
    page.click("#admin-new-project-measure input")
    page.click("[role=option]:text-is(\"people's blind comparisons\")")
    page.click("#admin-create-project")
    # The page reloads in the new project.
    page.wait_for_selector("#studio-whoami >> text=project nimbus", timeout=30_000)
    assert page.locator("#studio-project input").input_value() == "nimbus"
    assert db_rows(db_path, "SELECT prompt_format, answer_tokens, measure FROM projects WHERE name = 'nimbus'") \
        == [{"prompt_format": "chat", "answer_tokens": 64, "measure": "people"}]
    page.click("button[role=tab]:has-text('Data')")
    page.wait_for_selector("#data-summary >> text=Project nimbus", timeout=30_000)
    # The first-steps panel of a chat project does not offer the movie-review openings.
    assert "movie-review" not in page.inner_text("#studio-first-steps")

    pick(page, "#studio-project", "default")
    page.wait_for_selector("#studio-whoami >> text=project default", timeout=30_000)
    page.click("button[role=tab]:has-text('Data')")
    page.wait_for_selector("#data-prompts >> text=An opening", timeout=30_000)
    page.click("#data-prompts [role=gridcell]:has-text('An opening')")
    page.wait_for_function("() => document.querySelector('#data-prompt-id input').value === '1'", timeout=20_000)
    assert page.locator("#data-prompt-text textarea").input_value() == "An opening"
    page.click("#data-prompt-retire")
    page.wait_for_selector("#data-summary >> text=1 retired", timeout=20_000)
    assert db_rows(db_path, "SELECT split FROM prompts WHERE id = 1") == [{"split": "retired"}]
    page.click("#data-prompt-restore")
    page.wait_for_function("() => !document.querySelector('#data-summary').innerText.includes('retired')",
                           timeout=20_000)
    page.close()

    # The annotator never switched: their page is still in the default project.
    other = login(served.url, ANNOTATOR, PASSWORD)
    assert "project default" in other.inner_text("#studio-whoami")
    other.close()
