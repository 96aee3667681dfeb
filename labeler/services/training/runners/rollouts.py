"""The rollout stream of a PPO run: which prompts come next, the batch sampled ahead, the scored rollouts waiting for
a full batch, and where a resumed run starts. Sampling (the policy's generate) and scoring (the reward source) are
passed in, so the stream itself is plain Python.

Prompts are taken in order from the run's list (wrapping round), answers_per_prompt answers to each (RLOO's groups),
prompts_per_batch prompts per rank and batch; the ranks take consecutive shares of the next world * prompts_per_batch
prompts, rank r the r-th. `position` counts the prompts handed out over all ranks; a checkpoint stores it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

JOB_STATE_FILE = "job_state.json"


@dataclass
class Rollout:
    """One sampled answer on its way to a PPO step."""

    query: Any  # prompt token ids (1-D tensor)
    response: Any  # answer token ids (1-D tensor), up to and including EOS
    prompt: str
    answer: str
    behaviour_logprobs: Any = None  # overlap only: the answer's log-probs under the policy that sampled it
    score: float | None = None  # None: no reward (nobody rated it in time), dropped before the step


class RolloutStream:
    """Batches of scored rollouts for PPO steps.

    `sample(texts)` answers prompt texts (one Rollout each); `reward(prompts, answers)` scores them (None: no
    reward). With `request_ahead` (overlap), batch k+1 is sampled and handed to it (queued for rating) before
    waiting for batch k's rewards, so people rate while the trainer steps; `prompts_per_batch()` may raise
    (PPO's rollout rule), and is asked when a batch is sampled."""

    def __init__(self, prompts: list[str], *, answers_per_prompt: int, prompts_per_batch: Callable[[], int],
                 sample: Callable[[list[str]], list[Rollout]], reward: Callable[[list[str], list[str]], list],
                 rank: int = 0, world: int = 1,
                 request_ahead: Callable[[list[str], list[str]], Any] | None = None) -> None:
        self.prompts = prompts
        self.answers_per_prompt = answers_per_prompt
        self.prompts_per_batch = prompts_per_batch
        self.sample = sample
        self.reward = reward
        self.rank, self.world = rank, world
        self.request_ahead = request_ahead
        self.position = 0  # prompts handed out so far, over all ranks
        self.ahead: list[Rollout] = []  # overlap: the next batch, sampled and already in the rating queue
        self.buffer: list[Rollout] = []  # scored rollouts waiting for a full batch

    @property
    def overlap(self) -> bool:
        return self.request_ahead is not None

    def next_texts(self) -> list[str]:
        """This rank's prompt texts of the next batch, each answers_per_prompt times; moves the position on."""
        n_prompts = self.prompts_per_batch()
        first = self.position + self.rank * n_prompts
        texts = [self.prompts[(first + i) % len(self.prompts)]
                 for i in range(n_prompts) for _ in range(self.answers_per_prompt)]
        self.position += self.world * n_prompts
        return texts

    def sample_batch(self) -> list[Rollout]:
        """The next batch sampled (and, with overlap, put before people: a mix picks its groups first)."""
        texts = self.next_texts()
        rollouts = self.sample(texts)
        if self.overlap:
            self.request_ahead(texts, [r.answer for r in rollouts])
        return rollouts

    def fill(self, batch_size: int, *, any_rank: Callable[[bool], bool], should_stop: Callable[[], bool],
             look_ahead: Callable[[], bool]) -> bool:
        """Sample and score until every rank holds `batch_size` rollouts (True), or a stop cut that short (False).

        Rollouts whose reward is None (nobody rated them in time, policy "skip") or empty are dropped; kept ones
        wait in the buffer. A rank whose buffer is full samples along with the others (its extra rollouts wait for
        the next step), so every rank makes the same generate() calls (collectives under ZeRO-3) and steps
        together: `any_rank` and `should_stop` are collectives, called in the same order on every rank.
        `look_ahead()`: whether to sample one batch ahead now (asked with overlap only)."""
        while any_rank(len(self.buffer) < batch_size):
            rollouts, self.ahead = self.ahead or self.sample_batch(), []
            if self.overlap and look_ahead():
                self.ahead = self.sample_batch()  # at most one batch ahead
            scores = self.reward([r.prompt for r in rollouts], [r.answer for r in rollouts])
            for rollout, score in zip(rollouts, scores):
                rollout.score = score
            self.buffer += [r for r in rollouts if r.score is not None and len(r.response) > 0]
            if should_stop():
                break
        return not any_rank(len(self.buffer) < batch_size)

    def take(self, batch_size: int) -> list[Rollout]:
        """The next `batch_size` rollouts of the buffer (fill first)."""
        batch, self.buffer = self.buffer[:batch_size], self.buffer[batch_size:]
        return batch

    @property
    def resume_position(self) -> int:
        """The position a resumed run starts from: the batch sampled ahead is not trained on yet, so it is
        sampled again."""
        return self.position - self.world * (len(self.ahead) // self.answers_per_prompt)

    def write_state(self, folder: Path, position: int) -> None:
        (folder / JOB_STATE_FILE).write_text(json.dumps({"position": position}))

    def read_state(self, folder: Path) -> None:
        """Continue from a checkpoint's position."""
        self.position = json.loads((folder / JOB_STATE_FILE).read_text())["position"]


def resumed_rollouts(queue, tokenizer, chat_template, timeout: float) -> list[Rollout]:
    """A resumed run's first rollouts: the answers it had put before people when it stopped, waited for on the
    same items (their labels are not asked for twice, nor lost), as rollouts with their rewards. Token ids come
    from the stored text (the sampled ids were not kept); rollouts nobody labelled in time are dropped."""
    from rlhf.generation import build_prompt_ids

    pending = queue.pending()
    if not pending:
        return []
    item_ids = [item_id for item_id, _, _ in pending]
    texts = [(prompt, answer) for _, prompt, answers in pending for answer in answers]
    rewards = queue.wait(item_ids, timeout)
    rollouts = []
    for (prompt, answer), reward in zip(texts, rewards):
        response = tokenizer(answer, add_special_tokens=False, return_tensors="pt").input_ids[0]
        if reward is not None and len(response) > 0:
            query = build_prompt_ids(tokenizer, prompt, use_chat_template=chat_template)
            rollouts.append(Rollout(query, response, prompt, answer, score=reward))
    print(f"resumed: {len(rollouts)} answers labelled while the run was down (or since) join the next step",
          flush=True)
    return rollouts
