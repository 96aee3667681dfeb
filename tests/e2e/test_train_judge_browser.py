"""Issue 46 item 2 in Chromium: the Train tab's Judge picker for an online DPO run, on an app of its own with no
annotator account. The picker shows for online DPO alone, its options are in words, a reward model registered after
the page loaded is offered once a stage is picked, and people as the judge are refused at launch with a toast that
names the fix (the form's handlers are tested in tests/ui/test_train_judge_picker.py)."""
from __future__ import annotations

import pytest
from helpers import serving

from labeler.ui.model_choices import judge_choices

pytestmark = [pytest.mark.slow, pytest.mark.browser]
ADMIN = ("admin", "admin-password-1")
ONLINE_DPO = "#train-stage label:has-text('Online preferences (online DPO)')"
DPO = "#train-stage label:has-text('Learn from preferences (DPO)')"


@pytest.fixture(scope="module")
def nobody_to_ask(tmp_path_factory, tiny_model_dir):
    """An app whose only account is the admin's, with prompts to train on: (url, db path)."""
    from labeler.services.data import accounts, prompts
    from storage import open_db

    root = tmp_path_factory.mktemp("judge-app")
    db_path = str(root / "studio.db")
    db = open_db(db_path)
    accounts.create_user(db, *ADMIN, role="admin")
    prompts.add_prompts(db, [f"Judge browser prompt {k}" for k in range(4)], source="e2e")
    db.conn.close()
    with serving(db_path, root, model=str(tiny_model_dir)) as server:
        yield server.url, db_path


def _options(page) -> list[str]:
    page.click("#train-judge input")
    page.wait_for_selector("ul[role=listbox] li")
    options = [text.replace("✓", "").strip() for text in page.locator("ul[role=listbox] li").all_inner_texts()]
    page.keyboard.press("Escape")
    page.locator("#train-judge input").blur()  # the next click opens the list again (it opens on focus)
    return options


def test_the_judge_picker_follows_the_registry_and_people_without_accounts_are_refused(nobody_to_ask, login,
                                                                                       tiny_model_dir):
    from labeler.services.serving import models
    from storage import open_db

    url, db_path = nobody_to_ask
    page = login(url, *ADMIN, ready="button[role=tab]:has-text('Train')", height=1600)
    page.click("button[role=tab]:has-text('Train')")
    page.wait_for_selector("#train-stage", state="visible")
    assert page.locator("#train-judge").is_hidden()  # the first stage (a reward model) has no judge
    page.click(ONLINE_DPO)
    page.wait_for_selector("#train-judge", state="visible")
    assert page.locator("#train-reward").is_hidden()  # online DPO's judge takes the reward row's place
    assert _options(page) == [label for label, _ in judge_choices([])]
    assert page.input_value("#train-judge input") == "The newest reward model (none registered yet)"
    # A reward model registered after the page loaded: offered once a stage is picked.
    db = open_db(db_path)
    models.register_model(db, "rm-late", str(tiny_model_dir), kind="reward")
    db.conn.close()
    page.click(DPO)
    page.wait_for_selector("#train-judge", state="hidden")
    page.click(ONLINE_DPO)
    page.wait_for_selector("#train-judge", state="visible")
    expected = [label for label, _ in judge_choices(["rm-late"])]
    for _ in range(40):  # the choices arrive with the stage change's third step
        options = _options(page)
        if options == expected:
            break
        page.wait_for_timeout(250)
    assert options == expected and "Reward model rm-late" in options
    # People as the judge, with no annotator account: the launch is refused with a toast naming what to do.
    page.click("#train-judge input")
    page.click("ul[role=listbox] li:has-text('People (blind pairs in the Rank tab)')")
    assert page.input_value("#train-judge input") == "People (blind pairs in the Rank tab)"
    page.click("#train-launch")
    toast = page.wait_for_selector(".toast-body, [data-testid=toast-body]", timeout=60_000)
    text = toast.inner_text()
    assert "there are no annotator accounts to rank the pairs" in text and "rlhf-studio users add NAME" in text
    db = open_db(db_path)
    assert db["runs"].count == 0
    db.conn.close()
    page.close()
