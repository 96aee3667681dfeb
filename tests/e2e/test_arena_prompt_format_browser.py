"""Issue 24 item 7 in a real browser (headless Chromium): in a project whose prompts are the start of a text
(prompt format "continue"), an Arena battle's prompt reaches both models as that plain text, not wrapped in
the chat template (the tiny test model has one: its tokenizer is the default model's), as generation, PPO and
the Chat tab already treat such a project's prompts."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]
USER = ("gina", "gina-password-1")  # only this test battles as gina, so the battle rows are its own
PROMPT = "The rain had not stopped for three days when the detective finally"


@pytest.fixture
def continuation_project(running_app):
    """The shared app's project switched to plain-text prompts for this test, and back afterwards."""
    from labeler.services.data import accounts, projects
    from storage import open_db

    db = open_db(running_app.db_path)
    try:
        if accounts.get_user(db, USER[0]) is None:
            accounts.create_user(db, *USER)
        before = projects.get_project(db, running_app.project).prompt_format
        projects.update_project(db, running_app.project, prompt_format="continue")
    finally:
        db.conn.close()
    yield
    db = open_db(running_app.db_path)
    try:
        projects.update_project(db, running_app.project, prompt_format=before)
    finally:
        db.conn.close()


@pytest.fixture
def prompts_generated(monkeypatch):
    """Every prompt the server's models are asked to continue, as token ids: generation runs in this process
    (the app is launched here), and the arena's answers reach chat._generate (a bounded generate) by attribute."""
    from labeler.services.serving import chat

    seen: list[list[int]] = []
    generate = chat._generate

    def recording(model, tokenizer, ids, *args, **kwargs):
        seen.append([int(t) for t in ids])
        return generate(model, tokenizer, ids, *args, **kwargs)

    monkeypatch.setattr(chat, "_generate", recording)
    return seen


def test_a_continuation_projects_battle_reaches_both_models_as_plain_text(
        running_app, continuation_project, prompts_generated, login, db_rows):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(running_app.model_dir)
    assert tokenizer.chat_template, "the test needs a model with a chat template, which the arena must not use here"

    page = login(running_app.url, *USER, ready="button[role=tab]:has-text('Arena')")
    page.click("button[role=tab]:has-text('Arena')")
    page.wait_for_selector("#arena-prompt textarea", state="visible")
    page.fill("#arena-prompt textarea", PROMPT)
    # The two tiny models (the real default model is registered too), 16 new tokens: a quick battle.
    page.click("text=Pick the two models yourself")
    for selector, name in [("#arena-model-1 input", running_app.model_name), ("#arena-model-2 input", running_app.model_dir)]:
        page.fill(selector, name)
        page.press(selector, "Enter")
    page.fill("#arena-max-new-tokens input[type=number]", "16")
    page.press("#arena-max-new-tokens input[type=number]", "Enter")
    page.click("#arena-start")
    page.wait_for_selector("#arena-vote-a:not([disabled])", timeout=90_000)

    # Both models were given the prompt's own text to continue: no role markers, no system prompt.
    assert len(prompts_generated) == 2, prompts_generated
    for ids in prompts_generated:
        assert tokenizer.decode(ids, skip_special_tokens=False) == PROMPT
    # What the chat format would have sent instead (the arena's behaviour before): not what the models got.
    chat_text = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}], tokenize=False,
                                              add_generation_prompt=True)
    assert tokenizer.decode(prompts_generated[0], skip_special_tokens=False) != chat_text

    # The battle stored is this one: its prompt as typed, generated with the 16 new tokens asked for.
    battles = db_rows(
        running_app.db_path,
        "SELECT p.text AS prompt, b.settings_json FROM battles t JOIN users u ON u.id = t.user_id"
        " JOIN prompts p ON p.id = t.prompt_id JOIN responses b ON b.id = t.response_b WHERE u.username = ?",
        [USER[0]],
    )
    assert len(battles) == 1 and battles[0]["prompt"] == PROMPT
    assert '"max_new_tokens": 16' in battles[0]["settings_json"]
    page.close()
