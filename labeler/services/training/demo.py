"""`rlhf-studio demo`: the whole loop on the embedded models, on CPU, in one command.

1. import the shipped movie-review openings; their fixed held-out set (split 'test', every fifth line) is never
   generated for, labelled or trained on
2. generate answers per training prompt with the default policy (labeler.services.serving.generation): 8 by default,
   ranked together in one label, so each prompt gives up to 28 preference pairs (on the same 108 prompts, the
   reward model's held-out accuracy was 0.43 with 2 answers, 0.69 with 4 and 0.80-0.83 with 8)
3. a simulated annotator ranks each pair (set) by VADER compound sentiment (+ optional Gaussian noise), through the
   same labeling service people use
4. train the MiniLM reward model on those preferences (a real queued run, worker process and all)
5. PPO on the default policy with that reward model (another run)
6. on the held-out prompts: the PPO run's automatic evaluation (labeler/services/evals/evaluation.py, the same code as
   `rlhf-studio eval` and the Train tab's table): answers of the base and the tuned policy, VADER of the answer
   alone, positive share, KL to the base, distinct-2, and the reward model's scores of both

The task is the seeds' (TRL's sentiment example): make the model write positive movie reviews.

The demo works in its own project (`demo`, created with the shipped prompts when missing), so it never adds
rankings to, or moves prompts of, a project people label in. Its simulated annotator is a real account (labels
need one) with a random password nobody learns (`secrets`, never printed, unrelated to the seed), active only
while it labels and deactivated when the demo ends, failures included. Only one demo runs per database at a time
(`demo_lock`, an flock on `<db>.demo.lock`, released by the kernel if the process dies).
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import random
import secrets
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from labeler.services.data import accounts, labeling, projects, prompts
from labeler.services.evals import evaluation
from labeler.services.serving import generation, models
from labeler.services.training import hub, jobs, train_configs
from labeler.services.execution import run_metrics, runs
from labeler.errors import InputError
from labeler.services.settings.job_settings import JobConfig
from rlhf.configs import GenerationSettings, PPOConfig
from rlhf.hardware import bf16_is_fast
from rlhf.rewards import vader_answer
from storage import open_db, write_transaction

ANNOTATOR = "simulated-annotator"
DEMO_PROJECT = "demo"
_PPO, _JOB = PPOConfig(bf16=False), JobConfig(bf16=False)  # the defaults the demo starts from


@dataclass(frozen=True)
class DemoSettings:
    prompts: int = field(default=0, metadata={"help": "Training prompts to generate for and label (0: all not held out)."})
    answers: int = field(default=8, metadata={"help": "Answers per training prompt, ranked together in one label (n answers give n(n-1)/2 pairs; at most 8)."})
    heldout: int = field(default=16, metadata={
        "help": "Prompts moved to split 'test' when the project has no held-out prompts (the shipped set has 27)."})
    eval_samples: int = field(default=4, metadata={"help": "Answers per held-out prompt in the before/after evaluation."})
    # Measured on the shipped continuation task (held-out accuracy on the prompt-split eval pairs): with 4 answers
    # per prompt, 60 steps at 5e-5 reached 0.65, 120 steps at 2e-4 with 10% warm-up 0.75; with 8 answers (2286
    # pairs), 120 steps at 2e-4 0.80, 240 at 2e-4 0.81, 360 at 1e-4 0.83, 480 at 1e-4 0.83.
    rm_steps: int = field(default=360, metadata={"help": "Reward-model training steps (the first tenth warm up)."})
    # The PPO settings default to the shipped recipe (PPOConfig's and JobConfig's defaults): the demo shows
    # what a user gets without tuning anything.
    ppo_steps: int = field(default=_JOB.steps, metadata={"help": "PPO steps."})
    ppo_batch_size: int = field(default=_PPO.batch_size, metadata={"help": "Rollouts per PPO step."})
    ppo_answers_per_prompt: int = field(default=_JOB.answers_per_prompt, metadata={
        "help": "Answers per prompt in a PPO batch (RLOO's groups; must divide ppo_batch_size)."})
    ppo_mini_batch_size: int = field(default=_PPO.mini_batch_size, metadata={"help": "PPO mini-batch size."})
    ppo_epochs: int = field(default=_PPO.ppo_epochs, metadata={"help": "PPO epochs per batch."})
    learning_rate: float = field(default=_PPO.learning_rate, metadata={"help": "PPO learning rate."})
    rm_learning_rate: float = field(default=1e-4, metadata={"help": "Reward-model learning rate."})
    init_kl_coef: float = field(default=_PPO.init_kl_coef, metadata={"help": "PPO initial KL coefficient."})
    max_new_tokens: int = field(default=_JOB.max_new_tokens, metadata={"help": "Tokens per response."})
    noise: float = field(default=0.0, metadata={"help": "Std of Gaussian noise added to the annotator's VADER score."})
    bf16: bool = field(default_factory=bf16_is_fast, metadata={
        "help": "bf16 autocast for generation and training (default: on where the hardware runs it fast)."})
    seed: int = field(default=0, metadata={"help": "Random seed."})
    policy: str = field(default="default", metadata={"help": "Policy model (default: the embedded SmolLM2-135M)."})
    encoder: str = field(default="default-encoder", metadata={"help": "Reward-model backbone (default: MiniLM)."})
    out_dir: str = field(default="runs/demo", metadata={"help": "Folder for the demo's runs."})


@dataclass
class DemoReport:
    rows: list[dict]  # per held-out answer: query, before, after, reward_before/after (RM), vader_before/after
    timings: dict[str, float]
    rm_run: int
    ppo_run: int
    rm_metrics: dict
    evaluations: list = field(default_factory=list)  # evaluation.Evaluation of the base and the tuned policy
    samples: int = 1  # answers per prompt: rows come grouped by prompt

    def column(self, name: str) -> list[float]:
        return [row[name] for row in self.rows]

    def summary(self) -> dict[str, float]:
        out = {}
        for name in ("reward_before", "reward_after", "vader_before", "vader_after"):
            values = self.column(name)
            out[f"{name}_mean"] = statistics.fmean(values)
            out[f"{name}_median"] = statistics.median(values)
        return out

    def table(self) -> str:
        def cut(text: str, n: int) -> str:
            text = " ".join(text.split())
            return text if len(text) <= n else text[: n - 1] + "…"

        lines = [f"{'query':<40} | {'response before':<40} | {'response after':<40} | {'r before':>8} | {'r after':>8}",
                 "-" * 148]
        for row in self.rows[:: self.samples]:  # the first answer to each prompt
            lines.append(f"{cut(row['query'], 40):<40} | {cut(row['before'], 40):<40} | {cut(row['after'], 40):<40} | "
                         f"{row['reward_before']:>8.3f} | {row['reward_after']:>8.3f}")
        s = self.summary()
        lines.append("-" * 148)
        lines.append(f"{'mean':<40} | {'':<40} | {'':<40} | {s['reward_before_mean']:>8.3f} | {s['reward_after_mean']:>8.3f}")
        lines.append(f"{'median':<40} | {'':<40} | {'':<40} | {s['reward_before_median']:>8.3f} | {s['reward_after_median']:>8.3f}")
        lines.append(f"VADER of the answer alone mean before {s['vader_before_mean']:.3f}, "
                     f"after {s['vader_after_mean']:.3f} (over all {len(self.rows)} answers)")
        if self.evaluations:
            lines += ["", evaluation.format_report(self.evaluations, examples=0)]
        lines.append("timings: " + ", ".join(f"{k} {v:.0f}s" for k, v in self.timings.items()))
        return "\n".join(lines)


def _split_prompts(db, project: str, settings: DemoSettings) -> tuple[list[int], list[int]]:
    """(held-out ids, training ids). The held-out prompts are the project's split 'test' (the shipped set's
    fixed fifth); a project without any gets `heldout` prompts, drawn with the seed, moved there. The training
    prompts are the first `prompts` of the others, shuffled with the seed."""
    splits = prompts.prompt_splits(db, projects.get_project(db, project).id)
    heldout = [prompt_id for prompt_id, split in splits if split == "test"]
    ids = [prompt_id for prompt_id, split in splits if split != "test"]
    random.Random(settings.seed).shuffle(ids)
    if not heldout:
        heldout, ids = sorted(ids[: settings.heldout]), ids[settings.heldout:]
        with write_transaction(db):
            prompts.hold_out(db, heldout)
    return heldout, ids[: settings.prompts or None]


def lock_path(db_path: str) -> Path:
    """The demo's lock file, beside the database: one demo per database, whoever starts it (CLI or Train tab)."""
    return Path(f"{db_path}.demo.lock")


def _try_lock(db_path: str):
    """An open file holding the demo's exclusive flock, or None when another process holds it."""
    path = lock_path(db_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def _already_running(db_path: str) -> InputError:
    return InputError(f"a demo is already running on this database (lock {lock_path(db_path)}); "
                      "wait for it to end", field="demo")


@contextlib.contextmanager
def demo_lock(db_path: str):
    """Held for the whole demo. An flock rather than a row: the kernel drops it when the process dies
    (kill -9 included), so a crashed demo never blocks the next one."""
    handle = _try_lock(db_path)
    if handle is None:
        raise _already_running(db_path)
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield
    finally:
        handle.close()  # closing releases the flock


def demo_running(db_path: str) -> bool:
    """Whether a demo holds the lock now (the Train tab asks before starting one)."""
    handle = _try_lock(db_path)
    if handle is None:
        return True
    handle.close()
    return False


def _activate_annotator(db) -> None:
    """The simulated annotator's account, active, with a fresh random password that is never shown: labels
    need an account, but nobody should be able to log in as it (a seeded password could be computed)."""
    password = secrets.token_urlsafe(32)
    user = accounts.get_user(db, ANNOTATOR)
    if user is None:
        accounts.create_user(db, ANNOTATOR, password)
    elif user.is_admin:  # a person's account of that name: never reset its password
        raise InputError(f"user '{ANNOTATOR}' is an admin; the demo needs that name for its simulated annotator",
                         field="username")
    else:
        accounts.set_password(db, ANNOTATOR, password)
        accounts.set_simulated_active(db, ANNOTATOR, True)


def _deactivate_annotator(db) -> None:
    accounts.set_simulated_active(db, ANNOTATOR, False)


def simulate_annotator(db, project: str, noise: float, seed: int, prompt_ids: list[int] | None = None) -> int:
    """Rank every open ranking item by VADER compound of the answer (+ noise), near-equal scores tied (tie_groups). Goes
    through labeling.next_item / submit_ranking, exactly like a person in the Rank tab. Returns the count.
    The annotator's account is active only while it labels."""
    _activate_annotator(db)
    try:
        return _rank_all(db, project, noise, seed, prompt_ids)
    finally:
        _deactivate_annotator(db)


# The reward-model run's fixed settings (DemoSettings has the ones worth changing); bench/reward_accuracy.py
# trains the same way.
RM_BATCH_SIZE = 16
RM_TEST_SIZE = 0.2  # the eval fifth of the training prompts, split by prompt


# Scores closer than this to the best of their group are a tie, as for a person, who cannot tell a 0.31 answer
# from a 0.34 one: pairs that differ only by VADER's rounding would teach the reward model noise.
TIE_MARGIN = 0.1


def tie_groups(ids: list[int], scores: list[float], margin: float) -> list[list[int]]:
    """Best-to-worst groups of `ids`: going down the scores, an answer joins the current group while it is within
    `margin` of the group's best score, else it starts the next group. (Rounding scores to a grid instead would
    split 0.349 from 0.351.)"""
    groups: list[list[int]] = []
    top = None
    for score, id_ in sorted(zip(scores, ids), key=lambda pair: -pair[0]):
        if top is None or top - score >= margin:
            groups.append([])
            top = score
        groups[-1].append(id_)
    return groups


def _rank_all(db, project: str, noise: float, seed: int, prompt_ids: list[int] | None) -> int:
    rng = random.Random(seed)
    wanted = set(prompt_ids) if prompt_ids is not None else None
    done = 0
    while (item := labeling.next_item(db, project, ANNOTATOR, "ranking")) is not None:
        if wanted is not None and item.prompt_id not in wanted:
            labeling.skip_item(db, project, ANNOTATOR, item.item_id)
            continue
        texts = [r["text"] for r in item.responses]
        scores = [s + rng.gauss(0, noise) if noise else s for s in vader_answer([item.prompt] * len(texts), texts)]
        order = tie_groups([r["id"] for r in item.responses], scores, TIE_MARGIN)
        labeling.submit_ranking(db, project, ANNOTATOR, item.item_id, order)
        done += 1
    return done


def _wait(db, run_id: int, log: Callable[[str], None]) -> runs.Run:
    last = None
    while True:
        jobs.poll(db)
        run = runs.get_run(db, run_id)
        line = f"  run {run.id} ({run.stage}) {run.status} step {run.step}/{run.total_steps or '?'}"
        if line != last:
            log(line)
            last = line
        if run.finished:
            if run.status != "succeeded":
                raise RuntimeError(f"demo: run {run.id} {run.status}: {run.error}\n{run_metrics.log_tail(run, 30)}")
            return run
        time.sleep(1.0)


def _ensure_project(db, project: str) -> None:
    if not any(p.name == project for p in projects.list_projects(db)):
        projects.create_project(db, project, guidelines="The demo's simulated annotator ranks answers by VADER "
                                                         "sentiment: the more positive review is better.")


def run_demo(db_path: str, settings: DemoSettings, project: str = DEMO_PROJECT,
             log: Callable[[str], None] = print) -> DemoReport:
    """The whole loop (module docstring) in `project`, created with the shipped prompts when missing.
    Raises InputError when another demo is running on this database."""
    if project == "default":
        raise InputError("the demo never runs in the 'default' project, where people label: it adds rankings "
                         "and moves prompts to the held-out split (use 'demo')", field="project")
    with demo_lock(db_path):
        db = open_db(db_path)
        try:
            return _run(db, settings, project, log)
        finally:
            # Also after a failure: the simulated annotator's account never stays open.
            _deactivate_annotator(db)


def generate_training_answers(db, settings: DemoSettings, project: str = DEMO_PROJECT,
                              log: Callable[[str], None] = lambda line: None) -> tuple[list[int], list[int]]:
    """Steps 1-2: the project (created when missing) with the shipped prompts, split into held-out and training
    prompts, and `settings.answers` answers per training prompt queued as one ranking item each. Returns (held-out
    ids, training ids)."""
    _ensure_project(db, project)
    prompts.import_shipped_prompts(db, project)
    heldout, train = _split_prompts(db, project, settings)
    log(f"1. prompts: {len(train)} for training, {len(heldout)} held out")
    gen = GenerationSettings(max_new_tokens=settings.max_new_tokens, batch_size=16, seed=settings.seed,
                             autocast=settings.bf16)
    generation.generate_responses(db, project, settings.policy, n_per_prompt=settings.answers, settings=gen,
                                  prompt_ids=train, ranking_size=max(settings.answers, labeling.MIN_RANKING_SIZE))
    return heldout, train


def _run(db, settings: DemoSettings, project: str, log: Callable[[str], None]) -> DemoReport:
    from rlhf.reward import RewardScorer  # torch and transformers

    if settings.answers > labeling.MAX_RANKING_SIZE:
        raise InputError(f"at most {labeling.MAX_RANKING_SIZE} (they are ranked in one label), got {settings.answers}",
                         field="answers")
    timings: dict[str, float] = {}
    t = time.monotonic()
    heldout, train = generate_training_answers(db, settings, project, log)
    timings["generate"] = time.monotonic() - t
    log(f"2. generated {settings.answers} answers per training prompt ({timings['generate']:.0f}s)")

    t = time.monotonic()
    ranked = simulate_annotator(db, project, settings.noise, settings.seed, train)
    timings["label"] = time.monotonic() - t
    log(f"3. the simulated annotator ranked {ranked} sets of answers by VADER sentiment (noise {settings.noise})")

    t = time.monotonic()
    runs_dir = Path(settings.out_dir)
    rm = jobs.create_run(db, "rm", {"model": settings.encoder, "steps": settings.rm_steps, "checkpoint_every": 0,
                                    "per_device_train_batch_size": RM_BATCH_SIZE,
                                    "learning_rate": settings.rm_learning_rate,
                                    "warmup_steps": max(1, settings.rm_steps // 10), "bf16": settings.bf16,
                                    "test_size": RM_TEST_SIZE, "seed": settings.seed},
                         project=project, name="demo reward model", runs_dir=runs_dir)
    log(f"4. training the reward model (run {rm.id}, log {rm.log_path})")
    rm = _wait(db, rm.id, log)
    rm_model = models.model_of_run(db, rm.id)["name"]
    rm_metrics = models.get_model(db, rm_model)["metrics"]
    timings["reward model"] = time.monotonic() - t
    log(f"   reward model {rm_model}: eval accuracy {rm_metrics.get('eval_accuracy', float('nan')):.2f}")

    t = time.monotonic()
    ppo = jobs.create_run(db, "ppo", {
        "model": settings.policy, "reward": "rm", "reward_model": rm_model, "steps": settings.ppo_steps,
        "checkpoint_every": max(1, settings.ppo_steps // 2), "bf16": settings.bf16,
        "max_new_tokens": settings.max_new_tokens, "seed": settings.seed, "batch_size": settings.ppo_batch_size,
        "answers_per_prompt": settings.ppo_answers_per_prompt,
        "mini_batch_size": settings.ppo_mini_batch_size, "ppo_epochs": settings.ppo_epochs,
        "learning_rate": settings.learning_rate, "init_kl_coef": settings.init_kl_coef,
        "eval_samples": settings.eval_samples,
    }, project=project, name="demo PPO", runs_dir=runs_dir)
    log(f"5. PPO on the policy with the reward model (run {ppo.id}, log {ppo.log_path})")
    ppo = _wait(db, ppo.id, log)
    timings["ppo"] = time.monotonic() - t

    t = time.monotonic()
    after_model = models.model_of_run(db, ppo.id)["name"]
    # The PPO worker already evaluated both models with exactly these settings (evaluation.auto_settings):
    # reuse those; evaluate only what is missing (eval_samples=0, or an evaluation that failed).
    eval_settings = evaluation.auto_settings(db, project, train_configs.load_job_config(ppo.config))
    if settings.eval_samples < 1:
        eval_settings = dataclasses.replace(eval_settings, samples=1)
    before, after = evaluation.evaluate_models(db, [settings.policy, after_model], eval_settings, project,
                                               run_ids={after_model: ppo.id}, reuse=[settings.policy, after_model],
                                               log=lambda line: log(f"   {line}"))
    hub.write_model_cards(db, [before.model, after.model])  # a model evaluated here gains a row in its card
    queries = [row["prompt"] for row in after.samples]
    scorer = RewardScorer(models.resolve(db, rm_model))
    answers_before, answers_after = [row["answer"] for row in before.samples], [row["answer"] for row in after.samples]
    r_before, r_after = scorer.score(queries, answers_before), scorer.score(queries, answers_after)
    v_before, v_after = [row["reward"] for row in before.samples], [row["reward"] for row in after.samples]
    timings["evaluate"] = time.monotonic() - t
    rows = [dict(query=q if isinstance(q, str) else q[-1]["content"], before=b, after=a, reward_before=rb,
                 reward_after=ra, vader_before=vb, vader_after=va)
            for q, b, a, rb, ra, vb, va in zip(queries, answers_before, answers_after, r_before, r_after, v_before,
                                                v_after)]
    log(f"6. held-out comparison ({len(heldout)} prompts x {eval_settings.samples} answers): "
        f"{evaluation.format_metrics(before.metrics)} -> {evaluation.format_metrics(after.metrics)}")
    return DemoReport(rows, timings, rm.id, ppo.id, rm_metrics, [before, after], eval_settings.samples)


def launch_demo_process(db_path: str, out_dir: str = "runs/demo", extra_args: list[str] | None = None) -> int:
    """Start `rlhf-studio demo` as its own process (the Train tab's button) in the `demo` project; returns its
    pid. Its log is <out_dir>/demo.log; the reward-model and PPO runs it queues show up in the runs table as usual."""
    # The demo process checks again under its lock; asking first gives the button a clear error instead of
    # a second process that fails in the log.
    if demo_running(db_path):
        raise _already_running(db_path)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    log = open(Path(out_dir) / "demo.log", "ab")
    command = [sys.executable, "-m", "labeler", "demo", "--db", db_path, "--out-dir", out_dir, *(extra_args or [])]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
           "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                               start_new_session=True)
    log.close()
    threading.Thread(target=process.wait, daemon=True).start()
    return process.pid


__all__ = ["DEMO_PROJECT", "DemoReport", "DemoSettings", "demo_lock", "demo_running", "launch_demo_process",
           "run_demo", "simulate_annotator"]
