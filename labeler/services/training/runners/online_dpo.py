"""Online DPO in the app (rlhf.online_dpo.OnlineDPOTrainer): each step the policy answers a batch of the project's
training prompts twice, the run's judge picks the better answer of each pair, and DPO's loss trains on the pairs.

The judge is the trainer setting `judge`, in reward_spec's grammar: `rm` (the newest registered reward model),
`rm:NAME`, `vader`, `vader-with-prompt` or `module:function` (a function (prompts, answers) -> one float per
answer), `people` (each pair to the Rank tab as a blind ranking of two, PeopleJudge) or `mix` (people rank the pairs
the online reward model is least sure of, the model judges the rest and learns from people, MixJudge). A scorer
scores each answer alone and the higher score wins; equal scores tie and the pair is left out. With
`num_generations` > 2 the policy answers each prompt that many times, people (or the mix) rank all of a prompt's
answers as one Rank item, and the pair trained on is the best and the worst (rlhf.judges.chosen_pair). A function that raises
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
from rlhf.judges import BaseRankJudge, ScoreJudge, chosen_pair, preference_from_scores, ranking_from_scores
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
    their text, answers as text. With a `log`, the pair it picks of each prompt's `group_size` answers (the trainer's
    num_generations) is recorded as the model's judgement."""

    def __init__(self, source, name: str, group_size: int = 2):
        self.source, self.name, self.group_size = source, name, group_size
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
            self.log.write(scored_judgements(self.log.step_of(), prompts, completions, values, self.group_size))
        return values


def scored_judgements(step: int, prompts: list, completions: list, values: list[float],
                      group_size: int = 2) -> list[Judgement]:
    """The model's judgements of the pairs a scorer's scores pick, in the trainer's layout: answer k of prompt i is
    completion k * B + i (B prompts, each `group_size` times); of two answers the higher score wins, of more the
    best and the worst are the pair (rlhf.judges.chosen_pair, as the trainer picks; its missing_eos_penalty, when
    set, is applied after this and may turn a verdict it records)."""
    count = len(completions) // group_size
    if len(completions) != group_size * count or any(list(prompts[k * count:(k + 1) * count]) != list(prompts[:count])
                                                     for k in range(group_size)):
        raise ValueError(f"scores to record come as the trainer asks for them: the prompts {group_size} times, "
                         "answer k of every prompt in block k")
    out = []
    for i in range(count):
        group = [completions[k * count + i] for k in range(group_size)]
        first, second, verdict = chosen_pair(ranking_from_scores(values[i::count]), group_size)
        out.append(Judgement(step, _text(prompts[i]), _text(group[first]), _text(group[second]), "model", verdict,
                             model=verdict))
    return out


def group_rankings(rewards: list[float | None], size: int) -> list[list[int]]:
    """Rankings (best first) from the queue's rewards of consecutive groups of `size` answers (centred ranks: the
    higher the better, equal ones tied): [] where nobody ranked the group in time or all its answers tie (a tie:
    left out of the loss)."""
    groups = [rewards[k:k + size] for k in range(0, len(rewards), size)]
    return [[] if any(r is None for r in group) else ranking_from_scores(group) for group in groups]



class PairsQueue(HumanRewardQueue):
    """The run's queue of groups (a ranking item of a prompt's answers: two, or num_generations) that keeps what
    people answered in its last wait: (item ids, rewards), for the judgements' record."""

    last_wait: tuple[list[int], list[float | None]] = ([], [])
    last_asked: tuple[list[str], list[str]] = ([], [])

    def request_and_wait(self, queries: list[str], responses: list[str], timeout: float) -> list[float | None]:
        self.last_asked = (list(queries), list(responses))
        return super().request_and_wait(queries, responses, timeout)

    def wait(self, item_ids: list[int], timeout: float) -> list[float | None]:
        rewards = super().wait(item_ids, timeout)
        self.last_wait = (list(item_ids), list(rewards))
        return rewards

    def people_rankings(self) -> dict[tuple[str, tuple[str, ...]], tuple[list[int] | None, int]]:
        """(prompt, its answers) -> (people's ranking, [] for all tied, or None when not ranked in time; the item
        id) of each group of the last wait."""
        (queries, responses), (item_ids, rewards) = self.last_asked, self.last_wait
        size, out = self.group_size, {}
        for k, (item_id, ranking) in enumerate(zip(item_ids, group_rankings(rewards, size))):
            ranked = all(r is not None for r in rewards[size * k:size * (k + 1)])
            out[queries[size * k], tuple(responses[size * k:size * (k + 1)])] = (ranking if ranked else None, item_id)
        return out


class PeopleJudge(BaseRankJudge):
    """People as the judge: each prompt's answers (a pair, or num_generations of them) become a ranking item in the
    Rank tab, queued ahead of ordinary items (the tab shows the answers in an order shuffled per person and never the
    model; `=` ranks answers as tied), and the run waits for the rankings as reward=human runs do (human_timeout,
    timeout_policy skip or wait; stopping the run stops the wait). Every ranking is a label in the database, kept
    whatever the run does. The trainer trains on the pair rlhf.judges.chosen_pair picks (of more than two answers:
    the best and the worst)."""

    name = "people"

    def __init__(self, queue: PairsQueue, timeout: float):
        self.queue, self.timeout = queue, timeout
        self.judged = 0  # groups people ranked in time (all tied too), for the run's log
        self.last_stats: dict[str, float] = {}  # logged by the trainer each step
        self.log: JudgementLog | None = None

    def judge(self, prompts: list[str], completions: list[list[str]], shuffle_order: bool = True) -> list[list[int]]:
        size = len(completions[0]) if completions else 2
        # Answers all the same are a tie without asking anyone (and a ranking needs two different answers).
        asked = [i for i, group in enumerate(completions) if len(set(group)) > 1]
        rankings: list[list[int]] = [[] for _ in prompts]
        people: dict = {}
        if asked:
            queries = [prompts[i] for i in asked for _ in range(size)]
            answers = [answer for i in asked for answer in completions[i]]
            rewards = self.queue.request_and_wait(queries, answers, self.timeout)
            for i, ranking in zip(asked, group_rankings(rewards, size)):
                rankings[i] = ranking
            self.judged += sum(1 for k in range(0, len(rewards), size) if rewards[k] is not None)
            people = self.queue.people_rankings()
        self.last_stats = {"human/pairs_judged": float(self.judged)}
        if self.log is not None:
            step, rows = self.log.step_of(), []
            for i, group in enumerate(completions):
                said, item_id = people.get((prompts[i], tuple(group)), (None, None))
                first, second, verdict = chosen_pair(rankings[i], size)
                rows.append(Judgement(step, prompts[i], group[first], group[second],
                                      "none" if said is None else "people", verdict if said is not None else -1,
                                      people=verdict if said is not None else None, item_id=item_id))
            self.log.write(rows)
        return rankings


class MixJudge(BaseRankJudge):
    """People and the online reward model together (judge=mix): each batch's groups (a pair, or num_generations
    answers of a prompt) go through reward=mix's ActiveMixReward (labeler/services/labels/online_reward.py): people
    rank the `human_share` of groups the model's ensemble is least sure of (one in four of those picked at random),
    the model ranks the rest by its expected ranks (no opinion, a tie, until it has learnt from people), and it
    learns from every ranking during the run (of four answers: six comparisons). Its statistics (reward/from_human
    and reward/from_rm in answers, rm_online/agreement with people on the pairs both saw) are logged each step. With
    a `log`, each prompt's chosen pair is recorded with the verdict used, and, for the groups people were asked
    about, theirs and the model's own (its expected ranks before the batch, as the mix scored it to pick them).
    After each call `last_confidence` says how sure each prompt's ranking is of its best answer over its worst (the
    pair trained on): 1 where people ranked, the model's calibrated probability where it did (the trainer's
    soft_judgements trains each pair only that far)."""

    name = "mix"

    def __init__(self, mix):
        self.mix = mix
        self.last_stats: dict[str, float] = {}
        self.last_confidence: list[float] = []
        self.log: JudgementLog | None = None

    def confidence(self, rankings: list[list[int]], asked: list[int], size: int) -> list[float]:
        """P(each prompt's best answer beats its worst) by what ranked it: people's ranking is sure (1); the
        model's is its ensemble's probability at its calibrated temperature, from the scores the mix ranked with
        (rlhf.preference_ensemble.win_probabilities); a group nobody could rank (a tie, left out) says 1/2."""
        from rlhf.preference_ensemble import win_probabilities

        sure = [0.5 if not ranking else 1.0 for ranking in rankings]
        for j, i in enumerate(asked):  # the mix saw group j's answers at j * size ... j * size + size - 1
            start = j * size
            if rankings[i] and start not in self.mix.last_from_people:
                best, worst = start + rankings[i][0], start + rankings[i][-1]
                sure[i] = float(win_probabilities(self.mix.last_scores[:, [best, worst]])[0, 1])
        return sure

    def model_rankings(self, groups: int, size: int) -> list[list[int]]:
        """The online reward model's ranking of each of the last mix call's `groups` groups of `size` answers: its
        expected centred ranks (the rewards it gives a group it judges) from the scores the mix ranked and picked
        with (before it learnt from this batch's people), so not scored a second time."""
        from rlhf.preference_ensemble import expected_centred_ranks

        scores = self.mix.last_scores  # (members, size * groups), at the model's calibrated temperature
        return [ranking_from_scores(expected_centred_ranks(scores[:, size * k:size * (k + 1)]).tolist())
                for k in range(groups)]

    def judge(self, prompts: list[str], completions: list[list[str]], shuffle_order: bool = True) -> list[list[int]]:
        size = len(completions[0]) if completions else 2
        asked = [i for i, group in enumerate(completions) if len(set(group)) > 1]  # all the same: a tie
        rankings: list[list[int]] = [[] for _ in prompts]
        model: dict[int, list[int]] = {}
        if asked:
            self.mix.queue.last_asked, self.mix.queue.last_wait = ([], []), ([], [])
            rewards = self.mix([prompts[i] for i in asked for _ in range(size)],
                               [answer for i in asked for answer in completions[i]])
            for i, ranking in zip(asked, group_rankings(rewards, size)):
                rankings[i] = ranking
            if self.log is not None:  # the model's own ranking, as the mix scored the groups to pick them
                model = dict(zip(asked, self.model_rankings(len(asked), size)))
        self.last_confidence = self.confidence(rankings, asked, size)
        self.last_stats = dict(self.mix.last_stats)
        if self.log is not None:
            people = self.mix.queue.people_rankings() if asked else {}
            step, rows = self.log.step_of(), []
            for i, group in enumerate(completions):
                if i not in model:
                    rows.append(Judgement(step, prompts[i], group[0], group[1], "none", -1))
                    continue
                first, second, verdict = chosen_pair(rankings[i], size)
                said, item_id = people.get((prompts[i], tuple(group)), (None, None))
                if said is not None:  # people's ranking trained; the model's verdict on the pair is its own, before it
                    rows.append(Judgement(step, prompts[i], group[first], group[second], "people", verdict,
                                          people=verdict, model=verdict_on(model[i], first, second), item_id=item_id))
                else:  # the model's ranking trained (people not asked, or not in time): its verdict is the one used
                    rows.append(Judgement(step, prompts[i], group[first], group[second], "model", verdict,
                                          model=verdict, item_id=item_id))
            self.log.write(rows)
        return rankings


def verdict_on(ranking: list[int], first: int, second: int) -> int:
    """A ranking's verdict on the pair (first, second): 0 where it ranks the first higher, 1 the second, -1 when it
    has no preference ([])."""
    if not ranking:
        return -1
    return 0 if ranking.index(first) < ranking.index(second) else 1


def _pairs_queue(ctx: StageContext, size: int = 2) -> PairsQueue:
    """The run's queue for the Rank tab: a ranking item of a prompt's `size` answers (two: a pair). A resumed run
    samples new answers, so the items its last start left waiting stop jumping the queue (they stay labellable, and
    a ranking of them is kept as any other label)."""
    policy = "skip" if ctx.job.timeout_policy == "rm" else ctx.job.timeout_policy  # no reward model to fall back on
    queue = PairsQueue(ctx.db_path, ctx.project, ctx.run_id, policy=policy,
                       model_name=f"online-dpo-run{ctx.run_id}", should_stop=ctx.should_stop,
                       label_kind="ranking", group_size=size)
    stale = [item_id for item_id, _, _ in queue.pending()]
    if stale:
        queue.release(stale)
    return queue


def people_judge(ctx: StageContext, db, size: int = 2) -> PeopleJudge:
    """The people judge of a run ranking `size` answers a prompt; InputError when the project has nobody to ask."""
    require_annotators(db, "people")
    return PeopleJudge(_pairs_queue(ctx, size), ctx.job.human_timeout)


def mix_judge(ctx: StageContext, db, warm_start: str = "", size: int = 2) -> MixJudge:
    """The mixed judge of a run: reward=mix's active mix, its online reward model warm-started from `warm_start`
    (mix:NAME), else as PPO's is (the job's reward_model, else the newest registered one, else the encoder alone)."""
    require_annotators(db, "mix" + (f":{warm_start}" if warm_start else ""))
    if warm_start:
        ctx = dataclasses.replace(ctx, job=dataclasses.replace(ctx.job, reward_model=warm_start))
    return MixJudge(active_mix(ctx, db, _pairs_queue(ctx, size)))


def app_judge(spec_text: str, db, ctx: StageContext | None = None, group_size: int = 2):
    """The judge a run's `judge` setting names (reward_spec's grammar, or people), for `group_size` answers a
    prompt (the trainer's num_generations)."""
    spec = judge_spec(spec_text)
    if spec.source in ("human", "mix"):
        if ctx is None:
            raise InputError(f"judge={spec_text} needs the run (its queue)", field="judge")
        if spec.source == "human":
            return people_judge(ctx, db, group_size)
        return mix_judge(ctx, db, spec.model, group_size)
    if spec.source == "function":
        function = FunctionReward.from_spec(spec.function)
        # The user's function itself, so the run's error names it (FunctionReward would wrap its failures).
        return AppJudge(function.function, spec.function, group_size)
    from rlhf.reward import RewardScorer

    name = spec.model or models.newest(db, "reward")
    return AppJudge(RewardScorer(models.resolve(db, name)).score, f"rm:{name}", group_size)


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
    judge = app_judge(args.judge, db, ctx, args.num_generations)
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
    if trainer.kl_budget_spent_at is not None:
        print(f"KL budget of {args.kl_budget:g} nats spent at step {trainer.kl_budget_spent_at} of "
              f"{trainer.state.max_steps}: the run ends there", flush=True)
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
           "group_rankings", "mix_judge", "people_judge", "run_online_dpo", "scored_judgements",
           "verdict_on"]
