"""How long a PPO, GRPO or RLOO run will take on this machine, said before it starts, and a time budget fitted
to a number of steps.

The estimate is extrapolated from a measured micro-step: one PPO step of the run's own settings (model, bf16,
LoRA, answer length) on a single mini-batch, timed in a fresh process as the worker would run it (its own
threads, memory and allocator settings; the server's memory is not touched). A PPO step of batch_size answers
is then batch_size / mini_batch_size such chunks of generation and no-grad passes, and ppo_epochs times as many
training mini-batches. A GRPO or RLOO step (one generation batch) is built from the same parts: generating the
batch's answers, a no-grad pass over them for each of the sampling policy's log-probs (when the policy moves
within the batch) and the reference's (beta > 0), each half of PPO's two passes, and num_iterations passes of
training mini-batches. Generation is timed at the run's own generation batch (PPO's batch_size, up to
GENERATION_ROWS_MEASURED answers): batched generation is much faster per answer than a mini-batch's worth (with
bf16 on a 2-core CPU, 16 answers took about as long as the run's 64), and timing a mini-batch overstated the
shipped recipe's runs by 17-27%. PPO's held-out curve (heldout_every) counts too. Not included: a reward model's
scoring (reward=rm/mix) and the wait for human ratings (reward=human/mix), which depend on people.

DPO and the reward model (trained on labels by transformers' Trainer) are estimated from a measured micro-batch
(LabelMicroStep): the run's first LABEL_BATCHES_MEASURED per-device batches of its own training pairs (so their token
lengths, cut at max_length), a training step and a no-grad forward over each, averaged, then scaled to the padded
length of the run's average batch (expected_padded_length over up to LENGTH_SAMPLE of its pairs): a batch is padded
to its longest pair, so a few batches are a few draws, and one project's first three were padded to 142, 74 and 125
tokens where its batches average 142 (timed as they came, its steps were estimated 2.55 s for 3.37 s run), and for
DPO a batch of held-out answers generated as the automatic evaluation generates them (the base's answers not counted
when a stored evaluation of it will be reused) and their log-probs taken as its KL pass takes them. A step is
gradient_accumulation_steps such batches; DPO's reference runs once over the pairs before training
(precompute_ref_log_probs, the default) or in every step. SFT and KTO have no estimate.

The micro-step runs with the run's own precision and memory settings: its dtype, 4-bit (QLoRA), gradient
checkpointing and attention kernel, so it times the configuration that will run and needs the memory that run needs.

A preview never loads a model onto a device a run is using (it could push the run out of memory, and the timing would
be the two sharing the device): while a run is in status 'running', the micro-step comes from arithmetic instead
(model_free_micro_step: parameter count, vocabulary, sequence length and settings at a nominal throughput for the
device), and the preview says so. Runs choose no device: every run's rank 0 trains on the first GPU (accelerate
numbers its ranks' GPUs from the first visible one), which is where the micro-step would run, and on a CPU-only install
the device is the machine itself, its cores and RAM, which a run uses whole. So on either, any running run holds the
preview's device (busy_run).

The arithmetic (micro-step -> seconds -> steps) is pure and tested with made-up micro-step times (parsing a
duration, "20m" or "1h30m", is durations.py's). Only the measurement loads a model.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

# budget_seconds: run_preview reads it here too, with format_duration.
from labeler.services.serving import inference, models
from labeler.services.settings import reward_spec, training_stages
from labeler.services.settings.durations import budget_seconds, format_duration  # noqa: F401
from rlhf.configs import PPOConfig
from rlhf.loading import load_tokenizer
from rlhf.memory_estimate import GIB, TrainShape, estimate_training_memory, model_shape
from rlhf.precision import autocast_dtype, model_load_kwargs, reference_dtype

# A cached measurement is reused this long: the machine's load changes, and so does the micro-step.
CACHE_SECONDS = 600.0
# PPOTrainer.step's no-grad passes over a mini-batch, which MicroStep.forward_seconds times together: the policy's
# (log-probs and values) and the reference's (PPOTrainer._rollout_forward).
PPO_NO_GRAD_PASSES = 2
# The largest generation batch the micro-step times: a larger one costs about the same per answer, and the
# measurement should stay a few seconds.
GENERATION_ROWS_MEASURED = 64
# The training batches a DPO or reward-model micro-batch is timed on (their mean is the step's time), and the
# training pairs whose lengths give the padded length of the run's average batch.
LABEL_BATCHES_MEASURED = 3
LENGTH_SAMPLE = 2000


@dataclass(frozen=True)
class MicroStep:
    """One PPO step on a single mini-batch of `rows` answers, measured on this machine."""

    rows: int  # answers in the measured mini-batch (the run's mini_batch_size)
    generate_seconds: float  # generating `generate_rows` answers of max_new_tokens in one batch
    forward_seconds: float  # the no-grad passes over `rows`: policy and reference (step()'s time/ppo/forward_pass)
    train_seconds: float  # one mini-batch's forward, backward and optimizer step (time/ppo/optimize_step)
    setup_seconds: float  # loading the model and building the trainer, once per run
    generate_rows: int = 0  # answers generated in generate_seconds (0: `rows`, a mini-batch's worth)
    note: str = ""  # how the figures were had when not measured (model_free_micro_step), for the preview

    @property
    def seconds_per_answer(self) -> float:
        """Generating one answer, at the pace of the measured generation batch."""
        return self.generate_seconds / (self.generate_rows or self.rows)


@dataclass(frozen=True)
class RunEstimate:
    step_seconds: float
    steps: int
    setup_seconds: float  # once per run: loading the model, building the trainer
    eval_seconds: float  # the automatic evaluation after the run (base and trained model)
    note: str = ""  # the micro-step's note: why it was not measured
    reference_seconds: float = 0.0  # DPO: the reference's one pass over the pairs before training (precomputed)

    @property
    def total_seconds(self) -> float:
        return self.setup_seconds + self.reference_seconds + self.steps * self.step_seconds + self.eval_seconds


def ppo_step_seconds(micro: MicroStep, batch_size: int, ppo_epochs: int) -> float:
    """A PPO step of batch_size answers: generating them, batch_size / rows chunks of no-grad passes, and
    ppo_epochs passes of training mini-batches over them."""
    chunks = batch_size / micro.rows
    return batch_size * micro.seconds_per_answer + chunks * (micro.forward_seconds + ppo_epochs * micro.train_seconds)


def online_step_seconds(micro: MicroStep, answers: int, num_iterations: int, no_grad_passes: int) -> float:
    """A GRPO or RLOO step, one generation batch of `answers` answers on a rank: answers / rows chunks of
    generation, of `no_grad_passes` no-grad passes (see online_no_grad_passes), each taking half of PPO's two,
    and num_iterations passes of training mini-batches."""
    chunks = answers / micro.rows
    pass_seconds = micro.forward_seconds / PPO_NO_GRAD_PASSES
    return answers * micro.seconds_per_answer + chunks * (no_grad_passes * pass_seconds
                                                          + num_iterations * micro.train_seconds)


def online_no_grad_passes(needs_old_logps: bool, beta: float) -> int:
    """No-grad passes over a GRPO/RLOO generation batch: the sampling policy's log-probs (when the policy moves
    within the batch: the config's needs_old_logps) and the reference's (a KL term, beta > 0)."""
    return int(needs_old_logps) + int(beta != 0.0)


def eval_seconds(micro: MicroStep, answers: int, models: int = 2) -> float:
    """The automatic evaluation: `answers` held-out answers (prompts x eval_samples) generated by each of
    `models` (the base and the trained policy; the base's may be reused), at the micro-step's generation pace."""
    return models * answers * micro.seconds_per_answer


def heldout_curve_seconds_per_step(micro: MicroStep, heldout_prompts: int, every: int) -> float:
    """PPO's held-out curve spread over the steps: every `every` steps one answer per held-out prompt (runners/ppo.py
    heldout_check; 0: off)."""
    return heldout_prompts * micro.seconds_per_answer / every if every and heldout_prompts else 0.0


def estimate_from_step(micro: MicroStep, steps: int, step_seconds: float, eval_answers: int = 0,
                       base_stored: bool = False) -> RunEstimate:
    """A run of `steps` steps of step_seconds each, the micro-step's setup and the evaluation (the tuned model's
    answers, and its base's unless a stored evaluation of the base is reused: `base_stored`)."""
    answering = 1 if base_stored else 2
    return RunEstimate(step_seconds, steps, micro.setup_seconds,
                       eval_seconds(micro, eval_answers, answering) if eval_answers else 0.0, micro.note)


# ---- the stages trained on labels by transformers' Trainer (dpo, rm) ----------------------------------------

@dataclass(frozen=True)
class LabelMicroStep:
    """One optimizer micro-batch of a DPO or reward-model run, measured on this machine: `rows` pairs of the run's own
    training data (their tokens, cut at max_length), each pair its chosen and rejected sequences."""

    rows: int  # pairs in the measured batch (the run's per_device_train_batch_size)
    train_seconds: float  # the policy's forward, backward and optimizer step on the batch
    forward_seconds: float  # one no-grad forward over the same batch (the reference's log-probs, or evaluation's)
    setup_seconds: float  # loading the model, once per run (and once per model the evaluation loads)
    generate_seconds: float = 0.0  # generating `generate_rows` held-out answers in one batch (policies only)
    generate_rows: int = 0
    tokens: int = 0  # the padded length of the run's average batch, which the times are scaled to
    load_seconds: float = 0.0  # reading the weights alone (setup_seconds less the imports): each evaluated model's
    # A no-grad log-prob pass over those generate_rows answers (the evaluation's KL pass, rlhf.evaluation.
    # response_logprob_sums); 0: not measured, inferred from forward_seconds.
    logprob_seconds: float = 0.0
    note: str = ""

    @property
    def seconds_per_answer(self) -> float:
        """Generating one answer at the measured batch's pace (eval_seconds reads it, as a MicroStep's)."""
        return self.generate_seconds / self.generate_rows if self.generate_rows else 0.0

    @property
    def logprob_seconds_per_answer(self) -> float:
        """One held-out answer's log-probs in the evaluation's KL pass: measured on the generated answers when
        there were any, else a training pair's no-grad forward halved (a pair is two sequences). Inferred, it was
        1.6x short on a 135M model at 128 tokens (13 s for 120 answers that took 21.5 s); measured, 0.10 s an answer
        where the evaluation's own took 0.16-0.18 s (docs/YOUR_TASK.md): closer, still short."""
        if self.logprob_seconds and self.generate_rows:
            return self.logprob_seconds / self.generate_rows
        return self.forward_seconds / (2 * self.rows)


def label_batches(pairs: int, rows: int) -> int:
    """Batches of `rows` pairs over `pairs` (the last one partial, as the Trainer's dataloader makes them)."""
    return math.ceil(pairs / rows) if pairs > 0 else 0


def label_step_seconds(micro: LabelMicroStep, accumulation: int, reference_each_step: bool) -> float:
    """One optimizer step: `accumulation` micro-batches of the policy's forward+backward, each with the reference's
    no-grad forward when its log-probs are not precomputed (DPO with precompute_ref_log_probs=False)."""
    return accumulation * (micro.train_seconds + (micro.forward_seconds if reference_each_step else 0.0))


def label_estimate(micro: LabelMicroStep, steps: int, accumulation: int, train_pairs: int, eval_pairs: int,
                   reference: str, eval_answers: int = 0, base_stored: bool = False) -> RunEstimate:
    """A DPO or reward-model run from its micro-batch: loading; the reference's one pass over the train and eval pairs
    before training (reference "once": DPO's precompute_ref_log_probs, the default); `steps` optimizer steps (the
    reference's forward in each when "each_step"; "none" for the reward model, which has no reference); the Trainer's
    evaluation of the eval pairs at the end (a no-grad forward, twice with a per-step reference); and, for a policy,
    the automatic evaluation: `eval_answers` held-out answers generated by the tuned model and by its base (not when
    a stored evaluation of the base is reused: `base_stored`), each loaded (load_seconds: the evaluation imports
    nothing anew), and the tuned model's KL to its base (both models' no-grad passes over its answers, the base loaded
    again)."""
    if reference not in ("none", "once", "each_step"):
        raise ValueError(f"reference={reference!r}: one of none, once, each_step")
    each = reference == "each_step"
    before = label_batches(train_pairs + eval_pairs, micro.rows) * micro.forward_seconds if reference == "once" else 0.0
    trainer_eval = label_batches(eval_pairs, micro.rows) * micro.forward_seconds * (2 if each else 1)
    generation = 0.0
    if eval_answers:
        # evaluation.evaluate_models: each model loaded and its answers generated; for the tuned one, KL to its base:
        # its own and the base's (loaded once more) no-grad log-prob passes over its answers
        kl = micro.load_seconds + 2 * eval_answers * micro.logprob_seconds_per_answer
        answering = 1 if base_stored else 2
        generation = answering * (micro.load_seconds + eval_seconds(micro, eval_answers, 1)) + kl
    return RunEstimate(label_step_seconds(micro, accumulation, each), steps, micro.setup_seconds,
                       trainer_eval + generation, micro.note, reference_seconds=before)


def steps_for_budget(budget_seconds: float, step_seconds: float, fixed_seconds: float) -> int:
    """The most whole steps that fit in the budget after the fixed costs (setup, evaluation). ValueError when
    not even one fits, saying how much one needs."""
    if step_seconds <= 0:
        raise ValueError(f"step time must be positive, got {step_seconds}")
    steps = math.floor((budget_seconds - fixed_seconds) / step_seconds)
    if steps < 1:
        raise ValueError(f"time_budget={format_duration(budget_seconds)} is too short: one step takes about "
                         f"{format_duration(step_seconds)} here, plus {format_duration(fixed_seconds)} to load and "
                         f"evaluate (at least {format_duration(fixed_seconds + step_seconds)})")
    return steps


# ---- the measurement --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MicroStepSettings:
    """What the micro-step depends on: the run's model and per-mini-batch shape."""

    model_path: str
    bf16: bool
    lora: bool
    lora_r: int
    lora_alpha: int
    rows: int  # mini_batch_size
    max_new_tokens: int
    answers_per_prompt: int
    advantage_estimator: str
    prompts: tuple[str, ...]  # the run's first prompts: their length decides the passes' cost
    chat_template: bool  # the project's prompt format (longer prompts with it)
    threads: int  # torch threads, as the worker gets them (launch.threads_per_process)
    generation_rows: int = 0  # answers the run generates in one batch (0: rows); timed up to GENERATION_ROWS_MEASURED
    # The run's precision and memory settings (run_settings), so the step timed is the one that will run.
    dtype: str | None = None  # the policy's load dtype (None: fp32 for full fine-tuning, the compute dtype for LoRA)
    load_in_4bit: bool = False
    gradient_checkpointing: bool = False
    attn_implementation: str = "auto"
    busy_run: int | None = None  # a running run holds the device: no model is loaded (model_free_micro_step)


def run_settings(db, trainer) -> dict:
    """MicroStepSettings' fields that come from the run's trainer config and the device's state: its dtype, 4-bit,
    gradient checkpointing and attention kernel, and the run (if any) that holds the device."""
    return {"dtype": getattr(trainer, "dtype", None), "load_in_4bit": bool(getattr(trainer, "load_in_4bit", False)),
            "gradient_checkpointing": bool(getattr(trainer, "gradient_checkpointing", False)),
            "attn_implementation": getattr(trainer, "attn_implementation", "auto"), "busy_run": busy_run(db)}


def busy_run(db) -> int | None:
    """The id of a run in status 'running' (the oldest), which holds the device a preview would time a micro-step on
    (the module docstring says why any running run does); None when the device is free."""
    row = db.execute("SELECT id FROM runs WHERE status = 'running' ORDER BY id LIMIT 1").fetchone()
    return row[0] if row else None


_cache: dict[MicroStepSettings, tuple[float, MicroStep]] = {}


def measure_micro_step(settings: MicroStepSettings, timeout: float = 600.0) -> MicroStep:
    """Run the micro-step in a fresh process (python -m labeler.services.training.run_estimate), cached for
    CACHE_SECONDS per settings. RuntimeError with the child's last line when it fails. While a run holds the device
    (settings.busy_run) no process is started and no model loaded: the micro-step is model_free_micro_step's."""
    if settings.busy_run is not None:
        return model_free_micro_step(settings, model_shape(settings.model_path))
    cached = _cache.get(settings)
    if cached is not None and time.monotonic() - cached[0] < CACHE_SECONDS:
        return cached[1]
    micro = MicroStep(**_measured_in_child(asdict(settings), timeout))
    _cache[settings] = (time.monotonic(), micro)
    return micro


def _micro_step_in_this_process(settings: MicroStepSettings) -> MicroStep:
    """Build the run's trainer on one mini-batch and time a warm-up micro-step (2 answers of 2 tokens: the
    first allocations and kernel choices) and then the measured one."""
    t0 = time.perf_counter()
    import torch

    from rlhf.generation import build_prompt_ids
    from rlhf.ppo import PPOTrainer
    from rlhf.value_head import AutoModelForCausalLMWithValueHead

    torch.set_num_threads(settings.threads)
    peft_config = None
    if settings.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=settings.lora_r, lora_alpha=settings.lora_alpha, lora_dropout=0.0,
                                 task_type="CAUSAL_LM", target_modules="all-linear")  # as runners.common.peft_config
    tokenizer = load_tokenizer(settings.model_path, padding_side="left")
    # loaded as the PPO runner loads it: the run's dtype, 4-bit, and (LoRA) its base in the compute dtype
    loading = PPOConfig(bf16=settings.bf16, dtype=settings.dtype, load_in_4bit=settings.load_in_4bit)
    model = AutoModelForCausalLMWithValueHead.from_pretrained(settings.model_path, peft_config=peft_config, seed=0,
                                                              **model_load_kwargs(loading, settings.lora))
    groups = max(1, settings.answers_per_prompt if settings.rows % settings.answers_per_prompt == 0 else 1)

    def micro_step(rows: int, generated: int, tokens: int) -> tuple[float, dict]:
        """Generate `generated` answers in one batch (timed), then one PPO step on the first `rows` of them."""
        config = PPOConfig(batch_size=rows, mini_batch_size=rows, ppo_epochs=1, bf16=settings.bf16, seed=0,
                           advantage_estimator=settings.advantage_estimator if rows % groups == 0 else "gae",
                           gradient_checkpointing=settings.gradient_checkpointing,
                           attn_implementation=settings.attn_implementation)
        trainer = PPOTrainer(config, model, None, tokenizer)
        # Whole groups of answers to one prompt, so the first `rows` (a multiple of the group) are whole groups too.
        n_prompts = max(1, generated // groups)
        texts = [settings.prompts[i % len(settings.prompts)] for i in range(n_prompts)
                 for _ in range(generated // n_prompts)]
        queries = [build_prompt_ids(tokenizer, text, use_chat_template=settings.chat_template) for text in texts]
        t = time.perf_counter()
        responses = trainer.generate(queries, return_prompt=False, batch_size=len(queries), max_new_tokens=tokens,
                                     min_new_tokens=tokens, allow_kl_unsafe=True)  # every answer full length
        generate = time.perf_counter() - t
        scores = [torch.tensor(float(i % 3) - 1.0) for i in range(rows)]  # not all equal: no warning
        stats = trainer.step(queries[:rows], responses[:rows], scores)
        return generate, stats

    # The run's generation batch, capped, in whole mini-batches (so whole groups of answers to a prompt).
    batch = min(settings.generation_rows or settings.rows, GENERATION_ROWS_MEASURED)
    generated = max(1, batch // settings.rows) * settings.rows
    setup = time.perf_counter() - t0
    micro_step(min(2, settings.rows), min(2, settings.rows), 2)  # warm-up
    generate, stats = micro_step(settings.rows, generated, settings.max_new_tokens)
    return MicroStep(rows=settings.rows, generate_seconds=generate, forward_seconds=stats["time/ppo/forward_pass"],
                     train_seconds=stats["time/ppo/optimize_step"], setup_seconds=setup, generate_rows=generated)


# ---- the measurement of a DPO or reward-model micro-batch ----------------------------------------------------

@dataclass(frozen=True)
class LabelStepSettings:
    """What a DPO or reward-model micro-batch depends on: the run's model, precision and the first pairs of its own
    training data (so the batches have the run's token lengths: a batch is padded to its longest sequence)."""

    stage: str  # "dpo" (a causal LM and its completion log-probs) or "rm" (a scalar head)
    model_path: str
    bf16: bool
    lora: bool
    lora_r: int
    lora_alpha: int
    pairs_json: str  # the run's first training pairs, up to LENGTH_SAMPLE, as JSON (hashable for the cache)
    max_length: int | None
    max_prompt_length: int | None  # DPO only
    share_prompt_forward: bool  # DPO: a pair's prompt run once, chosen and rejected after it
    threads: int
    max_new_tokens: int = 0  # DPO: the held-out answers' length in the automatic evaluation
    generate_rows: int = 0  # answers generated together in that evaluation (0: no evaluation)
    prompts: tuple[str, ...] = ()  # held-out prompts to generate from
    chat_template: bool = False
    dtype: str | None = None
    load_in_4bit: bool = False
    gradient_checkpointing: bool = False
    attn_implementation: str = "auto"
    busy_run: int | None = None
    rows: int = 0  # pairs per batch (the run's per_device_train_batch_size); 0: all of pairs_json in one batch


def _measured_in_child(payload: dict, timeout: float) -> dict:
    """Run `python -m labeler.services.training.run_estimate` with `payload` on stdin, as the worker would run (its
    threads, no busy-waiting OpenMP), and return the last JSON line it prints. RuntimeError with the child's last
    line."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": str(payload["threads"])}
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as supervision.spawn starts the worker
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, "-m", "labeler.services.training.run_estimate"], input=json.dumps(payload),
                          capture_output=True, text=True, env=env, timeout=timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"measuring a micro-step failed: {last}")
    return json.loads(lines[-1])


_label_cache: dict[LabelStepSettings, tuple[float, LabelMicroStep]] = {}


def measure_label_step(settings: LabelStepSettings, timeout: float = 600.0) -> LabelMicroStep:
    """A DPO or reward-model micro-batch timed in a fresh process, cached CACHE_SECONDS per settings. While a run
    holds the device nothing is loaded and there is no estimate (RuntimeError saying so; the preview shows it)."""
    if settings.busy_run is not None:
        raise RuntimeError(f"run {settings.busy_run} is training on this device, so no model was loaded to time a "
                           "step; preview again when it has finished")
    cached = _label_cache.get(settings)
    if cached is not None and time.monotonic() - cached[0] < CACHE_SECONDS:
        return cached[1]
    micro = LabelMicroStep(**_measured_in_child({"label": asdict(settings), "threads": settings.threads}, timeout))
    _label_cache[settings] = (time.monotonic(), micro)
    return micro


def _label_step_in_this_process(settings: LabelStepSettings) -> LabelMicroStep:
    """Load the model as the run does and time, on the first LABEL_BATCHES_MEASURED batches of the run's pairs
    (measured_batches): a warm-up step on the first (the first allocations), then a training step (forward, backward,
    AdamW) and a no-grad forward on each, averaged and scaled from those batches' mean padded length to the run's
    average batch's (expected_padded_length over every pair given), and (DPO) a batch of held-out answers generated
    at full length, as the automatic evaluation generates them."""
    t0 = time.perf_counter()
    import torch

    from rlhf import data

    torch.set_num_threads(settings.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    policy = settings.stage != "rm"
    loading = PPOConfig(bf16=settings.bf16, dtype=settings.dtype, load_in_4bit=settings.load_in_4bit)
    kwargs = model_load_kwargs(loading, settings.lora)
    tokenizer = load_tokenizer(settings.model_path, padding_side="right")
    t_load = time.perf_counter()
    if policy:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(settings.model_path, **kwargs)
    else:
        from transformers import AutoModelForSequenceClassification

        model = AutoModelForSequenceClassification.from_pretrained(settings.model_path, num_labels=1, **kwargs)
        model.config.pad_token_id = tokenizer.pad_token_id
    if settings.lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=settings.lora_r, lora_alpha=settings.lora_alpha, lora_dropout=0.0,
                                                 task_type="CAUSAL_LM" if policy else "SEQ_CLS",
                                                 target_modules="all-linear"))
    if settings.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if "device_map" not in kwargs:
        model.to(device)
    setup, load = time.perf_counter() - t0, time.perf_counter() - t_load
    rows = json.loads(settings.pairs_json)
    if policy:
        from rlhf.logps import completion_logps

        collate = data.PreferenceCollator(tokenizer.pad_token_id)
        examples = [data.tokenize_preference_causal(row, tokenizer, settings.max_length, settings.max_prompt_length)
                    for row in rows]

        def scores(batch):
            return completion_logps(model, batch, settings.share_prompt_forward)
    else:
        collate = data.RewardCollator(tokenizer.pad_token_id)
        examples = [data.tokenize_preference_reward(row, tokenizer, settings.max_length) for row in rows]

        def scores(batch):
            return model(**batch).logits

    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-7)
    autocast = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=settings.bf16)

    def timed(batch, train: bool) -> float:
        batch = {key: value.to(device) for key, value in batch.items()}
        t = time.perf_counter()
        if train:
            model.train()
            with autocast:
                loss = scores(batch).float().sum()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        else:
            model.eval()
            with torch.no_grad(), autocast:
                scores(batch)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t

    timed_pairs = examples[:settings.rows * LABEL_BATCHES_MEASURED] if settings.rows else examples
    chunks = measured_batches(timed_pairs, settings.rows)
    batches = [collate(chunk) for chunk in chunks]
    timed(batches[0], train=True)  # warm-up
    train = sum(timed(batch, train=True) for batch in batches) / len(batches)
    forward = sum(timed(batch, train=False) for batch in batches) / len(batches)
    measured_tokens = sum(int(batch["input_ids"].shape[1]) for batch in batches) / len(batches)
    lengths = [int(collate([example])["input_ids"].shape[1]) for example in examples]  # each pair padded alone
    tokens = expected_padded_length(lengths, len(chunks[0]))
    # A step's time grows with its batch's padded length (about linearly at these lengths: the matrix products)
    train, forward = train * tokens / measured_tokens, forward * tokens / measured_tokens
    generate = logprob = 0.0
    if policy and settings.generate_rows and settings.prompts:
        from rlhf.evaluation import response_logprob_sums
        from rlhf.generation import build_prompt_ids, left_pad

        prompts = [settings.prompts[i % len(settings.prompts)] for i in range(settings.generate_rows)]
        ids = [build_prompt_ids(tokenizer, text, use_chat_template=settings.chat_template) for text in prompts]
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        input_ids, attention_mask = left_pad(ids, pad)
        model.eval()
        t = time.perf_counter()
        with torch.no_grad(), autocast:  # every answer full length: an upper bound, as the PPO micro-step times it
            output = model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                                    do_sample=True, max_new_tokens=settings.max_new_tokens,
                                    min_new_tokens=settings.max_new_tokens, pad_token_id=pad)
        generate = time.perf_counter() - t
        # The evaluation's KL pass over these answers, in one batch as it runs them (its batch is the generation's)
        answers = [row.cpu() for row in output[:, input_ids.shape[1]:]]
        t = time.perf_counter()
        with torch.no_grad(), autocast:
            response_logprob_sums(model, ids, answers, pad, batch_size=len(answers))
        if device == "cuda":
            torch.cuda.synchronize()
        logprob = time.perf_counter() - t
    return LabelMicroStep(rows=len(chunks[0]), train_seconds=train,
                          forward_seconds=forward, setup_seconds=setup, generate_seconds=generate,
                          generate_rows=settings.generate_rows if generate else 0, tokens=round(tokens),
                          load_seconds=load, logprob_seconds=logprob)


def expected_padded_length(lengths: list[int], rows: int) -> float:
    """The padded length of a batch of `rows` pairs drawn at random without replacement from pairs of these
    lengths (a batch is padded to its longest): E[max] = sum_k l_(k) * (C(k, rows) - C(k-1, rows)) / C(n, rows),
    l_(k) the k-th shortest, the chance that the k shortest hold the whole batch and the (k-1) shortest do not."""
    ordered, n = sorted(lengths), len(lengths)
    rows = max(1, min(rows, n))
    total = math.comb(n, rows)
    return sum(length * (math.comb(k, rows) - math.comb(k - 1, rows)) for k, length in enumerate(ordered, 1)) / total


def measured_batches(examples: list, rows: int) -> list[list]:
    """The batches of `rows` a micro-batch is timed on: every full one (a partial last batch would lower the mean),
    or all of `examples` as one when there is no full batch (rows 0, or fewer pairs than rows: the run's one batch)."""
    full = [examples[i:i + rows] for i in range(0, len(examples) - rows + 1, rows)] if rows > 0 else []
    return full or [examples]


# ---- without a model: the micro-step from arithmetic, for a device a run is using ------------------------------
# Nominal sustained throughput of a training step's matrix products, FLOP/s: a GPU at about 40% of an A100's bf16 peak
# (312 TFLOP/s), a CPU thread at about 30% of an AVX2 core's fp32 FMA peak (2 x 8 x 2 FLOP a cycle at ~2.5 GHz).
# Rough on purpose: the preview says the figure is not measured.
GPU_FLOPS = 125e12
CPU_FLOPS_PER_THREAD = 25e9
# Token-by-token generation reads every weight per token: far below the matmul rate (memory-bound).
GENERATION_EFFICIENCY = 0.25
LOAD_BYTES_PER_SECOND = 500e6  # reading the weights from a local disk


def model_free_micro_step(settings: MicroStepSettings, shape, device_type: str | None = None,
                          prompt_tokens: int | None = None) -> MicroStep:
    """A MicroStep from FLOPs rather than a measurement: 2 FLOPs per weight and token through the blocks, the LM head
    (vocabulary x hidden) only on answer tokens, a no-grad pass twice (policy and reference), a training mini-batch
    3x a forward (2x with LoRA: no weight gradients for the base; 4/3 more with checkpointing's recomputation),
    generation at GENERATION_EFFICIENCY of the rate. Tested by hand-worked values."""
    if device_type is None:
        import torch

        device_type = "cuda" if torch.cuda.is_available() else "cpu"
    rate = GPU_FLOPS if device_type == "cuda" else CPU_FLOPS_PER_THREAD * settings.threads
    prompt = PROMPT_TOKENS if prompt_tokens is None else prompt_tokens
    answer = settings.max_new_tokens
    head = shape.vocab_size * shape.hidden_size
    blocks = shape.parameters - head * (1 if shape.tied_embeddings else 2)  # the embedding lookup costs nothing
    forward = settings.rows * (2 * blocks * (prompt + answer) + 2 * head * answer)  # one pass over a mini-batch
    train = forward * (2 if settings.lora else 3) * (4 / 3 if settings.gradient_checkpointing else 1)
    generated = max(1, min(settings.generation_rows or settings.rows, GENERATION_ROWS_MEASURED) // settings.rows) * settings.rows
    generate = generated * answer * 2 * (blocks + head) / (rate * GENERATION_EFFICIENCY)
    half = settings.lora or settings.dtype in ("bfloat16", "float16")  # LoRA's base in the compute dtype
    weight_bytes = shape.parameters * (0.5 if settings.load_in_4bit else 2 if half else 4)
    return MicroStep(rows=settings.rows, generate_seconds=generate, forward_seconds=PPO_NO_GRAD_PASSES * forward / rate,
                     train_seconds=train / rate, setup_seconds=weight_bytes / LOAD_BYTES_PER_SECOND,
                     generate_rows=generated,
                     note=(f"not measured: run {settings.busy_run} is training on this "
                           f"{'GPU' if device_type == 'cuda' else 'machine'}, so no model was loaded; worked out from "
                           f"{shape.parameters / 1e9:.2f}B parameters, a {shape.vocab_size:,}-token vocabulary and "
                           f"{prompt + answer}-token rows at a nominal speed"))


if __name__ == "__main__":  # the measuring process: settings as JSON on stdin, the micro-step as JSON on stdout
    raw = json.loads(sys.stdin.read())
    if "label" in raw:  # a DPO or reward-model micro-batch (measure_label_step)
        label = {**raw["label"], "prompts": tuple(raw["label"]["prompts"])}
        print(json.dumps(asdict(_label_step_in_this_process(LabelStepSettings(**label)))), flush=True)
    else:
        raw["prompts"] = tuple(raw["prompts"])
        print(json.dumps(asdict(_micro_step_in_this_process(MicroStepSettings(**raw)))), flush=True)


# ---- memory: how much the run will hold, from the model's config and the run's shapes (rlhf/memory_estimate.py) --
PROMPT_TOKENS = 64  # a typical prompt's length in tokens (the estimate does not tokenise the project's prompts)


def train_shape(stage: str, job, trainer, device_type: str):
    """The run's TrainShape: rows and tokens per forward/backward, precision, LoRA (QLoRA), the reference copy and
    its dtype (PPO's and GRPO's copy in bf16 where the run computes in bf16; DPO/KTO's is loaded as the policy is).
    What differs between stages is read from their facts (training_stages: ppo_loop, online_trl, sequences_per_row,
    logit_tokens, reference_copy)."""
    from rlhf.attention import training_attention

    facts = training_stages.get(stage)
    compute = 2 if job.bf16 else 4
    dtype = getattr(trainer, "dtype", None)
    quantized = bool(getattr(trainer, "load_in_4bit", False))
    copied_reference_bytes = 2 if reference_dtype(autocast_dtype(job.bf16, device_type)) is not None else None
    if quantized:
        load = compute  # what the 4-bit load leaves unquantised; the estimate counts NF4 and fp32 parts itself
    elif dtype in ("bfloat16", "float16"):
        load = 2
    elif job.lora and not dtype:
        load = compute  # LoRA's frozen base in the compute dtype (rlhf/precision.py)
    else:
        load = 4
    attention = training_attention(getattr(trainer, "attn_implementation", "model"), device_type)
    common = dict(lora_r=job.lora_r if job.lora else 0, load_bytes=load, compute_bytes=compute, quantized_4bit=quantized,
                  gradient_checkpointing=bool(trainer.gradient_checkpointing),
                  eager_attention=attention in ("eager", "lean_eager"))
    if facts.ppo_loop:
        tokens = PROMPT_TOKENS + job.max_new_tokens
        return TrainShape(rows=trainer.mini_batch_size, tokens=tokens, logit_tokens=job.max_new_tokens,
                          reference=not job.lora, reference_bytes=copied_reference_bytes,
                          no_grad_rows=trainer.rollout_forward_batch_size,
                          generation_rows=trainer.batch_size, **common)
    if facts.online_trl:
        answer = trainer.max_completion_length
        return TrainShape(rows=trainer.per_device_train_batch_size, tokens=PROMPT_TOKENS + answer, logit_tokens=answer,
                          reference=trainer.beta != 0 and not job.lora, reference_bytes=copied_reference_bytes,
                          no_grad_rows=trainer.per_device_train_batch_size,
                          generation_rows=trainer.generation_batch_size or trainer.per_device_train_batch_size, **common)
    tokens = trainer.max_length or 512
    rows = trainer.per_device_train_batch_size * facts.sequences_per_row  # pairs, KTO's KL rows: 2 sequences a row
    logit_tokens = {"all": tokens, "none": 0}.get(facts.logit_tokens, max(1, tokens - PROMPT_TOKENS))
    reference = facts.reference_copy and not job.lora and not getattr(trainer, "precompute_ref_log_probs", False)
    return TrainShape(rows=rows, tokens=tokens, logit_tokens=logit_tokens, reference=reference,
                      reference_bytes=copied_reference_bytes, **common)


def device_memory() -> tuple[str, float]:
    """(what trains, its memory in bytes): the first CUDA GPU, or this machine's RAM."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0), float(torch.cuda.get_device_properties(0).total_memory)
    return "this machine's RAM", float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def memory_text(model_path: str, stage: str, job, trainer, recipe_for=None, reward_model_bytes: float = 0.0) -> str:
    """The preview's memory line: the estimate for the run's model on this device, what it is made of, a warning
    when it exceeds the device, and the recipe the model's size suggests (`recipe_for(parameters) -> name`).
    `reward_model_bytes`: the reward models the run scores with, resident beside the policy (reward_model_bytes)."""
    import torch

    try:
        shape = model_shape(model_path)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        estimate = estimate_training_memory(shape, train_shape(stage, job, trainer, device))
        estimate = replace(estimate, reward_models=float(reward_model_bytes))
    except Exception as error:  # an unknown model, a config transformers cannot read: the preview still shows
        return f"No memory estimate: {str(error).splitlines()[0] if str(error) else type(error).__name__}."
    name, total = device_memory()
    vocabulary = f", vocabulary {shape.vocab_size:,}" if shape.vocab_size else ""
    text = (f"**Memory: about {estimate.total / GIB:.1f} GiB** of {total / GIB:.0f} GiB ({name}) for "
            f"{shape.parameters / 1e9:.2f}B parameters{vocabulary}: {estimate.summary()}")
    if not training_stages.get(stage).samples:  # label stages: batches are as long as their longest row
        text += f", with every sequence at max_length {getattr(trainer, 'max_length', None) or 512} (an upper bound)"
    text += "."
    if estimate.total > 0.9 * total:
        text += (" ⚠️ More than this device holds: set lora=true (load_in_4bit=true on a GPU), "
                 "gradient_checkpointing=true, a smaller mini-batch or shorter answers.")
    suggested = recipe_for(shape.parameters) if recipe_for else ""
    if suggested and suggested != getattr(job, "recipe", ""):
        text += f" For a model of this size: --set recipe={suggested} (docs/GPU.md)."
    return text


def reward_model_bytes(db, stage: str, job) -> int:
    """What the reward models of a policy run (reward=rm or mix: the newest reward model, a named one, or each of a
    weighted sum's) take once loaded for scoring on this host (inference.estimated_bytes: the file's size, doubled
    when a half-precision checkpoint is scored in fp32). 0 for label stages, other rewards, or a model not on disk.
    The app-loop check at the 1.5B shape measured PPO reward=rm at 15.0 GiB against an estimate of 6.7 without it."""
    if not training_stages.get(stage).samples or getattr(job, "reward", None) not in ("rm", "mix"):
        return 0
    named = job.reward_model or models.newest_or_blank(db, "reward")
    if not named:
        return 0
    total = 0
    for name in reward_spec.reward_models(named):
        try:
            path = str(models.resolve(db, name))
        except Exception:  # noqa: BLE001 -- a name the run's own check refuses; the estimate leaves it out
            continue
        total += inference.estimated_bytes(path, inference.host_device(), inference.cpu_flags())
    return total
