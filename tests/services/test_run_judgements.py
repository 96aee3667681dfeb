"""An online run's judgements: the summary (counts and the model's agreement with people) over hand-built judgements,
worked out by hand; stored and read back; printed by `runs show` and the Runs page's panel."""
from __future__ import annotations

import pytest

from labeler.cli import main
from labeler.services.execution.run_judgements import (Judgement, JudgeSummary, judge_summary, record_judgements,
                                                       run_judgements, summarize, summary_lines)
from labeler.ui.tabs.train.judge_summary import judge_markdown


def _j(judged_by, verdict, people=None, model=None, step=1):
    return Judgement(step, "p", "a", "b", judged_by, verdict, people=people, model=model)


# (who decided, the verdict used, people's, the model's)
JUDGEMENTS = [
    _j("people", 0, people=0, model=0),  # 1. both, compared, agree
    _j("people", 1, people=1, model=0),  # 2. both, compared, disagree
    _j("people", -1, people=-1, model=1),  # 3. both; people said "a tie": not compared
    _j("people", 0, people=0),  # 4. people only (a people judge has no model)
    _j("model", 1, model=1),  # 5. the model alone
    _j("model", 0, model=0),  # 6.
    _j("model", -1, model=-1),  # 7. the model had no opinion: a tie, left out of the loss
    _j("none", -1),  # 8. identical answers, or not ranked in time
    _j("people", 1, people=1, model=1, step=2),  # 9. both, compared, agree
    _j("people", 0, people=0, model=-1, step=2),  # 10. both; the model said "a tie": not compared
]


def test_counts_and_agreement_by_hand():
    # by people: 1, 2, 3, 4, 9, 10 = 6; by the model: 5, 6, 7 = 3; left out: 8 = 1.
    # both judged: 1, 2, 3, 9, 10 = 5; compared (neither a tie): 1, 2, 9 = 3; agreed: 1, 9 = 2 -> 2/3.
    summary = summarize(JUDGEMENTS)
    assert summary == JudgeSummary(pairs=10, by_people=6, by_model=3, undecided=1, both=5, compared=3, agreed=2)
    assert summary.agreement == pytest.approx(2 / 3)
    assert summary_lines(summary) == [
        "10 pairs judged: 6 by people, 3 by the model, 1 left out (identical answers, or not ranked in time)",
        "the model agreed with people on 2 of the 3 pairs both judged (67%; 2 more that one of them called a tie)",
    ]
    # a people-only run (judge=people) and a model-only run (judge=rm): nothing to compare
    people_only = summarize(JUDGEMENTS[3:4])
    assert (people_only.by_people, people_only.both, people_only.agreement) == (1, 0, None)
    assert summary_lines(summarize(JUDGEMENTS[4:7]))[1] == "no pair was judged by both people and the model: no agreement to measure"
    assert summary_lines(summarize([JUDGEMENTS[2]]))[1].startswith("people and the model both judged 1 pairs, each time with a tie")


def test_a_judgement_is_checked():
    with pytest.raises(ValueError, match="judged_by='rm'"):
        _j("rm", 0)
    with pytest.raises(ValueError, match="people=2: a verdict is 0, 1 or -1"):
        _j("people", 0, people=2)
    with pytest.raises(ValueError, match="verdict=None"):
        _j("none", None)


def test_stored_read_back_and_shown_by_runs_show_and_the_panel(db, db_path, capsys):
    run_id = db.execute("INSERT INTO runs (project_id, stage) VALUES (1, 'online-dpo')").lastrowid
    other = db.execute("INSERT INTO runs (project_id, stage) VALUES (1, 'dpo')").lastrowid
    assert record_judgements(db, run_id, JUDGEMENTS) == 10
    assert run_judgements(db, run_id) == JUDGEMENTS
    assert judge_summary(db, run_id) == summarize(JUDGEMENTS) and judge_summary(db, other) is None

    assert main(["runs", "show", str(run_id), "--db", db_path]) == 0
    out = capsys.readouterr().out
    lines = summary_lines(summarize(JUDGEMENTS))
    assert f"  judges: {lines[0]}\n          {lines[1]}\n" in out
    assert main(["runs", "show", str(other), "--db", db_path]) == 0
    assert "judges:" not in capsys.readouterr().out  # a run with no judgements says nothing about them

    assert judge_markdown(db, run_id) == f"**Who judged the pairs**  \n{lines[0]}  \n{lines[1]}"
    assert judge_markdown(db, other) == "" and judge_markdown(db, None) == ""
    from labeler.ui.tabs.train import monitor  # the Runs page shows the panel for the picked run
    shown = dict(zip(monitor.REFRESHED, monitor.read_run(db, "default", run_id, None)))
    assert shown["judges"] == judge_markdown(db, run_id)
    assert dict(zip(monitor.REFRESHED, monitor.read_run(db, "default", other, None)))["judges"] == ""
    # deleting the run deletes its judgements (people's rankings are labels and stay in `rankings`)
    db.execute("DELETE FROM runs WHERE id = ?", [run_id])
    assert run_judgements(db, run_id) == []
