"""A stage added the way the app's own are (tests/services/test_stage_floor.py): its facts, its trainer config and its
runner, nothing else. It "trains" by copying its base model: enough to be offered, previewed, stored and dispatched."""
from __future__ import annotations

from dataclasses import dataclass, field

from labeler.services.settings.training_stages.base import Stage


@dataclass(frozen=True)
class EchoConfig:
    """Its trainer config: the fields the preview, the form and the flags read."""

    learning_rate: float = field(default=1e-5, metadata={"help": "How far each step moves."})
    per_device_train_batch_size: int = field(default=4, metadata={"help": "Answers per step."})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Batches per optimizer step."})
    echoes: int = field(default=2, metadata={"help": "Times each answer is repeated."})
    seed: int = field(default=0, metadata={"help": "Random seed."})
    bf16: bool = field(default=False, metadata={"help": "bf16 autocast."})


def run_echo(ctx):
    from labeler.services.serving import models
    from labeler.services.training.stages import RunResult

    base = ctx.job.base_model("echo")
    return RunResult(str(models.resolve(ctx.open_db(), base)), "policy", base)


STAGE = Stage(
    name="echo", order=9, config_class="echo_stage:EchoConfig", runner="echo_stage:run_echo",
    training_rows="labeler.services.training.stages:sft_rows", unit="answers", label="Echo good answers (a test stage)",
    note="Repeats the answers people rated well.", card="echo (a test stage)", metrics=("loss",),
    form_fields=("learning_rate", "echoes"), full_lr=1e-5, lora_lr=1e-4,
)
