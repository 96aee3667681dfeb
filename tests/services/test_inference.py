"""The one inference loader and the server's one model cache (issue 44 item 1; issue 48 items 2 and 3): the model's
precision, a byte budget emptied least recently used first, runs that start on the same device, one answer per
person with a cap and a queue, and a speed estimate that follows the machine."""
from __future__ import annotations

import threading

import pytest

from labeler.services.serving import inference
from labeler.errors import InputError
from labeler.services.serving.inference import ModelCache, ModelSpeed, Turns

AVX2_ONLY = frozenset({"sse4_2", "avx", "avx2", "fma"})  # this machine's kind (AMD EPYC without AVX-512)


def test_the_dtype_follows_the_device_and_the_cpus_bf16():
    assert inference.inference_dtype("cuda", AVX2_ONLY) == "auto"  # the checkpoint's own: bf16 stays bf16
    assert inference.inference_dtype("cpu", AVX2_ONLY) == "float32"  # bf16 would be emulated, slower than fp32
    assert inference.inference_dtype("cpu", AVX2_ONLY | {"avx512_bf16"}) == "bfloat16"
    assert inference.inference_dtype("cpu", AVX2_ONLY | {"amx_bf16"}) == "bfloat16"
    assert inference.inference_dtype("cpu", frozenset()) == "float32"  # no /proc/cpuinfo: fp32


@pytest.fixture
def bf16_checkpoint(tiny_bf16_model_dir):
    return tiny_bf16_model_dir


def test_every_path_loads_in_the_cpus_precision(bf16_checkpoint, monkeypatch):
    import torch

    from labeler.services.evals import evaluation
    from labeler.services.serving import generation  # noqa: F401 - they load through inference.load_policy

    # Before: loaded with no dtype, i.e. fp32 whatever the CPU. On this AVX2-only CPU fp32 is right...
    monkeypatch.setattr(inference, "cpu_flags", lambda: AVX2_ONLY)
    model, tokenizer = inference.load_policy(str(bf16_checkpoint), device="cpu")
    assert {p.dtype for p in model.parameters()} == {torch.float32} and tokenizer.padding_side == "left"
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    # ...on a CPU with native bf16 the model answers in bf16 (half the memory), through the cache too.
    monkeypatch.setattr(inference, "cpu_flags", lambda: AVX2_ONLY | {"avx512_bf16"})
    cached, _ = ModelCache(device="cpu").get(str(bf16_checkpoint))
    assert {p.dtype for p in cached.parameters()} == {torch.bfloat16}
    # The estimate before loading: the file's size, doubled when bf16 is loaded in fp32.
    on_disk = (bf16_checkpoint / "model.safetensors").stat().st_size
    assert inference.estimated_bytes(str(bf16_checkpoint), "cpu", AVX2_ONLY) == 2 * on_disk
    assert inference.estimated_bytes(str(bf16_checkpoint), "cuda", AVX2_ONLY) == on_disk


class FakeLoader:
    """Loads 'models' of a known size (a Linear of `size` float32 weights) and records (path, device)."""

    def __init__(self, sizes: dict[str, int]):
        self.sizes, self.loads = sizes, []

    def __call__(self, path: str, kind: str, device: str):
        import torch

        self.loads.append((path, device))
        return torch.nn.Linear(self.sizes[path], 1, bias=False), None


def test_a_tiny_budget_unloads_the_least_recently_used_first():
    loader = FakeLoader({"a": 100, "b": 100, "c": 100})  # 400 bytes each
    cache = ModelCache(budget_bytes=1000, device="cpu", loader=loader)
    cache.get("a")
    cache.get("b")
    cache.get("a")  # a used last: b is the least recently used
    cache.get("c")  # 1,200 bytes would be over the budget: b goes, not a
    assert cache.keys() == [("a", "causal"), ("c", "causal")] and cache.held_bytes() == 800
    cache.get("a")
    assert [path for path, _ in loader.loads] == ["a", "b", "c"]  # a stayed loaded
    # A model larger than the budget alone still loads (it is the one asked for), alone.
    loader.sizes["huge"] = 1000
    cache.get("huge")
    assert cache.keys() == [("huge", "causal")]


def test_a_run_starting_on_the_cpu_empties_the_cache_and_the_person_is_told():
    running: list[int] = []
    loader = FakeLoader({"chat": 10, "other": 10})
    cache = ModelCache(budget_bytes=10_000, device="cpu", running_runs=lambda: list(running), loader=loader,
                       runs_check_s=0)
    cache.get("chat")
    cache.get("other")
    assert cache.run_notice() is None
    running.append(7)  # run 7 starts: on a CPU-only host it trains in the same memory
    told = []
    cache.get("chat", notify=told.append)
    assert told == ["the chat model was unloaded while run 7 trains on this CPU; it was loaded again for this "
                    "answer."]
    assert cache.keys() == [("chat", "causal")]  # the other model is gone, and one model at a time meanwhile
    cache.get("other")
    assert cache.keys() == [("other", "causal")]
    assert cache.run_notice() == "run 7 trains on this CPU: one model is kept loaded at a time until it ends."
    running.clear()
    cache.get("chat")
    assert cache.keys() == [("other", "causal"), ("chat", "causal")] and cache.run_notice() is None


def test_a_run_on_the_gpu_sends_the_models_to_the_cpu():
    running: list[int] = []
    loader = FakeLoader({"chat": 10})
    cache = ModelCache(budget_bytes=10_000, device="cuda", running_runs=lambda: list(running), loader=loader,
                       runs_check_s=0)
    cache.get("chat")
    running.append(3)
    told = []
    cache.get("chat", notify=told.append)
    assert loader.loads == [("chat", "cuda"), ("chat", "cpu")]
    assert told == ["the chat model was unloaded while run 3 trains on this GPU; it answers from the CPU until the "
                    "run ends."]
    running.clear()  # the run ended: the model goes back to the GPU when next asked for
    cache.get("chat")
    assert loader.loads[-1] == ("chat", "cuda") and len(cache) == 1


def test_the_running_runs_come_from_the_runs_table(db, db_path, tmp_path):
    from labeler.services.execution import runs

    first = runs.insert_run(db, "sft", {}, "default", None, "one", tmp_path / "runs")
    second = runs.insert_run(db, "sft", {}, "default", None, "two", tmp_path / "runs")
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [second])
    db.conn.commit()
    assert inference.running_runs_of(db_path)() == [second] and first != second


def test_generation_slots_follow_the_cores():
    assert [inference.generation_slots(cores) for cores in (1, 2, 3, 16)] == [1, 1, 1, 8]


def test_one_turn_per_person_a_cap_and_places_in_the_queue():
    turns = Turns(slots=1)
    ann = turns.join("ann")
    assert ann.wait(0) and ann.ahead() == 0
    with pytest.raises(InputError, match="one at a time per user, across Chat, Arena and best-of-N"):
        turns.join("ann")
    bob, cara = turns.join("bob"), turns.join("cara")
    assert not bob.wait(0) and not cara.wait(0)  # the cap: one at a time on this server
    assert (bob.ahead(), cara.ahead()) == (1, 2)
    assert inference.place_words(cara.ahead()) == "2 answers ahead of yours: it starts when they finish."
    assert turns.counts() == (1, 2)
    cara.leave()  # a person who gives up leaves the queue
    ann.leave()
    assert bob.wait(0) and turns.people() == {"bob"}
    bob.leave()
    assert turns.counts() == (0, 0) and turns.people() == set()


def test_a_waiting_turn_is_told_its_place_then_runs():
    turns = Turns(slots=1)
    first = turns.join("ann")
    assert first.wait(0)
    told, done = [], threading.Event()

    def second():
        with turns.turn("bob", waiting=told.append, poll_s=0.01):
            done.set()

    thread = threading.Thread(target=second)
    thread.start()
    while not told:
        threading.Event().wait(0.01)
    assert told == ["1 answer ahead of yours: it starts when it finishes."] and not done.is_set()
    first.leave()
    thread.join(5)
    assert done.is_set() and turns.people() == set()


def test_the_speed_estimate_follows_each_answer_and_never_reaches_zero():
    speed = ModelSpeed(prefill_tokens_per_s=200.0, decode_tokens_per_s=20.0)
    slower = speed.followed(tokens=20, seconds=4.0)  # 5 tokens/s measured: halfway from 20
    assert slower.decode_tokens_per_s == pytest.approx(12.5)
    assert slower.limits(60.0)[0] == 375 < speed.limits(60.0)[0] == 600
    assert speed.followed(tokens=2, seconds=100.0) == speed  # too short to measure the model
    stalled = speed
    for _ in range(40):  # a machine at load 10: answers barely move
        stalled = stalled.followed(tokens=4, seconds=1e6)
    assert stalled.decode_tokens_per_s == inference.MIN_TOKENS_PER_S > 0


def test_the_memory_budget_is_read_as_a_size():
    assert inference.parse_bytes("8GiB") == 8 * 2**30
    assert inference.parse_bytes("500mb") == 500 * 10**6
    assert inference.parse_bytes("1.5 GB") == 1_500_000_000
    assert inference.parse_bytes("4096") == 4096
    for bad in ("lots", "8 parsecs", "0", "-1GB", ""):
        with pytest.raises(InputError, match="a size such as 8GiB") as error:
            inference.parse_bytes(bad, field="--model-memory")
        assert error.value.field == "--model-memory"


def test_reward_models_load_through_the_one_loader_in_the_devices_precision(db, tmp_path, monkeypatch):
    """The evaluation's reward model came from RewardScorer(path) directly: fp32 on a GPU and on a bf16 CPU alike."""
    import torch

    import rlhf.reward
    from labeler.services.evals import evaluation

    made = []

    class RecordingScorer:
        def __init__(self, path, device=None, dtype=None):
            made.append((path, device, dtype))

        def score(self, queries, responses):
            return [0.0] * len(responses)

    monkeypatch.setattr(rlhf.reward, "RewardScorer", RecordingScorer)
    monkeypatch.setattr(inference, "cpu_flags", lambda: AVX2_ONLY)
    inference.load_reward("rm-dir", device="cuda")
    inference.load_reward("rm-dir", device="cpu")
    monkeypatch.setattr(inference, "cpu_flags", lambda: AVX2_ONLY | {"amx_bf16"})
    inference.load_reward("rm-dir", device="cpu")
    assert [dtype for _, _, dtype in made] == ["auto", None, torch.bfloat16]  # the checkpoint's, fp32, bf16
    made.clear()
    folder = tmp_path / "my-rm"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"")  # resolve_model checks that weights are there; none are read
    monkeypatch.setattr(inference, "host_device", lambda: "cuda")
    scorer = evaluation._reward_model(db, str(folder))
    assert made == [(str(folder), "cuda", "auto")] and scorer(["q"], ["a"]) == [0.0]
