"""Evaluating policies on prompts they never trained on: `rlhf-studio eval`, the automatic evaluation of every
finished policy run, the Train tab's before/after table and the demo's.

The numbers come from rlhf.evaluation.evaluate_policy (mean score, share above a threshold, KL to the base in
nats per answer, answer length in tokens, distinct-2) and rlhf.evaluation.win_rate (the model's answers against
its base's on the same prompts, by the measure); this module picks the prompts, the measure (the project's,
labeler/services/evals/measures.py) and the KL reference from the database, loads the models and stores every result
in the `evaluations` table.

    settings = EvalSettings(prompts="heldout", samples=4)  # the project's measure and answer length
    results = evaluate_models(db, ["default", "ppo-run3"], settings)
    print(format_report(results))

One model is held in memory at a time (a tuned model, then its base for KL), and a base's answers are sampled
once per project, base and sampling settings and scored again under a new measure. The verdict (`verdict_sentence`,
`run_verdict`) says in one sentence whether the model is better, worse or not yet distinguishable from its base,
from its win rate's interval (every answer against every answer to the same prompt, rlhf/stats.py); a run whose
evaluation failed stores why and what to do (`evaluation_failure`).

The KL reference of a model is its registered base (the `base_model` of its models row), 'default' for a
registered policy without one; a folder inside a run's output (a checkpoint, the final model) is measured
against that run's base; a base model is its own reference (KL 0). Two evaluations are comparable when
their `settings` (prompts and their hash, reward, samples, tokens, threshold, seed, bf16) are equal: a run's
"before" is the base's evaluation with the run's "after" settings (`run_comparison`).
"""
from __future__ import annotations

import gc
import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd
import sqlite_utils

from labeler.services.serving import inference, models
from labeler.services.evals import measures, people_eval
from labeler.services.settings import reward_spec, training_stages
from labeler.services.execution import run_metrics, runs
from labeler.services.serving.models import model_name_at
from labeler.services.serving.models import resolve as resolve_model
from labeler.services.data.prompts import parse_prompt, split_prompts
from labeler.services.data.readers import read_records
from labeler.errors import InputError
from labeler.services.data.projects import get_project
from labeler.services.settings.job_settings import load_job_config
from rlhf.loading import SHORT_NAMES
from rlhf.rewards import BUILTIN_FUNCTIONS
from rlhf.stats import all_pairs_share, clustered_interval, effective_trials, verdict_word
from storage import write_transaction

HELDOUT = "heldout"
# Policy stages whose finished model is evaluated automatically (a reward model writes no answers).
POLICY_STAGES = training_stages.names(answers=True)
POLICY_KINDS = ("base", "policy", "adapter")
METRIC_LABELS = {"eval/reward_mean": "mean score", "eval/positive_share": "positive share",
                 "eval/win_rate": "win rate vs base", "eval/kl": "KL to base", "eval/length_mean": "answer length",
                 "eval/truncated_share": "cut at the limit", "eval/distinct_2": "distinct-2"}
INTERVAL_LABEL = "win rate 95% interval"
# The share of answers that filled the whole answer length, past which a run's summary says its answers are cut.
TRUNCATED_WARNING = 0.5
RewardFunction = Callable[[Sequence[Any], Sequence[str]], Sequence[float]]


def _check(condition: bool, name: str, value, why: str) -> None:
    if not condition:
        raise InputError(f"{name}={value!r}: {why}", field=name)


@dataclass(frozen=True)
class EvalSettings:
    prompts: str = field(default=HELDOUT, metadata={
        "help": "'heldout' (the project's prompts in split 'test') or a prompt file (CSV, JSONL, .txt, ...)."})
    reward: str = field(default="", metadata={
        "help": "The measure: blank for the project's (projects set --measure; else people's blind comparisons once "
                "someone has labelled the project; else its newest reward model), "
                "'vader' (VADER compound of the answer alone), 'vader-with-prompt', 'rm:NAME' (a registered "
                "reward model) or module:function taking (prompts, answers)."})
    samples: int = field(default=4, metadata={"help": "Answers sampled per prompt."})
    max_new_tokens: int | None = field(default=None, metadata={
        "help": "Tokens per answer (blank: the project's answer length)."})
    threshold: float = field(default=0.5, metadata={"help": "An answer counts as positive when its reward is above this."})
    seed: int = field(default=0, metadata={"help": "Sampling seed (the same seed gives the same answers)."})
    bf16: bool = field(default=False, metadata={"help": "Generate under bf16 autocast (KL is computed in float32)."})
    batch_size: int = field(default=32, metadata={"help": "Answers generated and scored together."})

    def __post_init__(self):
        _check(self.samples >= 1, "samples", self.samples, "must be at least 1")
        _check(self.max_new_tokens is None or self.max_new_tokens >= 1, "max_new_tokens", self.max_new_tokens,
               "must be at least 1")
        _check(self.batch_size >= 1, "batch_size", self.batch_size, "must be at least 1")
        _check(math.isfinite(self.threshold), "threshold", self.threshold, "must be a finite number")


@dataclass
class Evaluation:
    id: int
    model: str
    kl_base: str | None
    run_id: int | None
    settings: dict
    metrics: dict[str, float]
    samples: list[dict]  # prompt, answer, reward, kl, length: every sampled answer
    created_at: str


# ---- inputs: prompts, reward, models ----------------------------------------------------------------------

def heldout_prompts(db: sqlite_utils.Database, project: str = "default") -> list[str | list[dict]]:
    """The project's held-out prompts (split 'test'), oldest first: text, or the conversation for chat prompts."""
    return split_prompts(db, get_project(db, project).id, "test")


def load_prompts(db: sqlite_utils.Database, spec: str, project: str = "default") -> list[str | list[dict]]:
    """'heldout' -> the project's split 'test'; anything else is a prompt file read as `prompts import` reads it."""
    if spec == HELDOUT:
        prompts = heldout_prompts(db, project)
        if not prompts:
            raise InputError(f"project '{project}' has no held-out prompts (split 'test'): import the shipped set "
                             "(`rlhf-studio prompts import-shipped`) or pass --prompts FILE", field="prompts")
        return prompts

    records = [parse_prompt(where, record) for where, record in read_records(spec, txt_field="prompt")]
    if not records:
        raise InputError("no prompts found", file=str(spec))
    return [r.messages if r.messages is not None else r.text for r in records]


def _prompts_hash(prompts: Sequence[str | list[dict]]) -> str:
    canonical = json.dumps(list(prompts), ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def resolve_settings(db: sqlite_utils.Database, settings: EvalSettings, project: str) -> EvalSettings:
    """`settings` with the project's measure and answer length where they are blank (stored so, since "the
    project's" changes)."""
    current = get_project(db, project)
    return replace(settings, reward=settings.reward or measures.resolve_measure(db, project),
                   max_new_tokens=settings.max_new_tokens or current.answer_tokens)


def reward_function(db: sqlite_utils.Database, spec: str) -> RewardFunction | None:
    """The reward a spec names (labeler/services/settings/reward_spec.py's grammar, as training's `reward=` takes it):
    'vader' (the answer alone, so the prompt's own words do not count), 'vader-with-prompt', 'rm:NAME' or
    'module:function'; None for no measure ('') or people's (measures.PEOPLE). People's rewards (human, mix)
    exist only in a run, and an evaluation names its reward model (evaluations are compared by their settings,
    and "the newest" changes)."""
    if spec in ("", measures.PEOPLE):  # no measure yet, or people's comparisons: answers are not scored here
        return None
    parsed = reward_spec.parse(spec, field="reward")
    if parsed.source in ("human", "mix"):
        raise InputError(f"reward {parsed.source!r}: people's labels reach only a training run; evaluate with "
                         "rm:NAME, vader, vader-with-prompt or module:function", field="reward")
    if parsed.source == "rm":
        if not parsed.model:
            raise InputError("reward 'rm': name the reward model, e.g. rm:rm-run3 (evaluations are compared by "
                             "their settings)", field="reward")
        return _reward_model(db, parsed.model)
    if parsed.function in reward_spec.BUILTIN_FUNCTIONS:  # 'vader' is rlhf.evaluation.answer_vader
        return BUILTIN_FUNCTIONS[parsed.function]
    return reward_spec.import_function(parsed.function, "reward", "reward")


def _reward_model(db: sqlite_utils.Database, name: str) -> RewardFunction:
    registered = _registered(db, name)
    if registered is not None and registered["kind"] != "reward":
        raise InputError(f"{name!r} is a {registered['kind']} model, not a reward model", field="reward")
    try:
        path = resolve_model(db, name)
    except InputError as error:
        raise InputError(f"reward model {name!r}: {error.message}", field="reward") from None
    if registered is None and not Path(path).is_dir():
        names = ", ".join(m["name"] for m in models.list_models(db, kind="reward")) or "none registered"
        raise InputError(f"no reward model named {name!r} (reward models: {names})", field="reward")
    return inference.load_reward(path).score


def _registered(db: sqlite_utils.Database, name: str) -> dict | None:

    try:
        return models.get_model(db, name)
    except InputError:
        return None


def kl_base(db: sqlite_utils.Database, name: str) -> str:
    """The model KL is measured against: the registered base of a trained model ('default' when a registered
    policy has none); a folder is a registered model's (by its path) or lies in a run's output folder (a
    checkpoint, the final model), and then takes that run's base. A base model, or a folder of neither, is its
    own reference."""
    registered = _registered(db, name)
    if registered is None:
        return _folder_base(db, name) or name
    if registered["kind"] == "base":
        return name
    return registered["base_model"] or "default"


def _folder_base(db: sqlite_utils.Database, name: str) -> str | None:
    """The base of the model in folder `name`: the registered model with that path, else the run whose output
    folder holds it (a checkpoint-<step> written during a run has no models row of its own: without this its
    KL was measured against itself, 0). None when the folder is neither's."""
    folder = Path(name).expanduser()
    if not folder.is_dir():
        return None
    folder = folder.resolve()
    registered = model_name_at(db, str(folder))
    if registered is not None:
        return kl_base(db, registered)
    run = runs.run_of_folder(db, folder)
    return load_job_config(run.config).base_model(run.stage) if run else None


def _load_policy(db: sqlite_utils.Database, name: str):
    """(model, tokenizer) in eval mode; a LoRA adapter is merged into its base (plain transformers model, faster
    sampling). An unknown name or a folder without weights is an InputError naming the model."""
    registered = _registered(db, name)
    if registered is not None and registered["kind"] == "reward":
        raise InputError(f"{name!r} is a reward model; evaluate a policy (models list shows the kinds)", field="model")
    if registered is None and name not in SHORT_NAMES and not Path(name).expanduser().is_dir():
        raise InputError(f"no model named {name!r}: a registry name (`rlhf-studio models list`), 'default' or a "
                         "model folder", field="model")
    path = resolve_model(db, name)
    try:
        # The one inference loader (inference.load_policy): the model's precision, its device, an adapter merged.
        return inference.load_policy(path)
    except (OSError, ValueError) as error:
        raise InputError(f"model {name!r} ({path}) does not load: {str(error).splitlines()[0]}", field="model") from None


# ---- evaluate and store -----------------------------------------------------------------------------------

def _settings_record(settings: EvalSettings, prompts: Sequence[str | list[dict]], prompt_format: str) -> dict:
    record = asdict(settings)
    record.pop("batch_size")  # changes speed, not the answers' distribution
    record["prompt_format"] = prompt_format
    record["prompts_n"] = len(prompts)
    record["prompts_hash"] = _prompts_hash(prompts)
    return record


def _store(db: sqlite_utils.Database, project: str, model: str, base: str | None, run_id: int | None,
           settings: dict, metrics: dict, rows: list[dict]) -> Evaluation:
    project_id = get_project(db, project).id
    with write_transaction(db):
        cursor = db.execute(
            "INSERT INTO evaluations (project_id, model, kl_base, run_id, settings_json, metrics_json, samples_json)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [project_id, model, base, run_id, json.dumps(settings, sort_keys=True), json.dumps(metrics, sort_keys=True),
             json.dumps(rows, ensure_ascii=False)],
        )
    return get_evaluation(db, cursor.lastrowid)  # its caller refreshes the model card (hub.write_model_cards)


def _row_to_evaluation(row) -> Evaluation:
    return Evaluation(id=row["id"], model=row["model"], kl_base=row["kl_base"], run_id=row["run_id"],
                      settings=json.loads(row["settings_json"]), metrics=json.loads(row["metrics_json"]),
                      samples=json.loads(row["samples_json"]), created_at=row["created_at"])


def get_evaluation(db: sqlite_utils.Database, evaluation_id: int) -> Evaluation:
    row = db.execute("SELECT * FROM evaluations WHERE id = ?", [int(evaluation_id)]).fetchone()
    if row is None:
        raise InputError(f"no evaluation with id {evaluation_id}", field="evaluation")
    return _row_to_evaluation(row)


def list_evaluations(db: sqlite_utils.Database, model: str | None = None, run_id: int | None = None,
                     limit: int = 50) -> list[Evaluation]:
    """Stored evaluations, newest first; `model` and `run_id` filter."""
    where, params = [], []
    if model is not None:
        where.append("model = ?")
        params.append(model)
    if run_id is not None:
        where.append("run_id = ?")
        params.append(int(run_id))
    sql = "SELECT * FROM evaluations" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id DESC LIMIT ?"
    return [_row_to_evaluation(row) for row in db.execute(sql, [*params, int(limit)]).fetchall()]


def _find(db: sqlite_utils.Database, model: str, settings: dict) -> Evaluation | None:
    row = db.execute("SELECT * FROM evaluations WHERE model = ? AND settings_json = ? ORDER BY id DESC LIMIT 1",
                     [model, json.dumps(settings, sort_keys=True)]).fetchone()
    return _row_to_evaluation(row) if row else None


def evaluate_models(
    db: sqlite_utils.Database,
    names: Sequence[str],
    settings: EvalSettings = EvalSettings(),
    project: str = "default",
    run_ids: dict[str, int] | None = None,
    reuse: Sequence[str] = (),
    log: Callable[[str], None] = lambda line: None,
    with_bases: bool = False,
) -> list[Evaluation]:
    """Evaluate each model on the same prompts with the same measure and seed, against its own KL reference,
    and store each result. Inputs are all checked (prompts, measure, every model name) before any model is
    loaded. A model named in `reuse` with a stored evaluation of equal settings is not evaluated again (a base
    model's weights never change). A model whose base was evaluated with the same settings (in this call or
    before) gets its win rate against the base (eval/win_rate, eval/win_low, eval/win_high); `with_bases`
    evaluates each model's base first where it is not named (reused when stored).

    One model is in memory at a time: a model is loaded alone, answers and takes its own log-probabilities of its
    answers, and is released before its base is loaded for theirs (KL). A reused model with a stored evaluation of
    the same sampling settings under another measure (a newer reward model) is not loaded at all: its stored
    answers are scored by the new measure (`rescored`)."""
    if not names:
        raise InputError("name at least one model to evaluate", field="model")
    from rlhf.evaluation import evaluate_policy, response_logprob_sums  # these two import torch
    from rlhf.generation import build_prompt_ids

    settings = resolve_settings(db, settings, project)
    prompts = load_prompts(db, settings.prompts, project)
    reward = reward_function(db, settings.reward)
    # Prompts are rendered in the project's format, as generation and PPO rollouts render them.
    project_row = get_project(db, project)
    chat_template = project_row.chat_template
    record = _settings_record(settings, prompts, project_row.prompt_format)
    for name in names:
        registered = _registered(db, name)
        if registered is not None and registered["kind"] not in POLICY_KINDS:
            raise InputError(f"{name!r} is a {registered['kind']} model; evaluate a policy", field="model")
    if with_bases:
        names, reuse = _with_bases(db, names, reuse)
    run_ids = dict(run_ids or {})

    def build_query(tokenizer):
        return lambda prompt: build_prompt_ids(tokenizer, prompt, use_chat_template=chat_template)

    results = []
    for name in names:
        stored = _find(db, name, record) if name in reuse else None
        if stored is not None:
            log(f"{name}: reusing evaluation #{stored.id}")
            results.append(stored)
            continue
        base = kl_base(db, name)
        answered = _answered(db, name, record) if name in reuse and base == name else None
        if answered is not None:  # the same answers, stored under another measure: scored again, nothing loaded
            log(f"{name}: scoring the answers of evaluation #{answered.id} by {measures.describe(settings.reward)}")
            metrics, rows = rescored(answered, reward, settings.threshold)
        else:
            # 1. the model alone: its answers, their scores, and its own log-probabilities of them
            log(f"loading {name}")
            model, tokenizer = _load_policy(db, name)
            log(f"evaluating {name} on {len(prompts)} prompts x {settings.samples} samples"
                + (f" (KL to {base})" if base != name else ""))
            result = evaluate_policy(model, tokenizer, prompts, reward, ref_model=None, samples=settings.samples,
                                     max_new_tokens=settings.max_new_tokens, threshold=settings.threshold,
                                     seed=settings.seed, batch_size=settings.batch_size, bf16=settings.bf16,
                                     build_query=build_query(tokenizer))
            metrics, rows = result.metrics(), result.rows
            if base == name:
                # A model is its own reference: KL(p || p) = 0 exactly, no second forward pass needed.
                metrics["eval/kl"] = 0.0
                rows = [{**row, "kl": 0.0} for row in rows]
            else:
                # 2. KL to the base: its log-probabilities of the same answers, with the model unloaded first, so
                # one model is in memory at a time (a tuned 8B model and its base in fp32 are ~60 GiB together).
                queries = [build_query(tokenizer)(row["prompt"]) for row in rows]
                pad_id, vocabulary = _pad_id(model, tokenizer), model.get_input_embeddings().weight.shape[0]
                own = response_logprob_sums(model, queries, result.responses, pad_id, settings.batch_size)
                model = None  # the last reference: released before the base is loaded
                free_memory()
                theirs = _reference_logprobs(db, base, vocabulary, queries, result.responses, pad_id,
                                             settings.batch_size, log)
                kls = (own - theirs).tolist()
                metrics["eval/kl"] = sum(kls) / len(kls)
                rows = [{**row, "kl": kl} for row, kl in zip(rows, kls)]
            model = None  # released before the next model loads
            free_memory()
            metrics["eval/prompts"] = float(result.prompts)
            metrics["eval/samples"] = float(result.samples)
            metrics["eval/truncated_share"] = truncated_share(rows)
        base_evaluation = _find(db, base, record) if base != name else None
        if base_evaluation is not None and reward is not None:
            metrics.update(win_metrics(rows, base_evaluation.samples, settings.samples))
        run_id = run_ids.get(name, registered_run(db, name))
        results.append(_store(db, project, name, base, run_id, record, metrics, rows))
    return results


def _pad_id(model, tokenizer) -> int:
    from rlhf.generation import eos_token_ids

    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_token_ids(model, tokenizer)[0]


def _reference_logprobs(db: sqlite_utils.Database, base: str, vocabulary: int, queries: list, responses: list,
                        pad_id: int, batch_size: int, log: Callable[[str], None]):
    """The base's summed log-probabilities of the model's answers (float32, shape (N,)), the base loaded alone and
    released before returning."""
    from rlhf.evaluation import response_logprob_sums

    log(f"loading {base} (KL reference)")
    reference, _ = _load_policy(db, base)
    try:
        if reference.get_input_embeddings().weight.shape[0] != vocabulary:
            raise InputError(f"the model and its base {base!r} have different vocabularies: no KL between them",
                             field="model")
        return response_logprob_sums(reference, queries, responses, pad_id, batch_size)
    finally:
        reference = None
        free_memory()


def free_memory() -> None:
    """Return a released model's memory: Python's cycles collected, the GPU's cached blocks given back."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _answered(db: sqlite_utils.Database, model: str, settings: dict) -> Evaluation | None:
    """The newest evaluation of `model` whose answers these settings would sample again: equal settings but for
    the measure and the threshold (which score answers, not sample them); None when it has none."""
    def sampling(record: dict) -> dict:
        return {k: v for k, v in record.items() if k not in ("reward", "threshold")}

    wanted = sampling(settings)
    for row in db.execute("SELECT * FROM evaluations WHERE model = ? ORDER BY id DESC", [model]).fetchall():
        found = _row_to_evaluation(row)
        if sampling(found.settings) == wanted and found.samples:
            return found
    return None


def rescored(evaluation: Evaluation, reward: RewardFunction | None, threshold: float) -> tuple[dict, list[dict]]:
    """(metrics, rows) of an evaluation's stored answers scored by another measure: the answers' own figures
    (length, distinct-2, KL, cut share) kept, the scores and what follows from them measured again."""
    rows = [dict(row) for row in evaluation.samples]
    metrics = {k: v for k, v in evaluation.metrics.items()
               if k not in ("eval/reward_mean", "eval/positive_share") and not k.startswith("eval/win_")}
    if reward is None:
        for row in rows:
            row["reward"] = None
        return metrics, rows
    scores = [float(score) for score in reward([row["prompt"] for row in rows], [row["answer"] for row in rows])]
    if len(scores) != len(rows):
        raise InputError(f"the measure gave {len(scores)} scores for {len(rows)} answers", field="reward")
    for row, score in zip(rows, scores):
        row["reward"] = score
    metrics["eval/reward_mean"] = sum(scores) / len(scores)
    metrics["eval/positive_share"] = sum(score > threshold for score in scores) / len(scores)
    return metrics, rows


def _with_bases(db: sqlite_utils.Database, names: Sequence[str], reuse: Sequence[str]) -> tuple[list[str], list[str]]:
    """`names` with each model's KL base before it (where not named already), the added bases reused."""
    ordered, reused = [], list(reuse)
    for name in names:
        base = kl_base(db, name)
        if base != name and base not in ordered and base not in names:
            ordered.append(base)
            reused.append(base)
        if name not in ordered:
            ordered.append(name)
    return ordered, reused


def truncated_share(rows: Sequence[dict]) -> float:
    """Share of answers cut at the answer length (rlhf.evaluation's `cut`: no EOS within it, most likely cut
    mid-sentence). An answer that ends with EOS at the limit finished: counted by length, a project fitted so that
    its answers end near the limit was told that many of them were cut."""
    return sum(bool(row["cut"]) for row in rows) / len(rows) if rows else 0.0


def win_metrics(rows: Sequence[dict], base_rows: Sequence[dict], samples: int) -> dict[str, float]:
    """eval/win_rate, eval/win_low, eval/win_high, eval/win_ties, eval/win_pairs and eval/win_trials of a model's
    scored answers against its base's, rows grouped by prompt (`samples` a prompt) in the same prompt order.

    Every answer of the model is compared with every answer of its base to the same prompt (k*k pairs a prompt
    where answer i against answer i gave k: rlhf.stats.all_pairs_share); the rate is the mean of the prompts' win
    shares, and its 95% interval Wilson's at the number of independent trials those shares are worth
    (rlhf.stats.effective_trials: about the prompts when a prompt's answers all win or all lose, up to every pair
    when they differ): as narrow as the data allows without counting alike answers as independent."""
    if len(rows) != len(base_rows) or not rows or any(r["reward"] is None for r in [*rows, *base_rows]):
        return {}
    shares, wins, ties, pairs = [], 0, 0, 0
    for first in range(0, len(rows), samples):
        model = [r["reward"] for r in rows[first:first + samples]]
        base = [r["reward"] for r in base_rows[first:first + samples]]
        shares.append(all_pairs_share(model, base))
        wins += sum(a > b for a in model for b in base)
        ties += sum(a == b for a in model for b in base)
        pairs += len(model) * len(base)
    low, high = clustered_interval(shares, pairs)
    return {"eval/win_rate": sum(shares) / len(shares), "eval/win_low": low, "eval/win_high": high,
            "eval/win_ties": float(ties), "eval/win_pairs": float(pairs),
            "eval/win_trials": effective_trials(shares, pairs)}


def verdict_sentence(rate: float, low: float, high: float) -> str:
    """One sentence on whether the tuned model is better, worse or not yet distinguishable from its base: decided
    by whether the win rate's 95% interval lies wholly above 50%, below it, or around it."""
    interval = f"it won {rate:.0%} of the comparisons, 95% interval {low:.0%} to {high:.0%}"
    word = verdict_word(low, high)
    if word == "better":
        return f"The tuned model is better than its base ({interval})."
    if word == "worse":
        return f"The tuned model is worse than its base ({interval})."
    return (f"The tuned model is not yet distinguishable from its base ({interval}, which includes 50%): more "
            "held-out prompts, or more answers per prompt (eval_samples), would narrow the interval.")


def evaluation_verdict(evaluation: Evaluation) -> str:
    """verdict_sentence of an evaluation with a win rate against its base, else ''."""
    m = evaluation.metrics
    if "eval/win_rate" not in m or "eval/win_low" not in m:
        return ""
    return verdict_sentence(m["eval/win_rate"], m["eval/win_low"], m["eval/win_high"])


def registered_run(db: sqlite_utils.Database, name: str) -> int | None:
    registered = _registered(db, name)
    return registered["run_id"] if registered else None


# ---- runs -----------------------------------------------------------------------------------------------

def run_function(job) -> str:
    """The function a run was rewarded by ('' when its reward is not a function): the measures' last default."""
    return job.reward_function if job.reward == "function" else ""


def auto_measure(db: sqlite_utils.Database, project: str, job) -> measures.Resolved:
    """The measure a finished run is judged by, and why (measures.resolve, given the run's function reward)."""
    return measures.resolve(db, project, run_function=run_function(job))


def auto_settings(db: sqlite_utils.Database, project: str, job) -> EvalSettings:
    """What a finished run is evaluated with: the project's measure as measures.resolve decides it, given the run's
    own reward when it is a function (the last default: a function-rewarded run on a project with no other judge
    is still scored); the answer length it was trained with; its seed and precision."""
    return EvalSettings(prompts=HELDOUT, reward=auto_measure(db, project, job).spec, samples=job.eval_samples,
                        max_new_tokens=job.max_new_tokens, seed=job.seed, bf16=job.bf16)


def base_answers_stored(db: sqlite_utils.Database, project: str, job, base: str) -> bool:
    """Whether a finished run's automatic evaluation (auto_settings) would reuse a stored evaluation of its base,
    or the base's stored answers under another measure, so that only the tuned model answers: what a run's time
    estimate counts."""
    settings = resolve_settings(db, auto_settings(db, project, job), project)
    prompts = load_prompts(db, settings.prompts, project)
    record = _settings_record(settings, prompts, get_project(db, project).prompt_format)
    return _find(db, base, record) is not None or _answered(db, base, record) is not None


def curve_settings(db: sqlite_utils.Database, project: str, job) -> EvalSettings:
    """auto_settings for scoring a run's answers while it trains: people judge only the finished model, so their
    place is taken by the judge that needs nobody (measures.scorer)."""
    return replace(auto_settings(db, project, job), reward=measures.scorer(db, project, run_function(job)).spec)


def evaluate_finished_run(db: sqlite_utils.Database, run_id: int, stage: str, project: str, job, model: dict,
                          sink=None, log: Callable[[str], None] = print) -> Evaluation | None:
    """The automatic evaluation after a policy run registered `model` (its models row): the model and its base
    on the project's held-out prompts, both stored; the model's metrics go to the run as eval/... at its last
    step. None when skipped (not a policy stage, eval_samples=0, or no held-out prompts). When it fails (out of
    memory, a measure that does not load, anything) the reason and what to do are stored with the run
    (`evaluation_failure`) for its page and `runs show`, and the error is raised again."""
    try:
        after = _evaluate_finished_run(db, run_id, stage, project, job, model, sink, log)
    except Exception as error:
        record_failure(db, run_id, model["name"], error)
        raise
    clear_failure(db, run_id)
    return after


def _evaluate_finished_run(db, run_id, stage, project, job, model, sink, log) -> Evaluation | None:
    if stage not in POLICY_STAGES or model["kind"] not in POLICY_KINDS:
        return None
    if job.eval_samples <= 0:
        log("evaluation: off (eval_samples=0)")
        return None
    if not heldout_prompts(db, project):
        log(f"evaluation: skipped, {NO_HELDOUT.format(project=project)}")
        return None
    settings = auto_settings(db, project, job)
    log(f"evaluation: judged by {auto_measure(db, project, job).words}")
    base = kl_base(db, model["name"])
    names = [base, model["name"]] if base != model["name"] else [model["name"]]
    results = evaluate_models(db, names, settings, project, run_ids={model["name"]: run_id}, reuse=[base], log=log)
    after = results[-1]
    if sink is not None:
        step = runs.get_run(db, run_id).step
        sink.log(step, after.metrics)
    log(f"evaluation ({measures.describe(after.settings['reward'])}): " + format_metrics(after.metrics))
    # People judge blind when they are the measure, and when the measure is the reward model the run optimised
    # (an optimistic judge): their verdict then replaces the reward model's on the run's page once they rank.
    optimistic = bool(run_judge_note(db, run_id, after))
    if (after.settings["reward"] == measures.PEOPLE or optimistic) and len(results) == 2:
        queued = people_eval.queue_comparisons(db, project, run_id, base, model["name"], results[0].samples,
                                               after.samples, after.settings["samples"])
        log(f"evaluation: {queued} blind comparisons of the base's and the model's answers queued for people (Rank)"
            + (": the measure is the reward model this run optimised" if optimistic else ""))
    if answers_were_cut(after):
        log(truncation_warning(after))
    return after


@dataclass(frozen=True)
class EvaluationFailure:
    model: str
    reason: str  # the error in one line
    advice: str  # what to do about it


def failure_advice(model: str, error: BaseException) -> tuple[str, str]:
    """(reason, advice) of a failed evaluation: out of memory (CUDA's or the host's) says to evaluate later with
    the GPU free, one model at a time as `eval` loads them; a person's mistake (InputError) says what it names;
    anything else names the error. Each ends with the command that retries."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    reason = f"{type(error).__name__}: {text}" if text else type(error).__name__
    retry = f"`rlhf-studio eval --model {model}`"
    if isinstance(error, MemoryError) or "out of memory" in text.lower():
        return (f"out of memory ({reason})", f"evaluate it when nothing else holds the device (no run training, no "
                f"chat model loaded): {retry} loads one model at a time; --batch-size 8 needs less")
    if isinstance(error, InputError):
        return error.message, f"fix what it names, then {retry}"
    return reason, f"the model is trained and registered: {retry} retries (its log has the traceback)"


def record_failure(db: sqlite_utils.Database, run_id: int, model: str, error: BaseException) -> EvaluationFailure:
    """Store why the run's evaluation failed (one row a run; a later failure replaces it)."""
    reason, advice = failure_advice(model, error)
    with write_transaction(db):
        db.execute("INSERT OR REPLACE INTO evaluation_errors (run_id, model, reason, advice) VALUES (?, ?, ?, ?)",
                   [int(run_id), model, reason, advice])
    return EvaluationFailure(model, reason, advice)


def clear_failure(db: sqlite_utils.Database, run_id: int) -> None:
    with write_transaction(db):
        db.execute("DELETE FROM evaluation_errors WHERE run_id = ?", [int(run_id)])


def evaluation_failure(db: sqlite_utils.Database, run_id: int) -> EvaluationFailure | None:
    """Why the run's automatic evaluation failed, or None."""
    row = db.execute("SELECT model, reason, advice FROM evaluation_errors WHERE run_id = ?", [int(run_id)]).fetchone()
    return EvaluationFailure(row["model"], row["reason"], row["advice"]) if row else None


def failure_line(failure: EvaluationFailure) -> str:
    return f"No held-out evaluation: it failed ({failure.reason}). To do: {failure.advice}."


def run_verdict(db: sqlite_utils.Database, run_id: int) -> tuple[str, list[str]]:
    """(the verdict, warnings) of a run, as its page, `runs show` and `eval` say them: the one sentence on whether
    its model is better, worse or not yet distinguishable from its base (people's blind pairs when they are the
    measure), or why there is none; the warnings: an optimistic judge (the reward model it was trained on), answers
    cut at the answer length."""
    before, after = run_comparison(db, run_id)
    if after is None:
        failure = evaluation_failure(db, run_id)
        return (failure_line(failure) if failure else ""), []
    note = run_judge_note(db, run_id, after)
    people = (people_eval.people_win_rate(db, run_id, after.model)
              if after.settings.get("reward") == measures.PEOPLE or note else None)
    if after.settings.get("reward") == measures.PEOPLE:
        sentence = (verdict_sentence(people.rate, people.low, people.high) + " (people's blind comparisons)"
                    if people else people_waiting(db, run_id, after.model))
    elif people is not None:  # the reward model it optimised is an optimistic judge: people's blind pairs decide
        sentence = (verdict_sentence(people.rate, people.low, people.high) + " (people's blind comparisons; by the "
                    "reward model it was trained on: " + _short_interval(after.metrics) + ")")
        note = ""
    elif "eval/win_rate" in after.metrics:
        sentence = evaluation_verdict(after)
    elif before is None:
        sentence = "No verdict: the base's evaluation with the same settings is missing (`rlhf-studio eval` redoes both)."
    else:
        sentence = f"No verdict: {measures.describe(after.settings.get('reward', ''))} scores no answers."
    warnings = [note] if note else []
    if answers_were_cut(after):
        warnings.append(truncation_warning(after))
    return sentence, warnings


def people_waiting(db: sqlite_utils.Database, run_id: int, model: str) -> str:
    """The verdict of a run people judge before anyone ranked its blind pairs: how many wait, or why there are none."""
    pairs = db.execute("SELECT COUNT(DISTINCT prompt_id) FROM responses WHERE run_id = ? AND source = ?",
                       [int(run_id), people_eval.EVALUATION_SOURCE]).fetchone()[0]
    if pairs:
        return (f"Not yet judged: {pairs} blind {'pair waits' if pairs == 1 else 'pairs wait'} in the Rank tab for "
                "people to rank (people's blind comparisons are the measure).")
    return ("No verdict: people's blind comparisons are the measure, but no blind pair of this run was queued (its "
            "base's held-out answers were all shown in earlier pairs, or it was compared with no base): set another "
            f"measure (projects set --measure) and run `rlhf-studio eval --model {model}`.")


def _short_interval(metrics: dict) -> str:
    if "eval/win_low" not in metrics:
        return "no win rate"
    return f"{metrics['eval/win_rate']:.0%}, 95% interval {metrics['eval/win_low']:.0%} to {metrics['eval/win_high']:.0%}"


def verdict_lines(db: sqlite_utils.Database, results: Sequence[Evaluation]) -> list[str]:
    """`eval`'s verdicts: for each model compared with its base, the sentence of its page (evaluation_verdict) and,
    when the measure is the reward model its run was trained on, the note that says the judge is optimistic."""
    lines = []
    for result in results:
        sentence = evaluation_verdict(result)
        if result.settings.get("reward") == measures.PEOPLE and result.kl_base not in (None, result.model):
            # People judge only a run's blind pairs (queued when it finished): say where they stand, or why none.
            sentence = (run_verdict(db, result.run_id)[0] if result.run_id is not None else
                        "No verdict: people's blind comparisons are the measure, and they judge a finished run's "
                        "pairs only: pass --measure rm:NAME, vader or module:function to score these answers.")
        if not sentence:
            continue
        lines.append(f"{result.model}: {sentence}")
        note = run_judge_note(db, result.run_id, result) if result.run_id is not None else ""
        if note:
            lines.append(f"{result.model}: note: {note}")
    return lines


NO_HELDOUT = ("project '{project}' has no held-out prompts (split 'test'): import prompts with a held-out share "
              "(prompts import --heldout-share, or --split test for a file of evaluation prompts)")


def answers_were_cut(evaluation: Evaluation) -> bool:
    """Whether most answers filled the answer length, where that cuts them: a continuation (prompt format
    'continue', the shipped task's review openings) is meant to run to the limit, so it never warns."""
    continuation = evaluation.settings.get("prompt_format") == "continue"
    return not continuation and evaluation.metrics.get("eval/truncated_share", 0) > TRUNCATED_WARNING


def truncation_warning(evaluation: Evaluation) -> str:
    """The warning a run's summary gives when most of its answers filled the answer length."""
    share = evaluation.metrics.get("eval/truncated_share", 0)
    return (f"{share:.0%} of the answers were cut at the answer length ({evaluation.settings['max_new_tokens']} "
            "tokens): raise it (projects set --answer-tokens, or --set max_new_tokens=...)")


def run_judge_note(db: sqlite_utils.Database, run_id: int, evaluation: Evaluation) -> str:
    """measures.OPTIMISTIC when the evaluation's measure is the reward model the run optimised, else ''."""
    run = runs.find_run(db, run_id)
    if run is None:
        return ""
    job = load_job_config(run.config)
    project_id = get_project(db, run.project).id
    newest = models.newest_of_project(db, "reward", project_id, before=run.created_at) if not job.reward_model else None
    return measures.judge_note(evaluation.settings.get("reward", ""), job, newest)


def run_comparison(db: sqlite_utils.Database, run_id: int) -> tuple[Evaluation | None, Evaluation | None]:
    """(before, after) of a run: its model's newest evaluation, and its base's evaluation with equal settings."""
    after = next(iter(list_evaluations(db, run_id=run_id, limit=1)), None)
    if after is None or after.kl_base is None or after.kl_base == after.model:
        return None, after
    return _find(db, after.kl_base, after.settings), after


def reward_curve(db: sqlite_utils.Database, run_id: int, name: str = "env/reward_mean"):
    """A pandas DataFrame (minutes, reward): the run's `name` metric against the wall time it was logged at,
    in minutes since the run started (its first metric when the start is unknown). A resumed run's redone
    steps replace the old rows (MetricsSink.log), so the curve has one point per step."""
    def parse(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    rows = run_metrics.metric_history(db, run_id, name)
    if not rows:
        return pd.DataFrame({"minutes": pd.Series(dtype=float), "reward": pd.Series(dtype=float)})
    run = runs.find_run(db, run_id)
    origin = parse(run.started_at) if run and run.started_at else parse(rows[0][2])
    minutes = [(parse(created_at) - origin).total_seconds() / 60 for _, _, created_at in rows]
    return pd.DataFrame({"minutes": minutes, "reward": [value for _, value, _ in rows]})


def comparison_rows(evaluations: Sequence[Evaluation | None], labels: Sequence[str] | None = None) -> list[dict]:
    """One row per evaluation for a table: model, mean reward, win rate and its 95% interval, positive share, KL,
    length, distinct-2."""
    rows = []
    for i, ev in enumerate(evaluations):
        if ev is None:
            continue
        row = {"": labels[i] if labels else "", "model": ev.model}
        row.update({label: ev.metrics.get(key) for key, label in METRIC_LABELS.items()})
        row[INTERVAL_LABEL] = (f"{ev.metrics['eval/win_low']:.0%} to {ev.metrics['eval/win_high']:.0%}"
                               if "eval/win_low" in ev.metrics else None)
        rows.append(row)
    return rows


# ---- text output ------------------------------------------------------------------------------------------

def format_metrics(metrics: dict[str, float]) -> str:
    parts = []
    for key, label in METRIC_LABELS.items():
        if key in metrics:
            value = metrics[key]
            if key == "eval/win_rate" and "eval/win_low" in metrics:
                parts.append(f"{label} {value:.0%} [{metrics['eval/win_low']:.0%}, {metrics['eval/win_high']:.0%}]")
            elif key in ("eval/positive_share", "eval/win_rate", "eval/truncated_share"):
                parts.append(f"{label} {value:.0%}")
            else:
                parts.append(f"{label} {value:.3f}")
    return ", ".join(parts)


def _cut(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _prompt_text(prompt) -> str:
    return prompt[-1]["content"] if isinstance(prompt, list) else str(prompt)


def _cell(value, spec: str, width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:{width}{spec}}"


def format_report(results: Sequence[Evaluation], examples: int = 3, width: int = 40) -> str:
    """The metrics table (one row per model) and the first `examples` prompts' first answers side by side."""
    if not results:
        return "no evaluations"
    settings = results[0].settings
    lines = [f"{settings['prompts_n']} prompts ({settings['prompts']}) x {settings['samples']} samples, "
             f"{settings['max_new_tokens']} new tokens, measure: {measures.describe(settings['reward'])}, "
             f"positive: score > {settings['threshold']:g}, seed {settings['seed']}", ""]
    name_width = max(10, *(len(r.model) for r in results))
    header = (f"{'model':<{name_width}} | {'score':>7} | {'win rate vs base':>16} | {'positive':>8} | {'KL':>7} | "
              f"{'length':>6} | {'distinct-2':>10} | KL base")
    lines += [header, "-" * len(header)]
    for r in results:
        m = r.metrics
        win = (f"{m['eval/win_rate']:4.0%} [{m['eval/win_low']:.0%}-{m['eval/win_high']:.0%}]"
               if "eval/win_rate" in m else "-")
        base = "(itself)" if r.kl_base == r.model else (r.kl_base or "-")
        lines.append(f"{r.model:<{name_width}} | {_cell(m.get('eval/reward_mean'), '.3f', 7)} | {win:>16} | "
                     f"{_cell(m.get('eval/positive_share'), '.0%', 8)} | {_cell(m.get('eval/kl'), '.3f', 7)} | "
                     f"{m['eval/length_mean']:6.1f} | {m['eval/distinct_2']:10.3f} | {base}")
    cut = [r for r in results if answers_were_cut(r)]
    lines += [f"{r.model}: {truncation_warning(r)}" for r in cut]
    samples_per_prompt = settings["samples"]
    shown = min(examples, settings["prompts_n"])
    if shown:
        lines.append("")
        columns = ["prompt", *[r.model for r in results]]
        lines.append(" | ".join(f"{_cut(c, width):<{width}}" for c in columns))
        lines.append("-" * ((width + 3) * len(columns) - 3))
        for p in range(shown):
            index = p * samples_per_prompt  # the first sample of prompt p (rows are grouped by prompt)
            prompt = _prompt_text(results[0].samples[index]["prompt"])
            cells = [prompt] + [_sample_cell(r.samples[index]) for r in results]
            lines.append(" | ".join(f"{_cut(c, width):<{width}}" for c in cells))
    stored = ", ".join(f"#{r.id}" for r in results)
    lines.append(f"\nstored as evaluation {stored}")
    return "\n".join(lines)


def _sample_cell(sample: dict) -> str:
    score = sample.get("reward")
    return sample["answer"] if score is None else f"[{score:+.2f}] {sample['answer']}"
