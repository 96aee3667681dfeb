"""The wall-time estimate of a DPO or reward-model run before it starts (issue 45 item 4): the arithmetic from a made-up
micro-batch, worked by hand, and what the preview measures and says (the micro-batch is injected: no model loads)."""
from __future__ import annotations

import json
from functools import partial

import pytest
from export_fixtures import build_heldout_db
from helpers import recording

from labeler.services.training import run_estimate, run_preview
from labeler.services.training.run_estimate import LabelMicroStep, LabelStepSettings
from labeler.services.training.run_preview import preview_run

# A batch of 4 pairs: training step 3 s, a no-grad forward 1 s; 20 s to start (5 s of it reading the weights);
# 4 held-out answers generated in 1 s (0.25 s an answer).
MICRO = LabelMicroStep(rows=4, train_seconds=3.0, forward_seconds=1.0, setup_seconds=20.0, generate_seconds=1.0,
                       generate_rows=4, load_seconds=5.0)


def test_a_dpo_run_with_its_reference_precomputed():
    # The project: 63 rankings -> 56 training and 7 eval pairs here, batch 4, 16 steps, 7 held-out x 4 answers.
    estimate = run_estimate.label_estimate(MICRO, steps=16, accumulation=1, train_pairs=56, eval_pairs=7,
                                           reference="once", eval_answers=28)
    assert estimate.step_seconds == 3.0  # one batch's training step a step
    assert estimate.reference_seconds == 16.0  # ceil(63 / 4) = 16 batches x 1 s, once before training
    # the Trainer's evaluation: ceil(7 / 4) = 2 batches x 1 s; the automatic one: 2 models x (5 s to load + 28 x 0.25)
    # and the tuned model's KL: the base loaded again (5 s) and 2 passes over 28 answers at 1 s / 8 sequences
    assert estimate.eval_seconds == 2.0 + 2 * (5.0 + 7.0) + (5.0 + 2 * 28 * 0.125)  # 2 + 24 + 12 = 38 s
    assert estimate.total_seconds == 20 + 16 + 16 * 3 + 38  # 122 s


def test_the_kl_pass_is_the_measured_one_when_the_answers_were_timed():
    # The same run with the log-prob pass over the 4 generated answers measured at 0.8 s (0.2 s an answer, where a
    # pair's forward halved says 0.125 s): KL is the base loaded again (5 s) and 2 passes over 28 answers at 0.2 s.
    measured = LabelMicroStep(**{**MICRO.__dict__, "logprob_seconds": 0.8})
    estimate = run_estimate.label_estimate(measured, steps=16, accumulation=1, train_pairs=56, eval_pairs=7,
                                           reference="once", eval_answers=28)
    assert estimate.eval_seconds == pytest.approx(2.0 + 2 * (5.0 + 7.0) + (5.0 + 2 * 28 * 0.2))  # 2 + 24 + 16.2
    unmeasured = LabelMicroStep(**{**MICRO.__dict__, "logprob_seconds": 0.8, "generate_rows": 0})
    assert unmeasured.logprob_seconds_per_answer == 0.125  # no answers generated: the pair's forward, halved


def test_a_reference_run_in_every_step_and_gradient_accumulation():
    # 2 batches a step, each 3 s of training and the reference's 1 s: 8 s; no pass before; evaluation twice 1 s a batch.
    estimate = run_estimate.label_estimate(MICRO, steps=10, accumulation=2, train_pairs=56, eval_pairs=7,
                                           reference="each_step")
    assert (estimate.step_seconds, estimate.reference_seconds, estimate.eval_seconds) == (8.0, 0.0, 4.0)
    assert estimate.total_seconds == 20 + 10 * 8 + 4  # 104 s


def test_a_reward_model_has_no_reference_and_no_generation():
    estimate = run_estimate.label_estimate(MICRO, steps=48, accumulation=1, train_pairs=340, eval_pairs=38,
                                           reference="none")
    # 48 x 3 s, the Trainer's evaluation ceil(38 / 4) = 10 batches x 1 s, nothing generated
    assert estimate.total_seconds == 20 + 48 * 3 + 10  # 174 s
    with pytest.raises(ValueError, match="reference='twice'"):
        run_estimate.label_estimate(MICRO, steps=1, accumulation=1, train_pairs=4, eval_pairs=0, reference="twice")


def test_label_batches_count_the_last_partial_one():
    assert [run_estimate.label_batches(pairs, 4) for pairs in (0, 1, 4, 5, 63)] == [0, 1, 1, 2, 16]


@pytest.fixture
def labelled(db):
    build_heldout_db(db)  # 'default': prompt 1 trains, 2 is held out
    return db


_measured = partial(recording, MICRO)  # _measured(calls): a micro-batch measure that records what it was asked


def test_a_dpo_preview_says_how_long_from_a_batch_of_its_own_pairs(labelled):
    calls = []
    preview = preview_run(labelled, "default", "dpo", {"steps": 3, "max_length": 300}, measure=_measured(calls))
    settings = calls[0]
    assert isinstance(settings, LabelStepSettings) and settings.stage == "dpo"
    # the run's first per-device batches (3 of 4) of its own pairs: all 3 here, with their texts
    pairs = json.loads(settings.pairs_json)
    assert len(pairs) == 3 == preview.train_rows and {"prompt", "chosen", "rejected"} <= set(pairs[0])
    assert settings.rows == 4
    assert (settings.max_length, settings.share_prompt_forward, settings.max_new_tokens) == (300, True, 128)
    # 1 held-out prompt x eval_samples 4: the evaluation's answers, generated in one batch
    assert (settings.generate_rows, len(settings.prompts)) == (4, 1) and "Review Heat." in settings.prompts[0]
    # 20 s to load + ceil(3 / 4) = 1 batch of the reference (1 s) + 3 steps x 3 s + evaluation: 2 x (5 s + 4 x 0.25 s)
    # + KL (5 s + 2 x 4 x 0.125 s) = 18 s; 48 s in all
    assert preview.estimate.total_seconds == 48.0
    assert ("**About 48 s on this machine**: 3 steps of ~3 s + 20 s to load + 1 s for the reference's pass over the "
            "pairs + 18 s of evaluation") in preview.markdown()


def test_a_reward_model_preview_measures_its_scalar_head_and_generates_nothing(labelled):
    calls = []
    preview = preview_run(labelled, "default", "rm", {"steps": 3}, measure=_measured(calls))
    assert (calls[0].stage, calls[0].generate_rows, calls[0].prompts) == ("rm", 0, ())
    assert preview.estimate.total_seconds == 20 + 3 * 3  # no reference, no eval split, no generation


def test_no_measurement_without_data_for_sft_or_kto_or_when_asked_not_to(labelled):
    def never(settings):
        raise AssertionError("nothing to measure")

    assert preview_run(labelled, "other", "dpo", {"include_rating_pairs": False}, measure=never).estimate is None
    assert preview_run(labelled, "default", "dpo", {"steps": 3}, estimate_time=False, measure=never).estimate is None
    assert preview_run(labelled, "default", "kto", {"steps": 3, "test_size": 0}, measure=never).estimate is None
    # the Train tab's slower second preview runs for the stages with an estimate
    assert {"dpo", "rm", "ppo"} <= set(run_preview.ESTIMATED_STAGES) and "sft" not in run_preview.ESTIMATED_STAGES


def test_a_failed_or_refused_measurement_is_a_warning(labelled):
    def broken(settings):
        raise RuntimeError("measuring a micro-step failed: out of memory")

    preview = preview_run(labelled, "default", "dpo", {"steps": 3}, measure=broken)
    assert preview.estimate is None and preview.warnings[-1] == "no time estimate: measuring a micro-step failed: out of memory"
    busy = LabelStepSettings(stage="dpo", model_path="default", bf16=False, lora=False, lora_r=8, lora_alpha=16,
                             pairs_json="[]", max_length=512, max_prompt_length=256, share_prompt_forward=True,
                             threads=1, busy_run=7)
    with pytest.raises(RuntimeError, match="run 7 is training on this device"):
        run_estimate.measure_label_step(busy)  # no process started, no model loaded


PAIRS = [{"prompt": "The film was", "chosen": "a delight from start to end", "rejected": "dull"},
         {"prompt": "I thought", "chosen": "so", "rejected": "it could have been much shorter"}]


def _settings(model_dir, stage: str, **changes) -> LabelStepSettings:
    values = dict(stage=stage, model_path=str(model_dir), bf16=False, lora=False, lora_r=2, lora_alpha=4,
                  pairs_json=json.dumps(PAIRS), max_length=512, max_prompt_length=256, share_prompt_forward=True,
                  threads=1)
    return LabelStepSettings(**{**values, **changes})


def test_a_dpo_micro_batch_is_measured_on_the_run_s_own_pairs(tiny_model_dir):
    """The measuring process itself, on the tiny model: every part took time, on a batch padded as the run pads it."""
    from rlhf.data import tokenize_preference_causal
    from rlhf.loading import load_tokenizer

    tokenizer = load_tokenizer(str(tiny_model_dir), padding_side="right")
    tokens = [tokenize_preference_causal(pair, tokenizer, 512, 256) for pair in PAIRS]
    longest = max(len(t["prompt_input_ids"]) + len(t[side]) for t in tokens for side in ("chosen_input_ids",
                                                                                           "rejected_input_ids"))
    settings = _settings(tiny_model_dir, "dpo", max_new_tokens=3, generate_rows=4, prompts=("Review Alien",))
    micro = run_estimate.measure_label_step(settings)
    assert (micro.rows, micro.tokens, micro.generate_rows) == (2, longest, 4)
    assert min(micro.train_seconds, micro.forward_seconds, micro.generate_seconds, micro.load_seconds) > 0
    assert micro.logprob_seconds > 0  # the evaluation's KL pass over the generated answers, timed itself
    assert micro.setup_seconds > micro.load_seconds  # the imports as well, once per run
    assert run_estimate.measure_label_step(settings) is micro  # cached: the preview does not measure twice


def test_the_batches_timed_are_the_full_ones_or_the_run_s_only_one():
    pairs = list(range(7))
    assert run_estimate.measured_batches(pairs, 3) == [[0, 1, 2], [3, 4, 5]]  # the partial [6] would lower the mean
    assert run_estimate.measured_batches(pairs, 7) == [pairs]
    assert run_estimate.measured_batches(pairs, 8) == [pairs]  # fewer pairs than a batch: the run's one batch
    assert run_estimate.measured_batches(pairs, 0) == [pairs]


def test_the_padded_length_of_an_average_batch():
    # Pairs of 1, 2, 3 and 4 tokens two at a time: the six batches are padded to 2, 3, 4, 3, 4 and 4 tokens.
    assert run_estimate.expected_padded_length([4, 1, 3, 2], 2) == pytest.approx(20 / 6)
    assert run_estimate.expected_padded_length([4, 1, 3, 2], 1) == pytest.approx(2.5)  # each pair alone: the mean
    assert run_estimate.expected_padded_length([4, 1, 3, 2], 4) == 4  # one batch of all: the longest
    assert run_estimate.expected_padded_length([4, 1, 3, 2], 9) == 4  # more rows than pairs: the run's one batch
    # Most batches of four hold one of the few long pairs: 10 pairs, 3 of them 140 tokens and 7 of 70.
    # P(no long pair) = C(7, 4) / C(10, 4) = 35 / 210, so E = 70 / 6 + 140 * 5 / 6 = 128.33
    assert run_estimate.expected_padded_length([140] * 3 + [70] * 7, 4) == pytest.approx(70 / 6 + 140 * 5 / 6)


def test_a_dpo_micro_batch_is_the_mean_of_several_batches(tiny_model_dir):
    """Two batches of one pair each: the step and the forward are their means, at the mean padded length."""
    from rlhf.data import tokenize_preference_causal
    from rlhf.loading import load_tokenizer

    tokenizer = load_tokenizer(str(tiny_model_dir), padding_side="right")
    tokens = [tokenize_preference_causal(pair, tokenizer, 512, 256) for pair in PAIRS]
    longest = [max(len(t["prompt_input_ids"]) + len(t[side]) for side in ("chosen_input_ids", "rejected_input_ids"))
               for t in tokens]
    assert longest[0] != longest[1]
    micro = run_estimate._label_step_in_this_process(_settings(tiny_model_dir, "dpo", rows=1))
    assert (micro.rows, micro.tokens) == (1, round(sum(longest) / 2))
    assert micro.train_seconds > 0 and micro.forward_seconds > 0


def test_a_reward_model_micro_batch_with_lora_cut_at_max_length(tiny_model_dir):
    micro = run_estimate._label_step_in_this_process(_settings(tiny_model_dir, "rm", lora=True, max_length=4))
    assert (micro.rows, micro.tokens, micro.generate_rows) == (2, 4, 0)  # every sequence cut to its last 4 tokens
    assert micro.train_seconds > 0 and micro.forward_seconds > 0


def test_a_base_whose_evaluation_is_stored_does_not_answer_again():
    # The same 3-step run as above: the evaluation's 18 s are the base's and the tuned model's answers (5 s to load
    # + 4 x 0.25 s each) and KL (6 s); with the base's evaluation stored and reused, only the tuned model answers.
    both = run_estimate.label_estimate(MICRO, 3, 1, 3, 0, "once", eval_answers=4)
    reused = run_estimate.label_estimate(MICRO, 3, 1, 3, 0, "once", eval_answers=4, base_stored=True)
    assert (both.eval_seconds, reused.eval_seconds) == (18.0, 12.0)
