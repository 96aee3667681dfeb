"""Admin > Models > Merge adapter: the same service as `rlhf-studio models merge`, admins only."""
from __future__ import annotations

import gradio as gr
import pytest
from test_tabs import ADMIN, ANNOTATOR, app_db, as_user, ctx, query  # noqa: F401 - fixtures

from labeler.services.serving import models
from labeler.errors import PermissionDenied
from labeler.ui.tabs.admin import model_registry
from labeler.ui.tabs.admin.snapshot import SHOWN


def test_admin_merges_a_registered_adapter_and_sees_it_listed(app_db, ctx, tiny_model_dir, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from storage import open_db

    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                   LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(tmp_path / "lora")
    db = open_db(app_db)
    models.register_model(db, "sft-lora", str(tmp_path / "lora"), "adapter")
    db.conn.close()
    n_outputs = len(SHOWN) + 1  # the admin snapshot, then the adapter name box
    with pytest.warns(UserWarning, match="not a LoRA adapter"):  # 'default' is a base model: warned, nothing changes
        assert model_registry.merge_adapter(ctx, "default", request=as_user(ADMIN)) == tuple(
            gr.skip() for _ in range(n_outputs))
    with pytest.raises((PermissionDenied, gr.Error)):
        model_registry.merge_adapter(ctx, "sft-lora", request=as_user(ANNOTATOR))
    result = model_registry.merge_adapter(ctx, "sft-lora", request=as_user(ADMIN))
    assert len(result) == n_outputs and result[-1] == ""  # the name box is emptied
    assert ["sft-lora-merged", "policy"] == result[SHOWN.index("models_table")][-1][:2]  # the registry, refreshed
    assert query(app_db, "SELECT name, kind, path FROM models WHERE name = 'sft-lora-merged'") == [
        ("sft-lora-merged", "policy", str(tmp_path / "lora-merged"))]
    assert (tmp_path / "lora-merged" / "model.safetensors").exists()
