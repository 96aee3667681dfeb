"""Each criterion's win rate against the base (issue 47), on hand-counted answers."""
import json

import pytest

from labeler.services.evals import criterion_wins
from labeler.services.labels import questions
from labeler.errors import InputError


def words(prompts, answers):
    return [len(a.split()) for a in answers]


def fewer_words(prompts, answers):
    return [-len(a.split()) for a in answers]


def answer_rows(*answers):
    return [{"prompt": f"p{i // 2}", "answer": a} for i, a in enumerate(answers)]


def test_each_criterion_counts_its_own_wins():
    # Two prompts, two answers each. Prompt 0: model 3 and 1 words, base 1 and 2: by "complete" (more words) the
    # pairs 3>1, 3>2, 1=1, 1<2 give (1 + 1 + 0.5 + 0) / 4 = 0.625; prompt 1: model 4, 4 against base 1, 1: 1.0.
    # complete: (0.625 + 1.0) / 2 = 0.8125; "short" (fewer words) mirrors every pair: 0.375 and 0.0, so 0.1875.
    model = answer_rows("a b c", "a", "a b c d", "a b c d")
    base = answer_rows("a", "a b", "a", "a")
    wins = criterion_wins.criterion_win_rates(model, base, 2, {"complete": words, "short": fewer_words})
    assert wins["complete"]["eval/win_rate"] == pytest.approx(0.8125)
    assert wins["short"]["eval/win_rate"] == pytest.approx(0.1875)
    assert wins["complete"]["eval/win_ties"] == 1.0 and wins["complete"]["eval/win_pairs"] == 8.0
    assert wins["complete"]["eval/win_low"] < 0.8125 < wins["complete"]["eval/win_high"]
    lines = criterion_wins.win_lines(wins)
    assert lines[0].startswith("complete: 81% against the base, 95% interval ")
    assert lines[1].startswith("short: 19% against the base")
    with pytest.raises(InputError, match="evaluate both with the same settings"):
        criterion_wins.criterion_win_rates(model, base[:2], 2, {"complete": words})
    with pytest.raises(InputError, match="gave 1 scores for 4 answers"):
        criterion_wins.criterion_win_rates(model, base, 2, {"complete": lambda p, a: [1.0]})


def test_each_criterion_finds_the_newest_reward_model_trained_on_it(db):
    questions.add_question(db, "default", "helpful")
    questions.add_question(db, "default", "safe")
    for run_id, criterion, model in ((1, "helpful", "rm-helpful-old"), (2, "", "rm-overall"),
                                     (3, "helpful", "rm-helpful"), (4, "safe", "rm-safe")):
        db.execute("INSERT INTO runs (id, project_id, stage, status, config_json) VALUES (?, 1, 'rm', 'succeeded', ?)",
                   [run_id, json.dumps({"job": {"criterion": criterion}})])
        db.execute("INSERT INTO models (name, path, kind, run_id) VALUES (?, '/x', 'reward', ?)", [model, run_id])
    assert criterion_wins.criterion_models(db, "default") == {"helpful": "rm-helpful", "safe": "rm-safe"}


def test_runs_show_criteria_prints_each_criterions_win_rate(db, db_path, tmp_path, capsys, monkeypatch):
    from labeler.cli import main
    from labeler.services.evals import evaluation
    from labeler.services.execution import runs

    questions.add_question(db, "default", "complete")
    db.execute("INSERT INTO runs (id, project_id, stage, status, config_json) VALUES (1, 1, 'rm', 'succeeded', ?)",
               [json.dumps({"job": {"criterion": "complete"}})])
    db.execute("INSERT INTO models (name, path, kind, run_id) VALUES ('rm-complete', '/x', 'reward', 1)")
    run_id = runs.insert_run(db, "ppo", {"job": {"reward": "rm", "reward_model": "rm-complete"}}, "default", None, "",
                             tmp_path)
    settings = {"prompts": "heldout", "reward": "vader", "samples": 2, "max_new_tokens": 8, "threshold": 0.5,
                "seed": 0, "bf16": False, "prompt_format": "chat", "prompts_n": 2, "prompts_hash": "x"}

    def answers(who):
        return [{"prompt": f"p{i // 2}", "answer": who, "reward": 0.0, "kl": 0.0, "length": 3} for i in range(4)]
    evaluation._store(db, "default", "base-m", "base-m", None, settings, {}, answers("short"))
    evaluation._store(db, "default", "tuned-m", "base-m", run_id, settings, {}, answers("a complete answer"))
    # The criterion's reward model counts words: every tuned answer (3 words) beats every base one (1 word).
    used = []
    monkeypatch.setattr(evaluation, "reward_function", lambda db, spec: used.append(spec) or words)
    assert main(["runs", "show", str(run_id), "--db", db_path, "--criteria"]) == 0
    out = capsys.readouterr().out
    assert used == ["rm:rm-complete"]
    assert "  criterion complete: 100% against the base, 95% interval " in out
    assert main(["runs", "show", str(run_id), "--db", db_path]) == 0
    assert "criterion complete" not in capsys.readouterr().out  # asked for only: it loads the reward models
