"""Online DPO in the app (rlhf.online_dpo.OnlineDPOTrainer): each step the policy answers a batch of the project's
training prompts twice, the run's judge picks the better answer of each pair, and DPO's loss trains on the pairs.

The judge is the trainer setting `judge`, in reward_spec's grammar: `rm` (the newest registered reward model),
`rm:NAME`, `vader`, `vader-with-prompt` or `module:function` (a function (prompts, answers) -> one float per
answer), `people` (each pair to the Rank tab as a blind ranking of two, PeopleJudge) or `mix` (people rank the pairs
the online reward model is least sure of, the model judges the rest and learns from people, MixJudge). A scorer
scores each answer alone and the higher score wins; equal scores tie and the pair is left out. A function that raises
or returns the wrong number of scores stops the run with a JudgeError naming the function and the step.

Every pair judged is recorded as it is judged (JudgementLog -> labeler/services/execution/run_judgements.py): who
decided it (people, the model, nobody), people's verdict and the model's where each gave one, and the Rank item people
saw, so the run's page can say how many pairs people judged, how many the model, and how often the model agreed with
people; a run that fails keeps the judgements of the batches before.

Loads torch when imported (the library's trainer): the stage registry names it as a string and
Stage.run imports it, so the app's import stays light (tests/test_light_imports.py, HEAVY_SERVICES). The app's config,
StudioOnlineDPOConfig, is declared with the stage (training_stages/online_dpo.py).
"""
from __future__ import annotations

import dataclasses
import random

from labeler.services.serving import models
from labeler.errors import InputError
from labeler.services.labels.human_reward import HumanRewardQueue
from labeler.services.execution.run_judgements import Judgement, record_judgements, require_annotators
from labeler.services.data.projects import get_project
from labeler.services.training.runners.common import (active_mix, peft_config, stage_rows, train_with_trainer,
                                                      trainer_args, trainer_callbacks)
from labeler.services.training.stages import RunResult, StageContext, data_snapshot
from labeler.services.settings.training_stages.online_dpo import StudioOnlineDPOConfig, judge_spec  # noqa: F401 - callers
from rlhf.judges import BasePairwiseJudge, ScoreJudge, preference_from_scores
from rlhf.loading import load_tokenizer, save_in_stored_dtype
from rlhf.online_dpo import OnlineDPOTrainer
from rlhf.rewards import FunctionReward


def _text(value) -> str:
    """A prompt or an answer as text: a conversation's last message, else the value itself."""
    return value[-1]["content"] if isinstance(value, list) else value


class JudgementLog:
    """Where a run's judges record each pair they judge (run_judgements), with the trainer's step (`step_of`, bound
    once the trainer exists: its global step + 1)."""

    def __init__(self, db, run_id: int):
        self.db, self.run_id = db, run_id
        self.step_of = lambda: 1

    def write(self, judgements: list[Judgement]) -> None:
        record_judgements(self.db, self.run_id, judgements)


class AppJudge(ScoreJudge):
    """A reward source of the app (queries, responses) -> scores as a scoring judge: conversational prompts reach it as
    their text, answers as text. With a `log`, each pair it scores is recorded as the model's judgement."""

    def __init__(self, source, name: str):
        self.source, self.name = source, name
        self.log: JudgementLog | None = None

    def scores(self, prompts: list, completions: list) -> list[float]:
        return list(self.source([_text(p) for p in prompts], [_text(c) for c in completions]))

    def judge(self, prompts: list, completions: list[list], shuffle_order: bool = True) -> list[int]:
        # The trainer's layout (rlhf/online_dpo.py _judge: the prompts twice, the first answers then the second), so
        # that checked_scores sees pairs one way whoever asks.
        values = self.checked_scores(list(prompts) * 2, [a for a, _ in completions] + [b for _, b in completions])
        return preference_from_scores(values[:len(prompts)], values[len(prompts):])

    def checked_scores(self, prompts: list, completions: list) -> list[float]:
        values = super().checked_scores(prompts, completions)  # JudgeError before anything is recorded
        if self.log is not None:
            self.log.write(scored_judgements(self.log.step_of(), prompts, completions, values))
        return values


def scored_judgements(step: int, prompts: list, completions: list, values: list[float]) -> list[Judgement]:
    """The model's judgements of the pairs a scorer scored in the trainer's layout: pair i is completions i and i + B
    (B = half of them), the higher score the better (rlhf.judges.preference_from_scores; the trainer's
    missing_eos_penalty, when set, is applied after this and may turn a verdict it records)."""
    half = len(completions) // 2
    if len(completions) != 2 * half or list(prompts[:half]) != list(prompts[half:]):
        raise ValueError("scores to record come as the trainer asks for them: the prompts twice, the first answers, "
                         "then the second")
    verdicts = preference_from_scores(values[:half], values[half:])
    return [Judgement(step, _text(prompts[i]), _text(completions[i]), _text(completions[half + i]), "model",
                      verdicts[i], model=verdicts[i]) for i in range(half)]


def pair_verdicts(rewards: list[float | None]) -> list[int]:
    """Pairwise verdicts from the queue's rewards of consecutive pairs (centred ranks: +1 the better, -1 the worse,
    0 each on a tie): 0 where the first is ranked higher, 1 where the second is, -1 on a tie or where nobody ranked
    the pair in time (left out of the loss)."""
    out = []
    for first, second in zip(rewards[0::2], rewards[1::2]):
        out.append(-1 if first is None or second is None or first == second else 0 if first > second else 1)
    return out


class PairsQueue(HumanRewardQueue):
    """The run's queue of pairs (a ranking item of two answers each) that keeps what people answered in its last
    wait: (item ids, rewards), for the judgements' record."""

    last_wait: tuple[list[int], list[float | None]] = ([], [])
    last_asked: tuple[list[str], list[str]] = ([], [])

    def request_and_wait(self, queries: list[str], responses: list[str], timeout: float) -> list[float | None]:
        self.last_asked = (list(queries), list(responses))
        return super().request_and_wait(queries, responses, timeout)

    def wait(self, item_ids: list[int], timeout: float) -> list[float | None]:
        rewards = super().wait(item_ids, timeout)
        self.last_wait = (list(item_ids), list(rewards))
        return rewards

    def people_verdicts(self) -> dict[tuple[str, str, str], tuple[int | None, int]]:
        """(prompt, first answer, second answer) -> (people's verdict or None when not ranked in time, the item id)
        of each pair of the last wait."""
        (queries, responses), (item_ids, rewards) = self.last_asked, self.last_wait
        out = {}
        for k, (item_id, verdict) in enumerate(zip(item_ids, pair_verdicts(rewards))):
            ranked = rewards[2 * k] is not None and rewards[2 * k + 1] is not None
            out[queries[2 * k], responses[2 * k], responses[2 * k + 1]] = (verdict if ranked else None, item_id)
        return out


class PeopleJudge(BasePairwiseJudge):
    """People as the judge: each pair becomes a ranking item of two answers in the Rank tab, queued ahead of
    ordinary items (the tab shows the answers in an order shuffled per person and never the model; `=` ranks them
    as a tie), and the run waits for the rankings as reward=human runs do (human_timeout, timeout_policy skip or
    wait; stopping the run stops the wait). Every ranking is a label in the database, kept whatever the run does."""

    name = "people"

    def __init__(self, queue: PairsQueue, timeout: float):
        self.queue, self.timeout = queue, timeout
        self.judged = 0  # pairs people ranked in time (ties too), for the run's log
        self.last_stats: dict[str, float] = {}  # logged by the trainer each step
        self.log: JudgementLog | None = None

    def judge(self, prompts: list[str], completions: list[list[str]], shuffle_order: bool = True) -> list[int]:
        # Two identical answers are a tie without asking anyone (and a ranking needs two different answers).
        asked = [i for i, (a, b) in enumerate(completions) if a != b]
        verdicts = [-1] * len(prompts)
        people: dict[tuple[str, str, str], tuple[int | None, int]] = {}
        if asked:
            queries = [prompts[i] for i in asked for _ in range(2)]
            answers = [answer for i in asked for answer in completions[i]]
            rewards = self.queue.request_and_wait(queries, answers, self.timeout)
            for i, verdict in zip(asked, pair_verdicts(rewards)):
                verdicts[i] = verdict
            self.judged += sum(1 for reward in rewards[0::2] if reward is not None)  # ranked in time, ties too
            people = self.queue.people_verdicts()
        self.last_stats = {"human/pairs_judged": float(self.judged)}
        if self.log is not None:
            step, rows = self.log.step_of(), []
            for i, (a, b) in enumerate(completions):
                said, item_id = people.get((prompts[i], a, b), (None, None))
                rows.append(Judgement(step, prompts[i], a, b, "none" if said is None else "people",
                                      verdicts[i] if said is not None else -1, people=said, item_id=item_id))
            self.log.write(rows)
        return verdicts


class MixJudge(BasePairwiseJudge):
    """People and the online reward model together (judge=mix): each batch's pairs go through reward=mix's
    ActiveMixReward (labeler/services/labels/online_reward.py) as groups of two: people rank the `human_share` of pairs
    the model's ensemble is least sure of (one in four of those picked at random), the model judges the rest by its
    expected ranks (no opinion, a tie, until it has learnt from people), and it learns from every ranking during
    the run. Its statistics (reward/from_human and reward/from_rm in answers, rm_online/agreement with people on
    the pairs both saw) are logged each step. With a `log`, each pair is recorded with the model's verdict, and, for
    the pairs people were asked about, theirs and the model's own (its expected ranks before the batch, as the mix
    scored it to pick the pairs)."""

    name = "mix"

    def __init__(self, mix):
        self.mix = mix
        self.last_stats: dict[str, float] = {}
        self.log: JudgementLog | None = None

    def model_verdicts(self, prompts: list[str], completions: list[list[str]]) -> list[int]:
        """The online reward model's verdict on each pair now: its expected centred ranks (the rewards it gives a pair
        it judges) at its calibrated temperature."""
        from rlhf.preference_ensemble import expected_centred_ranks

        if not prompts:
            return []
        scores = self.mix.model.scores([p for p in prompts for _ in range(2)],
                                       [c for pair in completions for c in pair])  # (members, 2 * pairs)
        ranks = [value for k in range(len(prompts))
                 for value in expected_centred_ranks(self.mix.model.temperature * scores[:, 2 * k:2 * k + 2]).tolist()]
        return pair_verdicts(ranks)

    def judge(self, prompts: list[str], completions: list[list[str]], shuffle_order: bool = True) -> list[int]:
        asked = [i for i, (a, b) in enumerate(completions) if a != b]  # identical answers: a tie, nobody asked
        verdicts = [-1] * len(prompts)
        model: dict[int, int] = {}
        if asked:
            if self.log is not None:  # scored before the mix asks anyone (the model it picked the pairs with)
                model = dict(zip(asked, self.model_verdicts([prompts[i] for i in asked],
                                                            [completions[i] for i in asked])))
            self.mix.queue.last_asked, self.mix.queue.last_wait = ([], []), ([], [])
            rewards = self.mix([prompts[i] for i in asked for _ in range(2)],
                               [answer for i in asked for answer in completions[i]])
            for i, verdict in zip(asked, pair_verdicts(rewards)):
                verdicts[i] = verdict
        self.last_stats = dict(self.mix.last_stats)
        if self.log is not None:
            people = self.mix.queue.people_verdicts() if asked else {}
            step, rows = self.log.step_of(), []
            for i, (a, b) in enumerate(completions):
                if i not in model:
                    rows.append(Judgement(step, prompts[i], a, b, "none", -1))
                    continue
                said, item_id = people.get((prompts[i], a, b), (None, None))
                if said is not None:  # people's ranking trained; the model's verdict is its own, before it
                    rows.append(Judgement(step, prompts[i], a, b, "people", verdicts[i], people=said, model=model[i],
                                          item_id=item_id))
                else:  # the model's rewards trained (people not asked, or not in time): its verdict is the one used
                    rows.append(Judgement(step, prompts[i], a, b, "model", verdicts[i], model=verdicts[i],
                                          item_id=item_id))
            self.log.write(rows)
        return verdicts


def _pairs_queue(ctx: StageContext) -> PairsQueue:
    """The run's queue of pairs for the Rank tab: a ranking item of two answers per pair. A resumed run samples new
    pairs, so the pairs its last start left waiting stop jumping the queue (they stay labellable, and a ranking of
    them is kept as any other label)."""
    policy = "skip" if ctx.job.timeout_policy == "rm" else ctx.job.timeout_policy  # no reward model to fall back on
    queue = PairsQueue(ctx.db_path, ctx.project, ctx.run_id, policy=policy,
                       model_name=f"online-dpo-run{ctx.run_id}", should_stop=ctx.should_stop,
                       label_kind="ranking", group_size=2)
    stale = [item_id for item_id, _, _ in queue.pending()]
    if stale:
        queue.release(stale)
    return queue


def people_judge(ctx: StageContext, db) -> PeopleJudge:
    """The people judge of a run; InputError when the project has nobody to ask."""
    require_annotators(db, "people")
    return PeopleJudge(_pairs_queue(ctx), ctx.job.human_timeout)


def mix_judge(ctx: StageContext, db, warm_start: str = "") -> MixJudge:
    """The mixed judge of a run: reward=mix's active mix, its online reward model warm-started from `warm_start`
    (mix:NAME), else as PPO's is (the job's reward_model, else the newest registered one, else the encoder alone)."""
    require_annotators(db, "mix" + (f":{warm_start}" if warm_start else ""))
    if warm_start:
        ctx = dataclasses.replace(ctx, job=dataclasses.replace(ctx.job, reward_model=warm_start))
    return MixJudge(active_mix(ctx, db, _pairs_queue(ctx)))


def app_judge(spec_text: str, db, ctx: StageContext | None = None):
    """The judge a run's `judge` setting names (reward_spec's grammar, or people)."""
    spec = judge_spec(spec_text)
    if spec.source in ("human", "mix"):
        if ctx is None:
            raise InputError(f"judge={spec_text} needs the run (its queue)", field="judge")
        return people_judge(ctx, db) if spec.source == "human" else mix_judge(ctx, db, spec.model)
    if spec.source == "function":
        function = FunctionReward.from_spec(spec.function)
        # The user's function itself, so the run's error names it (FunctionReward would wrap its failures).
        return AppJudge(function.function, spec.function)
    from rlhf.reward import RewardScorer

    name = spec.model or models.newest(db, "reward")
    return AppJudge(RewardScorer(models.resolve(db, name)).score, f"rm:{name}")


def _args(ctx: StageContext):
    """The trainer config from the stored resolved settings (the job's answer length among them: Stage.from_job)."""
    return trainer_args(ctx, "online-dpo")


def _rows(ctx: StageContext, db, tokenizer) -> tuple[list[dict], list[dict]]:
    """(the frozen rows, the trainer's rows): the training prompts as prompt-only rows, shuffled by the job's seed (a
    resumed run keeps its list); the trainer's conversational when the project sends prompts through the chat
    template, plain text otherwise."""
    rows = stage_rows(ctx, db, "online-dpo")
    random.Random(ctx.job.seed).shuffle(rows)
    rows = ctx.frozen_rows("prompts", rows)
    if not rows:
        raise InputError("the project has no prompts: import some first", field="data")
    chat = get_project(db, ctx.project).chat_template is not False and getattr(tokenizer, "chat_template", None) is not None
    return rows, [{"prompt": [{"role": "user", "content": r["prompt"]}] if chat else r["prompt"]} for r in rows]


def run_online_dpo(ctx: StageContext) -> RunResult:
    from datasets import Dataset

    from rlhf.peft_utils import is_peft_model, merged_model

    # 1. the model, the prompts and the settings
    db = ctx.open_db()
    base = ctx.job.base_model("online-dpo")
    path = models.resolve(db, base)
    tokenizer = load_tokenizer(path, padding_side="left")
    frozen, rows = _rows(ctx, db, tokenizer)
    args = _args(ctx)
    # 2. the judge, recording each pair it judges (run_judgements) at the trainer's step
    judge = app_judge(args.judge, db, ctx)
    judge.log = JudgementLog(db, ctx.run_id)
    # 3. train (resuming from the newest checkpoint)
    trainer = OnlineDPOTrainer(path, judge=judge, args=args, train_dataset=Dataset.from_list(rows),
                               processing_class=tokenizer, peft_config=peft_config(ctx, "CAUSAL_LM"),
                               callbacks=trainer_callbacks(ctx))
    judge.log.step_of = lambda: trainer.state.global_step + 1
    try:
        train_with_trainer(ctx, trainer)
    finally:
        if isinstance(judge, PeopleJudge):
            print(f"people ranked {judge.judged} pairs", flush=True)
        if isinstance(judge, MixJudge):
            judge.mix.model.close()
    # 4. save a full model any from_pretrained loads (a LoRA adapter merged into its base)
    trainer.accelerator.wait_for_everyone()
    if trainer.accelerator.is_main_process:
        policy = trainer.accelerator.unwrap_model(trainer.model)
        if is_peft_model(policy):
            policy = merged_model(policy)
        save_in_stored_dtype(policy, ctx.final_dir, path)
        tokenizer.save_pretrained(ctx.final_dir)
    return RunResult(str(ctx.final_dir), "policy", base, {}, data_snapshot("prompts", frozen))


__all__ = ["AppJudge", "JudgementLog", "MixJudge", "PairsQueue", "PeopleJudge", "StudioOnlineDPOConfig", "app_judge",
           "mix_judge", "pair_verdicts", "people_judge", "run_online_dpo", "scored_judgements"]
