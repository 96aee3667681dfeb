"""The PPO run's rollout stream (labeler/services/training/runners/rollouts.py) without a model: which prompts each rank
answers, what waits in the buffer, the batch sampled ahead, and the position a checkpoint stores."""
from __future__ import annotations

from labeler.services.training.runners.rollouts import Rollout, RolloutStream

PROMPTS = ["p0", "p1", "p2", "p3", "p4"]


def fake_sample(log: list):
    """Answers 'a<n>' (n counts the answers sampled so far); prompt 'p3' gets an empty answer."""
    def sample(texts):
        log.append(list(texts))
        start = sum(len(batch) for batch in log[:-1])
        return [Rollout(query=[0], response=[] if text == "p3" else [1], prompt=text, answer=f"a{start + i}")
                for i, text in enumerate(texts)]
    return sample


def stream_of(log, rewards=None, **kwargs):
    def reward(prompts, answers):
        return [(rewards or {}).get(answer, 1.0) for answer in answers]
    return RolloutStream(PROMPTS, answers_per_prompt=2, prompts_per_batch=lambda: 2, sample=fake_sample(log),
                         reward=reward, **kwargs)


def never_stop():
    return False


def test_each_rank_takes_its_share_of_the_next_prompts_wrapping_round():
    # world 2, 2 prompts per rank and batch: batch 1 covers p0..p3 (rank 1: p2, p3), batch 2 p4, p0, p1, p2
    # (rank 1: p1, p2); each prompt twice (answers_per_prompt).
    texts = []
    stream = stream_of(texts, rank=1, world=2)
    assert stream.next_texts() == ["p2", "p2", "p3", "p3"]
    assert stream.next_texts() == ["p1", "p1", "p2", "p2"]
    assert stream.position == 8


def test_fill_drops_unrewarded_and_empty_answers_and_keeps_the_rest_for_the_next_step():
    log = []
    # batch 1: p0 p0 p1 p1 -> a0..a3, a1 unrated; batch 2: p2 p2 p3 p3 -> a4..a7, p3's answers empty.
    stream = stream_of(log, rewards={"a1": None})
    assert stream.fill(4, any_rank=lambda flag: flag, should_stop=never_stop, look_ahead=never_stop)
    assert log == [["p0", "p0", "p1", "p1"], ["p2", "p2", "p3", "p3"]]
    assert [r.answer for r in stream.buffer] == ["a0", "a2", "a3", "a4", "a5"]
    assert [r.answer for r in stream.take(4)] == ["a0", "a2", "a3", "a4"]
    assert [r.answer for r in stream.buffer] == ["a5"]
    assert [r.score for r in stream.take(4)] == [1.0]


def test_a_stop_cuts_the_fill_short():
    log = []
    stream = stream_of(log, rewards={"a0": None, "a1": None})
    assert not stream.fill(4, any_rank=lambda flag: flag, should_stop=lambda: True, look_ahead=never_stop)
    assert len(log) == 1 and [r.answer for r in stream.buffer] == ["a2", "a3"]


def test_overlap_samples_one_batch_ahead_and_a_checkpoint_resumes_before_it(tmp_path):
    log, requested = [], []
    stream = stream_of(log, request_ahead=lambda texts, answers: requested.append(answers))
    assert stream.fill(4, any_rank=lambda flag: flag, should_stop=never_stop, look_ahead=lambda: True)
    # Batch 1 (a0..a3) is scored; batch 2 (a4..a7) was sampled and put before people, and waits.
    assert requested == [["a0", "a1", "a2", "a3"], ["a4", "a5", "a6", "a7"]]
    assert [r.answer for r in stream.buffer] == ["a0", "a1", "a2", "a3"]
    assert [r.answer for r in stream.ahead] == ["a4", "a5", "a6", "a7"]
    # 4 prompts handed out; the 2 of the batch ahead are not trained on, so a resumed run starts at 2.
    assert (stream.position, stream.resume_position) == (4, 2)
    stream.write_state(tmp_path, stream.resume_position)
    resumed = stream_of([])
    resumed.read_state(tmp_path)
    assert resumed.next_texts() == ["p2", "p2", "p3", "p3"]
    # The next fill scores the batch ahead first, without sampling it again.
    stream.take(4)
    assert stream.fill(2, any_rank=lambda flag: flag, should_stop=never_stop, look_ahead=never_stop)
    assert [r.answer for r in stream.buffer] == ["a4", "a5"] and len(log) == 2
