"""generate_responses: stored rows, settings, items, resume, bad input."""
from __future__ import annotations

import json

import pytest

from labeler.services.serving import models
from labeler.services.data import prompts
from labeler.errors import InputError
from labeler.services.serving.generation import generate_responses
from rlhf.configs import GenerationSettings

SETTINGS = GenerationSettings(max_new_tokens=4, batch_size=3, seed=5)


@pytest.fixture
def tiny_db(db, tiny_model_dir):
    models.register_model(db, "tiny", str(tiny_model_dir), "policy")
    prompts.add_prompts(db, ["First prompt", "Second prompt", "Third prompt"])
    return db


def test_generate_stores_responses_settings_and_items(tiny_db):
    db = tiny_db
    seen = []
    ids = generate_responses(db, "default", "tiny", n_per_prompt=2, settings=SETTINGS, limit=2, progress=lambda d, t: seen.append((d, t)))
    # 2 prompts x 2 responses, in batches of 3: progress once loaded (0), after 3 and after 4.
    assert seen == [(0, 4), (3, 4), (4, 4)]
    rows = [dict(r) for r in db.execute("SELECT id, prompt_id, model, settings_json, source FROM responses ORDER BY id")]
    assert [r["id"] for r in rows] == ids
    assert [(r["prompt_id"], r["model"], r["source"]) for r in rows] == [(1, "tiny", "generated")] * 2 + [(2, "tiny", "generated")] * 2
    stored = [json.loads(r["settings_json"]) for r in rows]
    # The first batch used seed 5 (+0 responses before, +0 offset); the second seed 5 + 3.
    assert [s["seed"] for s in stored] == [5, 5, 5, 8]
    settings = {k: v for k, v in stored[0].items() if k != "prompt_format"}
    assert settings == {**{k: getattr(SETTINGS, k) for k in settings}, "seed": 5}
    assert stored[0]["prompt_format"] == "chat"  # the default project's format
    # One rating item per response, one ranking item per prompt (its 2 responses).
    kinds = db.execute("SELECT kind, COUNT(*) FROM items GROUP BY kind ORDER BY kind").fetchall()
    assert [tuple(k) for k in kinds] == [("ranking", 2), ("rating", 4)]


def test_rerun_tops_up_only_missing_responses(tiny_db):
    db = tiny_db
    first = generate_responses(db, model="tiny", n_per_prompt=1, settings=SETTINGS)
    assert len(first) == 3
    second = generate_responses(db, model="tiny", n_per_prompt=2, settings=SETTINGS)
    assert len(second) == 3  # one more per prompt, not two
    assert generate_responses(db, model="tiny", n_per_prompt=2, settings=SETTINGS) == []
    # Topping up used fresh seeds: no response was generated with a seed used before for its prompt.
    used = db.execute("SELECT prompt_id, json_extract(settings_json, '$.seed') FROM responses").fetchall()
    assert len(set(map(tuple, used))) == len(used)


def test_explicit_prompt_ids_and_greedy_matches_library(tiny_db, tiny_model_dir):
    from rlhf.generation import build_prompt_ids, decode_responses, generate_batch
    from rlhf.loading import load_causal_lm, load_tokenizer

    greedy = GenerationSettings(max_new_tokens=5, do_sample=False)
    generate_responses(tiny_db, model="tiny", n_per_prompt=1, settings=greedy, prompt_ids=[3, 1])
    texts = {r["prompt_id"]: r["text"] for r in tiny_db.execute("SELECT prompt_id, text FROM responses")}
    tokenizer = load_tokenizer(tiny_model_dir)
    lm = load_causal_lm(tiny_model_dir)
    expected = decode_responses(tokenizer, generate_batch(lm, tokenizer, [build_prompt_ids(tokenizer, "Third prompt")], greedy))
    assert set(texts) == {1, 3} and texts[3] == expected[0]


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"prompt_ids": [1, 99]}, "prompt_ids"),
        ({"n_per_prompt": 0}, "n_per_prompt"),
        ({"limit": 0}, "limit"),
        ({"model": "no-such-model"}, "model"),
        ({"project": "nope"}, "project"),
        ({"ranking_size": 1}, "ranking_size"),
    ],
)
def test_bad_input_writes_nothing(tiny_db, kwargs, field):
    with pytest.raises(InputError) as error:
        generate_responses(tiny_db, **{"model": "tiny", "settings": SETTINGS, **kwargs})
    assert error.value.field == field
    assert tiny_db["responses"].count == 0 and tiny_db["items"].count == 0


def test_each_batch_is_queued_before_the_next_is_generated(tiny_db):
    db = tiny_db
    rating_items_seen = []

    def progress(done, total):
        rating_items_seen.append(db.execute("SELECT COUNT(*) FROM items WHERE kind = 'rating'").fetchone()[0])

    generate_responses(db, "default", "tiny", n_per_prompt=2, settings=SETTINGS, limit=2, progress=progress)
    # Batches of 3 then 1: the first batch's answers are rateable while the second is still to come.
    assert rating_items_seen == [0, 3, 4]
    # Prompt 2's answers were split across the two batches and still form one ranking item.
    rankings = [json.loads(r[0]) for r in db.execute("SELECT response_ids_json FROM items WHERE kind = 'ranking' ORDER BY prompt_id")]
    assert rankings == [[1, 2], [3, 4]]


def test_a_prompt_split_across_batches_is_ranked_in_one_item_of_ranking_size(tiny_db):
    db = tiny_db
    # 8 answers to each of 2 prompts in batches of 3: prompt 1's answers end in the third batch, prompt 2's
    # start there; each prompt still gets one ranking item with all 8.
    ids = generate_responses(db, "default", "tiny", n_per_prompt=8, settings=SETTINGS, limit=2, ranking_size=8)
    rankings = [json.loads(r[0]) for r in db.execute("SELECT response_ids_json FROM items WHERE kind = 'ranking' ORDER BY prompt_id")]
    assert rankings == [ids[:8], ids[8:]]
    # With the default size of 4, the same 8 answers make two rankings of 4 per prompt.
    generate_responses(db, "default", "tiny", n_per_prompt=8, settings=SETTINGS, prompt_ids=[3])
    sizes = [len(json.loads(r[0])) for r in db.execute("SELECT response_ids_json FROM items WHERE kind = 'ranking' AND prompt_id = 3")]
    assert sizes == [4, 4]


def test_the_last_import_batch_and_a_kept_model(tiny_db, tiny_model_dir, tmp_path, monkeypatch):
    """Issue 14 item 5: generate for the prompts just uploaded, with a model loaded once for several calls."""
    from labeler.services.serving.chat import ModelCache
    from labeler.services.data.prompts import last_import_prompt_ids

    db = tiny_db
    generate_responses(db, "default", "tiny", n_per_prompt=1, settings=SETTINGS, limit=1)  # prompt 1 answered
    upload = tmp_path / "new.txt"
    upload.write_text("New one\nNew two\nFirst prompt\n", encoding="utf-8")  # the third is a duplicate
    prompts.import_prompts(db, str(upload), "default", source="new.txt")
    assert last_import_prompt_ids(db, "default") == [4, 5]

    from labeler.services.serving import inference

    loads = []
    cache = ModelCache(loader=lambda path, kind, device: (loads.append(path), inference.load(path, kind, device))[1])
    loader = cache.get
    ids = generate_responses(db, "default", "tiny", n_per_prompt=1, settings=SETTINGS,
                             within_prompt_ids=last_import_prompt_ids(db, "default"), loader=loader)
    assert [r[0] for r in db.execute(f"SELECT prompt_id FROM responses WHERE id IN ({','.join('?' * len(ids))})"
                                     " ORDER BY id", ids)] == [4, 5]
    # Again, a batch already answered: nothing to do, nothing loaded.
    assert generate_responses(db, "default", "tiny", n_per_prompt=1, settings=SETTINGS,
                              within_prompt_ids=[4, 5], loader=loader) == []
    generate_responses(db, "default", "tiny", n_per_prompt=2, settings=SETTINGS, within_prompt_ids=[4], loader=loader)
    assert loads == [str(tiny_model_dir.resolve())]  # two generations, one load
