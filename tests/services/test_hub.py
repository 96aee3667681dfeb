"""Dataset and model cards, and the Hub push paths, with a fake HfApi (the network is not reachable here).

What these tests cannot show: that the real Hub accepts the calls (authentication, repository creation, the upload
itself) and that datasets' push_to_hub keeps the card's text when it adds its metadata; they check that the right
calls are made, in the right order, with the right arguments and files.
"""
from __future__ import annotations

import inspect
import shutil
from pathlib import Path

import datasets
import huggingface_hub
import pytest
import yaml
from export_fixtures import build_labelled_db

from labeler.cli import main
from labeler.services.evals import evaluation
from labeler.services.training import hub
from labeler.services.serving import models
from labeler.errors import InputError
from labeler.services.labels.export import ExportOptions, export

REAL_API = huggingface_hub.HfApi  # before any test patches the module's name
TINY = Path(__file__).resolve().parent.parent / "fixtures" / "trl_0_11_4" / "policy"


def _real_signature_accepts(function, *args, **kwargs) -> None:
    """The fake must not accept what the real method would refuse: bind the call to the real signature."""
    inspect.signature(function).bind(None, *args, **kwargs)


class FakeApi:
    """Records HfApi calls (checked against the installed huggingface_hub's signatures); README contents are read
    at call time (what would have been uploaded)."""

    def __init__(self, token=None):
        self.token, self.calls = token, []
        FakeApi.last = self

    def create_repo(self, repo_id, **kwargs):
        _real_signature_accepts(REAL_API.create_repo, repo_id, **kwargs)
        self.calls.append(("create_repo", repo_id, kwargs))

    def upload_file(self, **kwargs):
        _real_signature_accepts(REAL_API.upload_file, **kwargs)
        self.calls.append(("upload_file", Path(kwargs["path_or_fileobj"]).read_text(), kwargs))

    def upload_folder(self, **kwargs):
        _real_signature_accepts(REAL_API.upload_folder, **kwargs)
        files = sorted(p.name for p in Path(kwargs["folder_path"]).iterdir())
        self.calls.append(("upload_folder", files, kwargs))


@pytest.fixture
def pushed(monkeypatch):
    """datasets' push_to_hub replaced by a recorder: (dataset dict, repo_id, kwargs) per call."""
    calls = []
    real = datasets.DatasetDict.push_to_hub

    def record(self, repo_id, **kwargs):
        _real_signature_accepts(real, repo_id, **kwargs)
        calls.append((self, repo_id, kwargs))

    monkeypatch.setattr(datasets.DatasetDict, "push_to_hub", record)
    return calls


@pytest.fixture
def labelled(db):
    build_labelled_db(db)
    return db


def _front_matter(text: str) -> dict:
    return yaml.safe_load(text.split("---\n")[1])


def test_hf_export_gets_a_dataset_card(labelled, tmp_path):
    options = ExportOptions(min_annotators=2, test_size=0.0)
    result = export(labelled, "default", "preferences", "hf", tmp_path / "prefs", options)
    card = (result.path / "README.md").read_text()
    # license: the labels' owner decides, so none is written; 3 rows -> the Hub's smallest size bucket
    assert _front_matter(card) == {"pretty_name": "default: preferences", "task_categories": ["text-generation"],
                                   "size_categories": ["n<1K"], "tags": ["rlhf-studio", "trl", "preferences"]}
    assert "project `default`" in card and "DPOTrainer or RewardTrainer" in card
    # Project default: 6 ratings by alice, bob, carol; 4 rankings (3 by alice, bob, carol + 1 imported);
    # project other's labels are not counted. Pairs in >= 2 rankings: item 1's three pairs -> 3 train rows.
    for line in ("| ratings | 6 |", "| raters | 3 |", "| rankings (incl. pairwise votes) | 4 |", "| rankers | 3 |",
                 "| annotators | 3 |", "| rankings: items with 2+ rankers | 1 |", "| train | 3 |", "| min_annotators | 2 |",
                 "| test_size | 0 |", "| chosen | the answer the annotators preferred |"):
        assert line in card, line
    assert "margin" not in card  # no rating pairs asked for
    assert "preferences" in huggingface_hub.DatasetCard(card).data.tags  # the Hub library parses it
    assert datasets.load_from_disk(str(result.path))["train"].num_rows == 3  # the card does not disturb loading


def test_export_license_goes_into_the_card_and_a_bad_one_is_refused(labelled, tmp_path, capsys):
    db_path = labelled.conn.execute("PRAGMA database_list").fetchone()[2]
    out = tmp_path / "prefs"
    assert main(["export", "--db", db_path, "--kind", "preferences", "--format", "hf", "--out", str(out),
                 "--test-size", "0", "--license", "cc-by-4.0"]) == 0
    card = (out / "README.md").read_text()
    assert _front_matter(card)["license"] == "cc-by-4.0"
    assert "| license |" not in card  # the license is the card's metadata, not one of the export's filters
    assert huggingface_hub.DatasetCard(card).data.license == "cc-by-4.0"
    with pytest.raises(InputError, match="Hub license id") as refused:
        ExportOptions(license="CC BY 4.0")
    assert refused.value.field == "license"
    assert main(["export", "--db", db_path, "--kind", "preferences", "--format", "hf", "--out", str(tmp_path / "bad"),
                 "--license", "CC BY 4.0"]) != 0
    assert "license" in capsys.readouterr().err and not (tmp_path / "bad").exists()  # nothing written


def test_push_export_uploads_the_card_then_the_splits(labelled, tmp_path, pushed):
    out = export(labelled, "default", "ratings", "hf", tmp_path / "ratings", ExportOptions(test_size=0.25)).path
    api = FakeApi()
    url = hub.push_export(out, "me/ratings", private=True, token="tok", api=api)
    assert url == "https://huggingface.co/datasets/me/ratings"
    assert [c[0] for c in api.calls] == ["create_repo", "upload_file"]
    assert api.calls[0][1:] == ("me/ratings", {"repo_type": "dataset", "private": True, "exist_ok": True})
    text, kwargs = api.calls[1][1:]
    assert text == (out / "README.md").read_text() and "| ratings | 6 |" in text
    assert {k: kwargs[k] for k in ("path_in_repo", "repo_id", "repo_type")} == {
        "path_in_repo": "README.md", "repo_id": "me/ratings", "repo_type": "dataset"}
    [(dataset, repo_id, kwargs)] = pushed
    assert repo_id == "me/ratings" and kwargs == {"private": True, "token": "tok"}
    assert sorted(dataset) == ["test", "train"] and sum(d.num_rows for d in dataset.values()) == 4


def test_push_export_refuses_bad_input(labelled, tmp_path, pushed):
    export(labelled, "default", "ratings", "jsonl", tmp_path / "r.jsonl")
    with pytest.raises(InputError, match="push needs --format hf"):
        hub.push_export(tmp_path / "r.jsonl", "me/r", api=FakeApi())
    with pytest.raises(InputError, match="owner/name"):
        hub.push_export(tmp_path, "not a repo", api=FakeApi())
    assert pushed == []


def test_cli_export_push_to_hub(labelled, db_path, tmp_path, monkeypatch, pushed, capsys):
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    out = tmp_path / "prefs"
    assert main(["export", "--db", db_path, "--format", "hf", "--out", str(out), "--push-to-hub", "me/prefs",
                 "--private"]) == 0
    assert "pushed to https://huggingface.co/datasets/me/prefs" in capsys.readouterr().out
    assert [c[0] for c in FakeApi.last.calls] == ["create_repo", "upload_file"] and pushed[0][1] == "me/prefs"
    # Refused before anything is written: a file format cannot be pushed, nor a bad repository id.
    for argv in (["--format", "jsonl", "--out", str(tmp_path / "x.jsonl"), "--push-to-hub", "me/x"],
                 ["--format", "hf", "--out", str(tmp_path / "y"), "--push-to-hub", "nope"]):
        assert main(["export", "--db", db_path, *argv]) == 2
    assert not (tmp_path / "x.jsonl").exists() and not (tmp_path / "y").exists()
    assert len(pushed) == 1


def _trained(db, tmp_path) -> Path:
    """A model folder registered as a finished DPO run's output."""
    folder = tmp_path / "dpo-out"
    shutil.copytree(TINY, folder)
    with db.conn:
        run_id = db.execute("INSERT INTO runs (project_id, stage, name, status, config_json, started_at, ended_at)"
                            " VALUES (1, 'dpo', 'dpo-1', 'succeeded', '{\"beta\": 0.1, \"epochs\": 2}',"
                            " '2026-01-01T10:00', '2026-01-01T10:05')").lastrowid
    models.register_model(db, "tiny-dpo", str(folder), "policy", base_model="default", run_id=run_id,
                          config={"beta": 0.1}, metrics={"train/loss": 0.5}, data_snapshot="preferences:12:abcd1234")
    assert not (folder / "README.md").exists()  # registering stores a row; the caller writes the card
    assert hub.write_registered_model_card(db, "tiny-dpo") == folder / "README.md"
    return folder


def test_registered_model_gets_a_card_refreshed_by_evaluations(db, tmp_path):
    folder = _trained(db, tmp_path)
    card = (folder / "README.md").read_text()
    assert {"rlhf-studio", "policy"} <= set(_front_matter(card)["tags"])
    for text in ("DPO (DPOTrainer)", "Run 1 (dpo-1) in project `default`, succeeded", "| beta | 0.1 |",
                 "| epochs | 2 |", "| train/loss | 0.5 |", "12 preferences rows (hash `abcd1234`)"):
        assert text in card, text
    assert "## Evaluation\n\n_none_" in card
    meta = huggingface_hub.ModelCard(card).data
    assert meta.library_name == "transformers" and meta.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert _front_matter(card) == {
        "license": "apache-2.0",  # the base's: 'default' is SmolLM2-135M-Instruct (Apache 2.0)
        "library_name": "transformers", "pipeline_tag": "text-generation",
        "base_model": "HuggingFaceTB/SmolLM2-135M-Instruct", "model_name": "tiny-dpo",
        "tags": ["rlhf-studio", "trl", "policy", "dpo"]}
    assert meta.license == "apache-2.0" and meta.pipeline_tag == "text-generation"  # huggingface_hub reads them

    evaluation._store(db, "default", "tiny-dpo", None, 1, {"samples": 4}, {"eval/reward_mean": 0.75}, [])
    assert (folder / "README.md").read_text() == card  # storing an evaluation rewrites no card
    # The caller refreshes the cards of the models it evaluated; an unregistered folder has none.
    assert hub.write_model_cards(db, ["tiny-dpo", str(tmp_path / "elsewhere"), "tiny-dpo"]) == [folder / "README.md"]
    card = (folder / "README.md").read_text()
    assert "| mean score |" in card and "| tiny-dpo | 0.75 |" in card


def test_a_foreign_readme_is_kept(db, tmp_path):
    folder = tmp_path / "downloaded"
    shutil.copytree(TINY, folder)
    (folder / "README.md").write_text("---\nlicense: apache-2.0\n---\n# Someone's model\n")
    models.register_model(db, "theirs", str(folder), "base")
    assert hub.write_registered_model_card(db, "theirs") is None
    assert (folder / "README.md").read_text().startswith("---\nlicense: apache-2.0")


def test_push_model_uploads_the_folder_with_its_card(db, tmp_path, monkeypatch, capsys):
    folder = _trained(db, tmp_path)
    (folder / "README.md").unlink()
    (folder / "trainer_state.pt").write_bytes(b"not for the hub")
    api = FakeApi()
    assert hub.push_model(db, "tiny-dpo", "me/tiny-dpo", private=True, api=api) == "https://huggingface.co/me/tiny-dpo"
    assert api.calls[0] == ("create_repo", "me/tiny-dpo", {"repo_type": "model", "private": True, "exist_ok": True})
    name, files, kwargs = api.calls[1]
    assert name == "upload_folder" and "README.md" in files and "model.safetensors" in files  # card rewritten
    assert kwargs["folder_path"] == str(folder) and kwargs["repo_id"] == "me/tiny-dpo"
    assert kwargs["repo_type"] == "model" and "*.pt" in kwargs["ignore_patterns"]

    with pytest.raises(InputError, match="not a local folder"):
        hub.push_model(db, "default", "me/default", api=FakeApi())

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    db_path = db.conn.execute("PRAGMA database_list").fetchone()[2]
    assert main(["models", "push", "tiny-dpo", "me/t", "--db", db_path]) == 0
    assert "pushed tiny-dpo to https://huggingface.co/me/t" in capsys.readouterr().out
    assert main(["models", "push", "tiny-dpo", "bad id", "--db", db_path]) == 2


def test_prompts_import_from_a_hub_dataset_id(db, monkeypatch, tmp_path):
    """A name that is no local file and looks like owner/name is read with datasets.load_dataset (the Hub, or its
    cache offline); a failure is one InputError naming the id. The real download is not tested (no network)."""
    from labeler.services.data.prompts import import_prompts, list_prompts

    asked = []

    def load_dataset(repo_id):
        asked.append(repo_id)
        if repo_id != "me/prompts":
            raise ConnectionError("Couldn't reach 'me/missing' on the Hub (LocalEntryNotFoundError)\nmore")
        return datasets.DatasetDict({"train": datasets.Dataset.from_list([{"prompt": "Review Alien"}]),
                                     "test": datasets.Dataset.from_list([{"prompt": "Review Heat."}])})

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.chdir(tmp_path)  # no local me/prompts folder
    assert import_prompts(db, "me/prompts").added == 2
    assert [p["text"] for p in list_prompts(db)] == ["Review Alien", "Review Heat."]
    with pytest.raises(InputError, match=r"^me/missing: no such local file or folder, and the Hub dataset could not "
                                         r"be loaded \(ConnectionError: Couldn't reach 'me/missing' on the Hub"):
        import_prompts(db, "me/missing")
    with pytest.raises(InputError, match="file not found"):  # a file name is never taken for a Hub id
        import_prompts(db, "data/prompts.csv")
    assert asked == ["me/prompts", "me/missing"]


def test_reward_and_adapter_cards_name_their_pipeline_and_library(db, tmp_path):
    """A reward model is a text classifier for the Hub; an adapter is a peft model; a registered base without
    a run gets no stage tag."""
    rm = tmp_path / "rm"
    shutil.copytree(TINY, rm)
    models.register_model(db, "tiny-rm", str(rm), "reward", base_model="default-encoder")
    hub.write_registered_model_card(db, "tiny-rm")
    meta = _front_matter((rm / "README.md").read_text())
    assert meta["pipeline_tag"] == "text-classification" and meta["library_name"] == "transformers"
    assert meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2" and meta["license"] == "apache-2.0"
    assert meta["tags"] == ["rlhf-studio", "trl", "reward"]
    assert "AutoModelForSequenceClassification" in (rm / "README.md").read_text()

    adapter = tmp_path / "adapter"
    shutil.copytree(TINY, adapter)
    models.register_model(db, "tiny-lora", str(adapter), "adapter", base_model="default")
    hub.write_registered_model_card(db, "tiny-lora")
    meta = _front_matter((adapter / "README.md").read_text())
    assert meta["library_name"] == "peft" and meta["pipeline_tag"] == "text-generation"


def test_the_callers_of_a_registration_write_the_card(db, db_path, tmp_path, capsys):
    """register_model only stores the row; `models add`, the worker after a run and the Admin tab's registration
    write the card (the Admin tab's path: test_models.py, test_models_merge.py)."""
    from labeler import worker
    from labeler.services.training import jobs
    from labeler.services.execution.metrics_sink import MetricsSink
    from labeler.services.training.stages import RunResult, StageContext

    added = tmp_path / "added"
    shutil.copytree(TINY, added)
    assert main(["models", "add", "added", str(added), "--db", db_path]) == 0
    assert _front_matter((added / "README.md").read_text())["model_name"] == "added"

    run = jobs.create_run(db, "sft", {"steps": 1}, runs_dir=tmp_path / "runs", start=False)
    trained = tmp_path / "trained"
    shutil.copytree(TINY, trained)
    ctx = StageContext(run_id=run.id, db_path=db_path, stage="sft", project="default",
                       job=jobs.train_configs.load_job_config(run.config), trainer_settings={},
                       output_dir=tmp_path / "runs", sink=MetricsSink(db_path, run.id, writes=False))
    row = worker.register_result(db, ctx, RunResult(path=str(trained), kind="policy", base_model="default"))
    card = (trained / "README.md").read_text()
    assert _front_matter(card)["model_name"] == row["name"] and "supervised fine-tuning (SFTTrainer)" in card


@pytest.mark.parametrize("stage,trainer", [("grpo", "GRPO (GRPOTrainer, TRL 1.x API)"),
                                           ("rloo", "RLOO (RLOOTrainer, TRL 1.x API)"),
                                           ("kto", "KTO (KTOTrainer, TRL 1.x API)")])
def test_cards_of_the_trl_1x_trainers_name_them(db, tmp_path, stage, trainer):
    folder = tmp_path / f"{stage}-out"
    shutil.copytree(TINY, folder)
    with db.conn:
        run_id = db.execute("INSERT INTO runs (project_id, stage, name, status, config_json)"
                            " VALUES (1, ?, ?, 'succeeded', '{}')", [stage, f"{stage}-1"]).lastrowid
    models.register_model(db, f"tiny-{stage}", str(folder), "policy", base_model="default", run_id=run_id)
    card = hub.write_registered_model_card(db, f"tiny-{stage}").read_text()
    assert trainer in card  # before: the bare stage name
    assert f"Run {run_id} ({stage}-1)" in card
