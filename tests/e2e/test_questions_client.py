"""A project's questions through gradio_client: the same /rate_submit the browser calls takes the correction, the
flags and a score per criterion after the score, comment and key; a refused answer stores nothing."""
from __future__ import annotations

import pytest
from test_questions_browser import RATER, asking_app  # noqa: F401 - the fixture: its own server with questions

gradio_client = pytest.importorskip("gradio_client")
from gradio_client import Client  # noqa: E402

pytestmark = pytest.mark.slow


def test_rate_with_questions_through_the_api(asking_app, db_rows):
    url, db_path = asking_app
    c = Client(url, auth=RATER, verbose=False)
    key = c.predict(api_name="/rate_next")[6]
    with pytest.raises(Exception, match="no flag 'rude'"):
        c.predict(5, "", key, "", ["rude"], 3, api_name="/rate_submit")
    assert db_rows(db_path, "SELECT * FROM ratings") == [] and db_rows(db_path, "SELECT * FROM answers") == []
    after = c.predict(5, "", key, "A better one.", ["unsafe"], 3, api_name="/rate_submit")
    assert after[6] != key
    assert [tuple(r.values()) for r in db_rows(
        db_path, "SELECT a.kind, q.name, a.score, a.text FROM answers a LEFT JOIN questions q ON q.id = a.question_id"
        " ORDER BY a.id")] == [("score", "helpful", 3.0, None), ("flag", "unsafe", None, None),
                               ("correction", None, None, "A better one.")]
    assert [r["score"] for r in db_rows(db_path, "SELECT score FROM ratings")] == [5.0]
