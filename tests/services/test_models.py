"""The model registry: round trip, the default model, validation that writes nothing."""
from __future__ import annotations

import re

import pytest
import yaml

from labeler.services.training import hub
from labeler.services.serving import models
from labeler.errors import InputError


def test_default_is_registered_on_first_use(db):
    assert db["models"].count == 0
    listed = models.list_models(db)
    assert [(m["name"], m["path"], m["kind"]) for m in listed] == [("default", "default", "base")]
    models.list_models(db)
    assert db["models"].count == 1


def test_register_round_trip(db, tiny_model_dir):
    row = models.register_model(
        db,
        "tiny-dpo",
        str(tiny_model_dir),
        kind="policy",
        base_model="default",
        config={"beta": 0.1},
        metrics={"loss": 0.5},
        data_snapshot="sha256:abc",
    )
    assert {k: row[k] for k in ["name", "path", "kind", "base_model", "run_id", "config", "metrics", "data_snapshot"]} == {
        "name": "tiny-dpo",
        "path": str(tiny_model_dir.resolve()),
        "kind": "policy",
        "base_model": "default",
        "run_id": None,
        "config": {"beta": 0.1},
        "metrics": {"loss": 0.5},
        "data_snapshot": "sha256:abc",
    }
    assert models.get_model(db, "tiny-dpo") == row
    assert models.resolve(db, "tiny-dpo") == str(tiny_model_dir.resolve())
    assert [m["name"] for m in models.list_models(db)] == ["default", "tiny-dpo"]
    assert [m["name"] for m in models.list_models(db, kind="policy")] == ["tiny-dpo"]
    assert models.chat_model_names(db) == ["default", "tiny-dpo"]


def test_a_base_model_may_be_a_hub_id_and_resolves_paths(db, tiny_model_dir):
    registered = models.register_model(db, "smol", "HuggingFaceTB/SmolLM2-135M-Instruct", "base")
    assert registered["path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert models.resolve(db, "smol") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    # Unregistered: a local folder or a hub id passes through; 'default' goes to the cached conversion.
    assert models.resolve(db, str(tiny_model_dir)) == str(tiny_model_dir.resolve())
    assert models.resolve(db, "default").endswith("smollm2-135m-instruct")


@pytest.mark.parametrize(
    "name, path, kind, field",
    [
        ("x", "{tiny}", "critic", "kind"),
        ("", "{tiny}", "policy", "name"),
        ("default", "{tiny}", "base", "name"),
        ("x", "/no/such/folder", "policy", "path"),
        ("x", "{empty}", "policy", "path"),
    ],
)
def test_bad_registrations_raise_and_write_nothing(db, tiny_model_dir, tmp_path, name, path, kind, field):
    path = path.format(tiny=tiny_model_dir, empty=tmp_path)
    with pytest.raises(InputError) as error:
        models.register_model(db, name, path, kind)
    assert error.value.field == field
    assert db["models"].count == 0


def test_duplicate_name_and_unknown_model(db, tiny_model_dir):
    models.register_model(db, "rm", str(tiny_model_dir), "reward")
    with pytest.raises(InputError, match="already registered"):
        models.register_model(db, "rm", str(tiny_model_dir), "reward")
    with pytest.raises(InputError, match="no model named"):
        models.get_model(db, "nope")
    with pytest.raises(InputError) as error:
        models.resolve(db, "nope")
    assert error.value.field == "model"
    assert "rm" not in models.chat_model_names(db)


def test_web_chat_resolves_registered_chat_models_only(db, tiny_model_dir, tiny_encoder_dir, tmp_path):
    from labeler.errors import InputError

    models.register_model(db, "tiny", str(tiny_model_dir), "policy")
    models.register_model(db, "scorer", str(tiny_encoder_dir), "reward")
    models.register_model(db, "encoder-as-base", str(tiny_encoder_dir), "base")
    assert models.resolve_chat_model(db, "tiny") == str(tiny_model_dir.resolve())
    assert models.resolve_chat_model(db, "served", server_models=("served",)) == "served"  # serve --model
    # A folder with a valid model, one without, a file, a missing path, a hub id: the same answer for all,
    # so the error says nothing about what exists on the server.
    answers = set()
    for name in (str(tiny_model_dir), "/etc", "/etc/passwd", str(tmp_path / "missing"), "owner/model"):
        with pytest.raises(InputError) as error:
            models.resolve_chat_model(db, name)
        assert error.value.field == "model"
        answers.add(str(error.value).replace(repr(name), "NAME"))
    assert answers == {"field 'model': no registered chat model named NAME; an admin adds models with `rlhf-studio models add`"}
    with pytest.raises(InputError, match="'scorer' is a reward model"):
        models.resolve_chat_model(db, "scorer")
    with pytest.raises(InputError, match="not a chat model"):
        models.resolve_chat_model(db, "encoder-as-base")
    assert models.resolve_reward_model(db, "scorer") == str(tiny_encoder_dir.resolve())
    with pytest.raises(InputError, match="no registered reward model"):
        models.resolve_reward_model(db, "tiny")
    assert models.chat_model_names(db) == ["default", "tiny", "encoder-as-base"]


def test_register_a_policy_from_the_web(db, tiny_model_dir, tiny_encoder_dir, tmp_path):
    """Admins register chat models from the web app; local policy folders only."""
    row = models.register_policy_from_web(db, "my-sft", str(tiny_model_dir), base_model="default")
    assert (row["name"], row["kind"], row["base_model"], row["path"]) == (
        "my-sft", "policy", "default", str(tiny_model_dir.resolve()))
    assert "my-sft" in models.chat_model_names(db)
    hub.write_registered_model_card(db, row["name"])  # registering stores a row; the caller (the Admin tab) writes the card
    card = yaml.safe_load((tiny_model_dir / "README.md").read_text().split("---")[1])  # the card's front matter
    assert (card["model_name"], card["base_model"]) == ("my-sft", "HuggingFaceTB/SmolLM2-135M-Instruct")
    (tmp_path / "empty").mkdir()
    refused = [
        (("hub-one", "HuggingFaceTB/SmolLM2-135M"), "path", "no such folder"),  # a hub id: CLI only
        (("enc", str(tiny_encoder_dir)), "model", "not a chat model"),  # an encoder writes no text
        (("empty", str(tmp_path / "empty")), "path", "no *.safetensors"),
        (("", str(tiny_model_dir)), "name", "bad model name"),
        (("my-sft", str(tiny_model_dir)), "name", "already registered"),
        (("blank", "  "), "path", "enter the model's folder"),
    ]
    for args, field, message in refused:
        with pytest.raises(InputError, match=re.escape(message)) as error:
            models.register_policy_from_web(db, *args)
        assert error.value.field == field, args
    with pytest.raises(InputError, match="no model named 'nope'"):
        models.register_policy_from_web(db, "other", str(tiny_model_dir), base_model="nope")
    assert [m["name"] for m in models.list_models(db)] == ["default", "my-sft"]
