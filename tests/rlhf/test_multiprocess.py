"""Two real processes: `accelerate launch --multi_gpu --num_processes 2` with ACCELERATE_USE_CPU=1 gives two
gloo ranks (DistributedType.MULTI_CPU) on a CPU-only machine; without ACCELERATE_USE_CPU each would run alone."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import free_port

HERE = Path(__file__).parent / "multiprocess"
REPO = Path(__file__).resolve().parents[2]


def launch(script: Path, *args: str, num_processes: int = 2, timeout: int = 180,
           config_file: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE",
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    setup = ["--config_file", str(config_file)] if config_file else ["--multi_gpu", "--num_machines", "1",
                                                                     "--dynamo_backend", "no"]
    command = [sys.executable, "-m", "accelerate.commands.launch", *setup, "--num_processes", str(num_processes),
               "--mixed_precision", "no", "--main_process_port", str(free_port()), str(script), *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done


def test_ppo_on_two_ranks_keeps_weights_and_stats_equal_and_rank_zero_alone_writes(tmp_path):
    launch(HERE / "ppo_two_ranks.py", str(tmp_path))
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["num_processes"] == r1["num_processes"] == 2
    assert r0["distributed_type"] == r1["distributed_type"] == "DistributedType.MULTI_CPU"
    # The ranks built different weights; DDP started both from rank 0's, trained them, and kept them equal.
    assert r0["initial"] == r1["initial"]
    assert r0["final"] == r1["final"] != r0["initial"]
    assert r0["ref"] == r1["ref"] == r0["initial"]  # the reference copy never moves
    # Stats: the same floats on both ranks (one all-reduce), scores over the global batch 0..7.
    assert r0["stats"] == r1["stats"]
    for stats in r0["stats"]:
        assert stats["ppo/mean_scores"] == pytest.approx(3.5)
        assert stats["ppo/std_scores"] == pytest.approx(math.sqrt(6.0))  # sum (x - 3.5)^2 = 42, / 7
    assert r0["kl_coef"] == r1["kl_coef"]
    # Running score moments over both ranks' scores of both steps: 0..7 twice, mean 3.5, variance 63/12.
    assert r0["running"] == pytest.approx([3.5, 5.25]) and r1["running"] == pytest.approx([3.5, 5.25])
    # Only rank 0 logged: its callback saw every rank's 8 samples, rank 1 had no sinks and wrote no files.
    assert r0["callbacks"] == [[1, 8], [2, 8]] and r1["callbacks"] == []
    assert not (tmp_path / "logs1").exists()
    rows = [json.loads(line) for line in (tmp_path / "logs0" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    assert rows[0]["env/reward_mean"] == pytest.approx(3.5)
    assert rows[0]["env/reward_std"] == pytest.approx(math.sqrt(6.0))
    assert rows[1]["objective/kl"] == pytest.approx(r0["stats"][1]["objective/kl"])
    # One checkpoint, holding both ranks' RNG states.
    assert r0["saved_rng_ranks"] == r1["saved_rng_ranks"] == 2


def test_reward_model_and_dpo_on_two_ranks_match_one_process_with_the_same_global_batch(tmp_path):
    """transformers.Trainer shards each global batch over the ranks and DDP averages the gradients: 2 ranks of
    2 pairs must log the losses 1 process of 4 pairs logs. Step 1 of DPO is ln 2 whatever the batch (policy ==
    reference); steps 2-3 differ by ~1e-4 (RM) to ~4e-2 (DPO) between batches, so 1e-6 tells them apart."""
    script = HERE / "pairwise_two_ranks.py"
    launch(script, str(tmp_path), "two", "2")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, str(script), str(tmp_path), "one", "4"], env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-5000:]
    one, two = (json.loads((tmp_path / f"{tag}.json").read_text()) for tag in ("one", "two"))
    assert (one["num_processes"], two["num_processes"]) == (1, 2)
    for trainer in ("rm", "dpo"):
        assert len(one[trainer]) == len(two[trainer]) == 3
        assert two[trainer] == pytest.approx(one[trainer], abs=1e-6), trainer
        assert one[trainer][2] != pytest.approx(one[trainer][0], abs=1e-5)  # it trained
    # DPO's cached reference log-probs: computed on every rank for the whole dataset, not one rank's shard.
    assert len(two["ref_chosen_logps"]) == 16
    assert two["ref_chosen_logps"] == pytest.approx(one["ref_chosen_logps"], abs=1e-5)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="what accelerate does without a GPU")
def test_fsdp_is_not_available_on_cpu_ranks_through_accelerate(tmp_path):
    """Why no FSDP test runs here (README, docs/SCALING.md). torch's FSDP itself trains on CPU with gloo (tried
    by hand with FSDP1 and fully_shard: 2 ranks gave 1 process's losses), but accelerate 1.15, through which
    Trainer and PPOTrainer prepare models, does not let it: AcceleratorState turns FSDP on only for device-backed types
    (MULTI_GPU, MULTI_XPU, ...), never MULTI_CPU. So the shipped fsdp.yaml fails on a CPU-only machine, and with its
    device-only setting off it is quietly DDP. When this test fails, accelerate has changed: run the pairwise and PPO
    scripts under FSDP."""
    launch(HERE / "fsdp_on_cpu.py", str(tmp_path), config_file=REPO / "configs" / "accelerate" / "fsdp.yaml")
    for rank in (0, 1):
        found = json.loads((tmp_path / f"fsdp_rank{rank}.json").read_text())
        # fsdp_sync_module_states: true (FullyShardedDataParallelPlugin.__post_init__) needs a device.
        assert found["shipped_error"] == ("There are currently no available devices found, must be one of 'XPU', "
                                          "'CUDA', 'MLU', 'NPU', 'MUSA', or 'HPU'.")
        assert found == {**found, "distributed_type": "DistributedType.MULTI_CPU", "num_processes": 2,
                         "wrapper": "DistributedDataParallel"}


def test_ppo_saves_under_torch_fsdp_on_two_ranks_equal_one_process(tmp_path):
    """PPOTrainer.save_pretrained, save_checkpoint and the app's merged final save (save_merged with
    gathered_state_dict) under torch's FSDP1 and fully_shard on 2 gloo ranks write the weights one process
    writes after the same step: the shards are gathered (each rank held about half the parameters), for a
    full policy and for a LoRA adapter (merged on its base for the final save)."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    script = HERE / "ppo_fsdp_save.py"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, str(script), str(tmp_path), "single"], env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-5000:]
    for mode in ("fsdp1", "fsdp2"):
        launch(script, str(tmp_path), mode)
    for kind in ("full", "lora"):
        single = tmp_path / f"single-{kind}"
        one = json.loads((single / "info.json").read_text())
        for mode, wrapper in (("fsdp1", "FullyShardedDataParallel"), ("fsdp2", "FSDPAutoModelForCausalLMWithValueHead")):
            sharded = tmp_path / f"{mode}-{kind}"
            info = json.loads((sharded / "info.json").read_text())
            assert (info["num_processes"], info["wrapper"], info["gathered"]) == (2, wrapper, True)
            assert info["local_numel"] < 0.6 * info["numel"]  # rank 0 held about half: a save must gather
            assert info["loss"] == pytest.approx(one["loss"], abs=1e-6)
            assert info["moved"] == one["moved"] and len(one["moved"]) >= 3  # the same tensors trained (LoRA: B, A, head)
            for folder in ("pretrained", "checkpoint", "merged"):
                ours = AutoModelForCausalLM.from_pretrained(sharded / folder).state_dict()
                theirs = AutoModelForCausalLM.from_pretrained(single / folder).state_dict()
                assert ours.keys() == theirs.keys(), (mode, kind, folder)
                for name, tensor in theirs.items():
                    assert torch.allclose(ours[name], tensor, atol=1e-6), (mode, kind, folder, name)
                head, head_one = (load_file(str(f / folder / "value_head.safetensors")) for f in (sharded, single))
                assert all(torch.allclose(head[k], head_one[k], atol=1e-6) for k in head_one)
            assert not (sharded / "merged" / "adapter_config.json").exists()  # a plain model folder
            assert (sharded / "pretrained" / "adapter_config.json").exists() == (kind == "lora")


def test_lora_and_qlora_load_each_ranks_model_on_its_own_device(tmp_path):
    """Each rank reads its LOCAL_RANK: with CUDA (faked) a LoRA or QLoRA model goes to {"": local rank}, not GPU 0
    for all; full fine-tuning leaves placement to accelerate. On the real CPU each rank loads its LoRA policy there,
    and DDP keeps the adapters equal after a step on different rollouts."""
    launch(HERE / "lora_device_map_ranks.py", str(tmp_path))
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert (r0["local_rank"], r1["local_rank"]) == (0, 1)
    assert r0["maps"] == {"qlora": {"": 0}, "lora": {"": 0}, "full": None}
    assert r1["maps"] == {"qlora": {"": 1}, "lora": {"": 1}, "full": None}
    assert r0["load_device_map"] is None and r1["load_device_map"] is None  # CPU ranks: no device_map
    assert r0["devices"] == r1["devices"] == ["cpu"]
    assert r0["adapters"] == r1["adapters"]
