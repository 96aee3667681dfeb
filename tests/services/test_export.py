"""Export against the hand-built database in export_fixtures.py; expected rows are worked out in comments."""
import csv
import json
import math

import pytest
from export_fixtures import SYSTEM, build_labelled_db

from labeler.errors import InputError
from labeler.services.labels.export import (ExportOptions, ExportResult, export, preference_rows, rating_rows,
                                            unpaired_rows)


@pytest.fixture
def labelled(db):
    build_labelled_db(db)
    return db


def pref(prompt, chosen, rejected, source="rank", **extra):
    # The fixture's answers were generated for the queue (responses.source 'generated'): source 'rank'.
    return {"prompt": prompt, "chosen": chosen, "rejected": rejected, "source": source, **extra}


# Item 1, pairs by response ids: (1,2) alice, bob, carol all 1>2 -> great>bad, agreement 3/3.
# (1,3) alice 1>3, bob 1>3, carol 3>1 -> great>okay, 2/3. (2,3) alice 3>2, bob tie, carol 3>2 -> okay>bad, 2/3.
# Item 2: the imported ranking [[5],[4]] -> "-fine" > "=SUM(A1)". Item 3 belongs to project `other`.
ALL_PAIRS = [
    pref("Review Alien", "great", "bad"),
    pref("Review Alien", "great", "okay"),
    pref("Review Alien", "okay", "bad"),
    pref("Review Heat.", "-fine", "=SUM(A1)"),
]


def test_preferences_from_rankings_majority_per_pair(labelled):
    assert preference_rows(labelled) == ALL_PAIRS
    assert preference_rows(labelled, "other") == [pref("Other prompt", "x", "y")]


def test_preferences_annotator_filter_and_disagreement(labelled):
    # alice and carol disagree on (1,3): 1 vote each, no majority -> dropped; the import has no user -> excluded.
    assert preference_rows(labelled, options=ExportOptions(annotators=("alice", "carol"))) == [
        pref("Review Alien", "great", "bad"),
        pref("Review Alien", "okay", "bad"),
    ]
    # alice and bob: (2,3) is alice 3>2 and bob tie -> okay>bad with agreement 1/2; min_agreement 0.6 drops it.
    both = ExportOptions(annotators="alice,bob")
    assert preference_rows(labelled, options=both) == ALL_PAIRS[:3]
    assert preference_rows(labelled, options=ExportOptions(annotators=("alice", "bob"), min_agreement=0.6)) == ALL_PAIRS[:2]


def test_preferences_min_annotators_min_agreement_and_dates(labelled):
    # min_annotators 2: the imported pair was judged once.
    assert preference_rows(labelled, options=ExportOptions(min_annotators=2)) == ALL_PAIRS[:3]
    # min_agreement 0.7: only (1,2) at 3/3 and the import at 1/1 pass; 2/3 = 0.667 does not.
    assert preference_rows(labelled, options=ExportOptions(min_agreement=0.7)) == [ALL_PAIRS[0], ALL_PAIRS[3]]
    # Only bob's ranking [[1],[2,3]] falls in 2025-01-11..2025-01-15 (until is inclusive of the day): (2,3) is tied.
    window = ExportOptions(since="2025-01-11", until="2025-01-12")
    assert preference_rows(labelled, options=window) == ALL_PAIRS[:2]
    # A datetime bound is exact: until 09:00:00 on the 12th still includes bob's 09:00:00.000 label.
    assert preference_rows(labelled, options=ExportOptions(since="2025-01-11T00:00", until="2025-01-12T08:59:59")) == []
    assert preference_rows(labelled, options=ExportOptions(since="2025-01-21")) == [ALL_PAIRS[3]]


def test_preferences_conversational(labelled):
    rows = preference_rows(labelled, options=ExportOptions(conversational=True))
    alien = [{"role": "user", "content": "Review Alien"}]
    assert rows[0] == pref(alien, [{"role": "assistant", "content": "great"}], [{"role": "assistant", "content": "bad"}])
    assert rows[3] == pref(
        [SYSTEM, {"role": "user", "content": "Review Heat."}],
        [{"role": "assistant", "content": "-fine"}],
        [{"role": "assistant", "content": "=SUM(A1)"}],
    )


def test_preferences_with_rating_pairs(labelled):
    # Mean ratings on prompt 1: great 6.5, bad 3, okay 4 -> great>bad 3.5, great>okay 2.5, okay>bad 1.0.
    # The rankings order the same three pairs the same way: each is written once (issue 24 item 8: it was
    # written twice, margins 0.0 and 3.5), with the ratings' margin. Prompt 2 has one rated response: no
    # rating pair, so its ranking pair keeps margin 0 (one schema for the file).
    rows = preference_rows(labelled, options=ExportOptions(include_rating_pairs=True))
    assert rows == [
        pref("Review Alien", "great", "bad", margin=3.5),
        pref("Review Alien", "great", "okay", margin=2.5),
        pref("Review Alien", "okay", "bad", margin=1.0),
        pref("Review Heat.", "-fine", "=SUM(A1)", margin=0.0),
    ]
    # bob alone: his ratings (great 7, bad 4) give great>bad by 3.0, which his ranking (great > bad = okay)
    # gives too: one row with that margin; his ranking's great>okay has no rating pair (okay unrated): margin 0.
    bob = preference_rows(labelled, options=ExportOptions(include_rating_pairs=True, annotators=["bob"]))
    assert bob == [pref("Review Alien", "great", "bad", margin=3.0), pref("Review Alien", "great", "okay", margin=0.0)]


def test_rating_rows(labelled):
    # great: 6, 7 -> mean 6.5, population std 0.5; bad: 2, 4 -> 3, 1.0; okay: 4 alone; "=SUM(A1)": carol 5.
    assert rating_rows(labelled) == [
        {"prompt": "Review Alien", "completion": "great", "score": 6.5, "n": 2, "std": 0.5},
        {"prompt": "Review Alien", "completion": "bad", "score": 3.0, "n": 2, "std": 1.0},
        {"prompt": "Review Alien", "completion": "okay", "score": 4.0, "n": 1, "std": 0.0},
        {"prompt": "Review Heat.", "completion": "=SUM(A1)", "score": 5.0, "n": 1, "std": 0.0},
    ]
    assert rating_rows(labelled, "other") == [{"prompt": "Other prompt", "completion": "x", "score": 1.0, "n": 1, "std": 0.0}]
    # agreement = 1 - std / (7 - 1): great 1 - 0.5/6 = 0.917, bad 1 - 1/6 = 0.833 -> min 0.9 drops bad.
    assert [r["completion"] for r in rating_rows(labelled, options=ExportOptions(min_agreement=0.9))] == ["great", "okay", "=SUM(A1)"]
    assert [r["completion"] for r in rating_rows(labelled, options=ExportOptions(min_annotators=2))] == ["great", "bad"]
    bob_only = rating_rows(labelled, options=ExportOptions(annotators=["bob"]))
    assert [(r["completion"], r["score"], r["n"]) for r in bob_only] == [("great", 7.0, 1), ("bad", 4.0, 1)]


def test_rating_rows_zscored(labelled):
    # alice's project ratings 6, 2, 4: mean 4, population std sqrt((4 + 4 + 0) / 3) = 1.63299.
    # bob's 7, 4: mean 5.5, std 1.5. carol rated once (std 0) -> z = 0.
    # great: alice (6-4)/1.63299 = 1.22474, bob (7-5.5)/1.5 = 1 -> mean 1.11237, std 0.11237.
    # bad: -1.22474 and -1 -> -1.11237; okay: alice (4-4) = 0; "=SUM(A1)": carol 0.
    rows = rating_rows(labelled, options=ExportOptions(zscore=True))
    assert [r["score"] for r in rows] == pytest.approx([1.11237, -1.11237, 0.0, 0.0], abs=1e-5)
    assert [r["std"] for r in rows] == pytest.approx([0.11237, 0.11237, 0.0, 0.0], abs=1e-5)


def test_unpaired_rows_threshold(labelled):
    # Default threshold: the midpoint (1 + 7) / 2 = 4, inclusive: 6.5 yes, 3 no, 4 yes, 5 yes.
    assert unpaired_rows(labelled) == [
        {"prompt": "Review Alien", "completion": "great", "label": True},
        {"prompt": "Review Alien", "completion": "bad", "label": False},
        {"prompt": "Review Alien", "completion": "okay", "label": True},
        {"prompt": "Review Heat.", "completion": "=SUM(A1)", "label": True},
    ]
    assert [r["label"] for r in unpaired_rows(labelled, options=ExportOptions(threshold=5))] == [True, False, False, True]
    # z-scored, threshold 0: 1.11 yes, -1.11 no, 0 yes, 0 yes.
    assert [r["label"] for r in unpaired_rows(labelled, options=ExportOptions(zscore=True))] == [True, False, True, True]
    conversational = unpaired_rows(labelled, options=ExportOptions(conversational=True))
    assert conversational[0]["completion"] == [{"role": "assistant", "content": "great"}]


def test_jsonl_and_parquet_round_trip(labelled, tmp_path):
    import pyarrow.parquet as pq

    result = export(labelled, "default", "preferences", "jsonl", tmp_path / "p.jsonl")
    assert result == ExportResult(path=tmp_path / "p.jsonl", rows=4)
    lines = (tmp_path / "p.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == ALL_PAIRS
    options = ExportOptions(conversational=True)
    export(labelled, "default", "preferences", "parquet", tmp_path / "p.parquet", options)
    assert pq.read_table(tmp_path / "p.parquet").to_pylist() == preference_rows(labelled, options=options)
    export(labelled, "default", "unpaired", "parquet", tmp_path / "u.parquet")
    table = pq.read_table(tmp_path / "u.parquet")
    assert str(table.schema.field("label").type) == "bool" and table.to_pylist() == unpaired_rows(labelled)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.jsonl", "p.parquet", "studio.db", "studio.db-shm", "studio.db-wal", "u.parquet"]


def test_csv_neutralises_formulas(labelled, tmp_path):
    export(labelled, "default", "preferences", "csv", tmp_path / "p.csv")
    with (tmp_path / "p.csv").open(encoding="utf-8", newline="") as file:
        rows = list(csv.DictReader(file))
    assert rows[3] == {"prompt": "Review Heat.", "chosen": "'-fine", "rejected": "'=SUM(A1)", "source": "rank"}
    assert rows[0] == {"prompt": "Review Alien", "chosen": "great", "rejected": "bad", "source": "rank"}
    # Negative numbers are numbers, not formulas: z-scores stay readable.
    export(labelled, "default", "ratings", "csv", tmp_path / "r.csv", ExportOptions(zscore=True))
    with (tmp_path / "r.csv").open(encoding="utf-8", newline="") as file:
        scores = [row["score"] for row in csv.DictReader(file)]
    assert scores[1].startswith("-1.112") and math.isclose(float(scores[1]), -1.11237, abs_tol=1e-5)


def test_hf_dataset_split_by_prompt_is_seeded(labelled, tmp_path):
    import datasets

    add_prompts_with_labels(labelled, count=8)
    result = export(labelled, "default", "ratings", "hf", tmp_path / "ds", ExportOptions(test_size=0.25, seed=3))
    loaded = datasets.load_from_disk(str(tmp_path / "ds"))
    train, test = loaded["train"].to_list(), loaded["test"].to_list()
    assert result.rows == len(train) + len(test) == 12  # 4 from the fixture + 8 added
    assert round(0.25 * 12) == 3 <= len(test) <= 4  # whole prompts: the target may be overshot by one prompt
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in test}
    assert sorted(map(json.dumps, train + test)) == sorted(map(json.dumps, rating_rows(labelled)))
    # Same seed, same split; rewriting an existing dataset folder is allowed.
    export(labelled, "default", "ratings", "hf", tmp_path / "ds", ExportOptions(test_size=0.25, seed=3))
    assert datasets.load_from_disk(str(tmp_path / "ds"))["test"].to_list() == test
    export(labelled, "default", "ratings", "hf", tmp_path / "ds0", ExportOptions(test_size=0.0))
    assert list(datasets.load_from_disk(str(tmp_path / "ds0"))) == ["train"]


def add_prompts_with_labels(db, count):
    """`count` more prompts of project default, each with one response rated 5 by alice."""
    with db.conn:
        for n in range(count):
            pid = db.execute("INSERT INTO prompts (project_id, text, text_hash) VALUES (1, ?, ?)", [f"extra {n}", f"e{n}"]).lastrowid
            rid = db.execute("INSERT INTO responses (prompt_id, text) VALUES (?, ?)", [pid, f"answer {n}"]).lastrowid
            iid = db.execute(
                "INSERT INTO items (project_id, kind, prompt_id, response_ids_json) VALUES (1, 'rating', ?, ?)", [pid, f"[{rid}]"]
            ).lastrowid
            db.execute("INSERT INTO ratings (item_id, response_id, user_id, score) VALUES (?, ?, 1, 5)", [iid, rid])


def test_hf_refuses_to_replace_an_unrelated_folder(labelled, tmp_path):
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "notes.txt").write_text("keep me")
    with pytest.raises(InputError, match="refusing to overwrite"):
        export(labelled, "default", "ratings", "hf", tmp_path / "precious")
    assert (tmp_path / "precious" / "notes.txt").read_text() == "keep me"


def test_bad_options_and_empty_exports(labelled, tmp_path, db_path):
    with pytest.raises(InputError, match="field 'since'"):
        ExportOptions(since="last tuesday")
    with pytest.raises(InputError, match="field 'min_agreement'"):
        ExportOptions(min_agreement=1.5)
    with pytest.raises(InputError, match="field 'min_annotators'"):
        ExportOptions(min_annotators=0)
    with pytest.raises(InputError, match="field 'format'"):
        export(labelled, "default", "ratings", "xlsx", tmp_path / "x")
    with pytest.raises(InputError, match="nothing to export"):
        export(labelled, "default", "ratings", "jsonl", tmp_path / "r.jsonl", ExportOptions(annotators=["nobody"]))
    assert not (tmp_path / "r.jsonl").exists()


def test_options_have_help_and_accept_date_objects(labelled):
    import dataclasses
    from datetime import date, datetime, timezone

    assert all(f.metadata.get("help") for f in dataclasses.fields(ExportOptions))
    as_objects = ExportOptions(since=date(2025, 1, 11), until=datetime(2025, 1, 12, 9, 0, tzinfo=timezone.utc))
    assert (as_objects.since, as_objects.until) == ("2025-01-11", "2025-01-12T09:00:00+00:00")
    assert preference_rows(labelled, options=as_objects) == ALL_PAIRS[:2]  # bob's ranking only, as above


@pytest.mark.parametrize("source", ["chat", "arena"])
def test_client_written_chat_and_arena_responses_are_not_exported(labelled, source):
    # Issue 10 item 8: a chat or arena response whose text the server did not generate (server_generated = 0)
    # is no training row; the same rows marked are. Responses 1 "great" (ranked and rated) and 5 "-fine".
    before_prefs, before_ratings = preference_rows(labelled), rating_rows(labelled)
    forged = {"great", "-fine"}
    labelled.execute("UPDATE responses SET source = ?, server_generated = 0 WHERE id IN (1, 5)", [source])
    assert preference_rows(labelled) == [pref("Review Alien", "okay", "bad")] + [
        row for row in before_prefs if row["prompt"] != "Review Alien" and not forged & {row["chosen"], row["rejected"]}]
    assert rating_rows(labelled) == [row for row in before_ratings if row["completion"] != "great"]
    assert len(rating_rows(labelled)) == len(before_ratings) - 1
    labelled.execute("UPDATE responses SET server_generated = 1 WHERE id IN (1, 5)")
    assert (preference_rows(labelled), rating_rows(labelled)) == (before_prefs, before_ratings)


def test_held_out_prompts_labels_are_left_out_unless_asked_for(labelled, tmp_path):
    # Prompt 2 ("Review Heat.") held out: evaluation answers it, so no label of it may reach training, nor a
    # dataset exported for people (issue 48: an arena vote on a held-out prompt was in a default export).
    labelled.execute("UPDATE prompts SET split = 'test' WHERE id = 2")
    assert preference_rows(labelled) == ALL_PAIRS[:3]
    assert [r["completion"] for r in unpaired_rows(labelled)] == ["great", "bad", "okay"]
    assert [r["completion"] for r in rating_rows(labelled)] == ["great", "bad", "okay"]
    out = tmp_path / "p.jsonl"
    assert export(labelled, "default", "preferences", "jsonl", out).rows == 3
    assert [json.loads(line) for line in out.read_text().splitlines()] == ALL_PAIRS[:3]
    # Asked for (evaluation labels, `export --include-heldout`): every label.
    evaluation = ExportOptions(include_heldout=True)
    assert preference_rows(labelled, options=evaluation) == ALL_PAIRS
    assert len(unpaired_rows(labelled, options=evaluation)) == 4


def test_training_rows_never_include_held_out_prompts(labelled):
    from types import SimpleNamespace

    from labeler.services.labels.export import training_options

    labelled.execute("UPDATE prompts SET split = 'test' WHERE id = 2")
    job = SimpleNamespace(annotators="", min_annotators=1, min_agreement=None, include_rating_pairs=False, seed=0)
    options = training_options(job, include_heldout=True)
    assert options.include_heldout is False
    assert preference_rows(labelled, options=options) == ALL_PAIRS[:3]
