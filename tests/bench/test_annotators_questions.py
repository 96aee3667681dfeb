"""bench/annotators.py --questions: each label answers the project's criteria and flags through the same service
the Rate tab calls, and the database check counts a label whose criterion scores are missing as lost (the
measurement itself starts a server: run it alone)."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import annotators  # noqa: E402
from storage import open_db  # noqa: E402


def test_label_answers_vary_within_each_scale():
    answers = [annotators.label_answers(n) for n in range(20)]
    for scores, _, _ in answers:
        assert [low <= s <= high for s, (_, low, high) in zip(scores, annotators.CRITERIA)] == [True, True]
    assert [n for n, (_, flags, _) in enumerate(answers) if flags] == [4, 9, 14, 19]
    assert answers[4][1] == ["spam"] and answers[9][1] == ["off-topic"]
    assert [n for n, (_, _, correction) in enumerate(answers) if correction] == [9, 19]
    assert {scores for scores, _, _ in answers[:5]} == {(1, 1), (2, 2), (3, 3), (4, 1), (5, 2)}


def test_service_labels_store_every_answer_and_a_missing_score_counts_as_lost(tmp_path):
    db_path = str(tmp_path / "studio.db")
    annotators.build_database(db_path, 40, ["ann-0"], overlap=1, questions=True)
    person = annotators.ServiceAnnotator(db_path, "ann-0", questions=True)
    for _ in range(10):
        assert person.label()
    person.close()
    assert annotators.check_database(db_path, [person], questions=True) == (0, 0)

    db = open_db(db_path, migrate=False, create=False)
    kinds = dict(db.execute("SELECT kind, COUNT(*) FROM answers GROUP BY kind").fetchall())
    assert kinds == {"score": 20, "flag": 2, "correction": 1}
    first = person.acknowledged[0]
    db.execute("DELETE FROM answers WHERE item_id = ? AND kind = 'score' AND question_id = "
               "(SELECT MIN(question_id) FROM answers WHERE item_id = ?)", [first, first])
    db.conn.commit()
    db.conn.close()
    assert annotators.check_database(db_path, [person], questions=True) == (1, 0)
    assert annotators.check_database(db_path, [person], questions=False) == (0, 0)
