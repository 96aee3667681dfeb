"""Issue 45 item 3 in a real browser (headless Chromium): a chat project's first prompt upload in the Data tab is
followed by its answer length fitted from the server model's answers, shown with where it came from. The tiny
random model never ends an answer, so the fit's cap (made small here: the app is served in this process) is the
length."""
from __future__ import annotations

import pytest
from helpers import serving

from labeler.services.data import accounts
from labeler.services.serving import answer_length
from storage import open_db

pytestmark = [pytest.mark.slow, pytest.mark.browser]
ADMIN = ("fitter", "fitter-password-1")


def test_the_first_upload_fits_the_answer_length(tmp_path, tiny_model_dir, login, monkeypatch):
    monkeypatch.setattr(answer_length, "FIT_CAP", 16)
    monkeypatch.setattr(answer_length, "AUTO_FIT_CAP", 16)  # the upload's own fit
    db_path = str(tmp_path / "studio.db")
    db = open_db(db_path)
    accounts.create_user(db, *ADMIN, role="admin")
    db.conn.close()
    upload = tmp_path / "questions.txt"
    upload.write_text("How do I reset my password?\nWhere is my invoice?\nCan I pay by card?\n", encoding="utf-8")
    with serving(db_path, tmp_path, model=str(tiny_model_dir)) as server:
        page = login(server.url, *ADMIN, ready="button[role=tab]:has-text('Data')", height=1600)
        page.click("button[role=tab]:has-text('Data')")
        page.wait_for_selector("#data-answer-length >> text=the default for chat projects", timeout=30_000)
        page.set_input_files("#data-prompt-file input[type=file]", str(upload))
        page.click("#data-import-prompts")
        note = page.wait_for_selector("#data-answer-length >> text=fitted from 3 of the base model's answers",
                                      timeout=120_000)
        assert "16 tokens" in note.inner_text()
        page.close()
    db = open_db(db_path)
    assert tuple(db.execute("SELECT answer_tokens, answer_tokens_origin FROM projects").fetchone()) == (
        16, "fitted from 3 of the base model's answers: 0% end within 16 tokens, the cap (the longer ones are cut)")
    db.conn.close()
