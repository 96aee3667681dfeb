"""configs/accelerate/*.yaml load as accelerate config files, and the app launches with each as written.
(DeepSpeed itself needs a GPU build and is not installed here: its files are checked as far as accelerate's
own config loader goes, which validates every key.)"""
from pathlib import Path

import pytest
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.utils import DistributedType

from labeler.services.execution import launch

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "accelerate"
EXPECTED = {
    "ddp.yaml": (DistributedType.MULTI_GPU, None),
    "deepspeed_zero2.yaml": (DistributedType.DEEPSPEED, 2),
    "deepspeed_zero3.yaml": (DistributedType.DEEPSPEED, 3),
    "deepspeed_zero3_offload.yaml": (DistributedType.DEEPSPEED, 3),
    "fsdp.yaml": (DistributedType.FSDP, None),
}


def test_every_shipped_config_is_listed_and_named_in_the_scaling_guide():
    assert sorted(p.name for p in CONFIGS.glob("*.yaml")) == sorted(EXPECTED)
    guide = (CONFIGS.parents[1] / "docs" / "SCALING.md").read_text()  # the README links to it
    for name in EXPECTED:
        assert f"configs/accelerate/{name}" in guide, name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shipped_config_loads_and_launches_as_written(name, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for env in (launch.ACCELERATE_CONFIG_ENV, launch.NUM_PROCESSES_ENV, launch.LAUNCHER_ENV):
        monkeypatch.delenv(env, raising=False)
    config = load_config_from_file(str(CONFIGS / name))
    kind, stage = EXPECTED[name]
    assert config.distributed_type == kind and config.num_machines == 1 and config.num_processes >= 2
    if stage is not None:
        assert config.deepspeed_config["zero_stage"] == stage
    if name.endswith("offload.yaml"):
        assert config.deepspeed_config["offload_optimizer_device"] == config.deepspeed_config["offload_param_device"] == "cpu"
    command = launch.worker_command("s.db", 3, num_processes=3, accelerate_config=str(CONFIGS / name))
    assert command[command.index("--config_file") + 1] == str(CONFIGS / name)
    assert command[command.index("--num_processes") + 1] == "3" and "--main_process_port" in command
    import torch

    # The DDP file on a machine without a GPU: gloo ranks on the CPU (accelerate needs ACCELERATE_USE_CPU=1).
    on_cpu = kind == DistributedType.MULTI_GPU and not torch.cuda.is_available()
    assert launch.launch_env(command) == ({"ACCELERATE_USE_CPU": "1"} if on_cpu else {})
