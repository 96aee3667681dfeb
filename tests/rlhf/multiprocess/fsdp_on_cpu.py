"""Run by tests/rlhf/test_multiprocess.py under `accelerate launch --config_file configs/accelerate/fsdp.yaml
--num_processes 2` with ACCELERATE_USE_CPU=1: what accelerate makes of the shipped FSDP config on a machine
without GPUs. Writes OUT/fsdp_rank<r>.json: the error the shipped file gives (its fsdp_sync_module_states needs a
device), then, with that setting off, the distributed type and the wrapper a prepared model gets."""
import json
import os
import sys
from pathlib import Path

import torch
from accelerate import Accelerator


def main(out: Path) -> None:
    found = {}
    try:
        Accelerator()
    except RuntimeError as error:
        found["shipped_error"] = str(error)
    os.environ["FSDP_SYNC_MODULE_STATES"] = "false"  # what the launcher set from the file
    os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] = "false"  # needs sync_module_states
    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(4, 1))
    found.update(distributed_type=str(accelerator.distributed_type), wrapper=type(model).__name__,
                 num_processes=accelerator.num_processes)
    (out / f"fsdp_rank{accelerator.process_index}.json").write_text(json.dumps(found))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
