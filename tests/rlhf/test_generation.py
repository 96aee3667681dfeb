"""rlhf.generation: left padding, EOS handling, settings, seeding."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from rlhf.configs import GenerationSettings
from rlhf.generation import (
    build_prompt_ids,
    decode_responses,
    generate_batch,
    kl_unsafe_reasons,
    left_pad,
    truncate_after_eos,
)

GREEDY = GenerationSettings(max_new_tokens=6, do_sample=False, batch_size=4)


def test_build_prompt_ids_applies_chat_template_and_system_prompt(tiny):
    _, tokenizer = tiny
    ids = build_prompt_ids(tokenizer, "hi there", system_prompt="Be brief.")
    text = tokenizer.decode(ids)
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n"
    # No doubled BOS: the template already starts with <|im_start|>.
    assert ids.dtype == torch.long and ids.dim() == 1 and int(ids[0]) == tokenizer.convert_tokens_to_ids("<|im_start|>")
    plain = build_prompt_ids(tokenizer, "This movie was", use_chat_template=False)
    assert tokenizer.decode(plain) == "This movie was"


def test_build_prompt_ids_keeps_a_conversation_and_its_own_system_turn(tiny):
    _, tokenizer = tiny
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ]
    text = tokenizer.decode(build_prompt_ids(tokenizer, messages, system_prompt="ignored"))
    assert text.count("<|im_start|>system") == 1 and "S<|im_end|>" in text and "ignored" not in text
    assert text.endswith("<|im_start|>user\nc<|im_end|>\n<|im_start|>assistant\n")


def test_left_pad_and_truncate_after_eos():
    ids, mask = left_pad([torch.tensor([5, 6, 7]), torch.tensor([8])], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    # The first EOS (2) is kept, everything after it goes, including a later non-EOS token.
    assert truncate_after_eos(torch.tensor([4, 2, 9, 2]), [2]).tolist() == [4, 2]
    assert truncate_after_eos(torch.tensor([4, 5]), [2]).tolist() == [4, 5]
    assert truncate_after_eos(torch.tensor([3, 4]), [2, 3]).tolist() == [3]


def test_batched_greedy_equals_one_at_a_time(tiny):
    model, tokenizer = tiny
    prompts = ["Hello", "A much longer prompt about a movie that I saw yesterday", "Why?", "Tell me a story"]
    ids = [build_prompt_ids(tokenizer, p) for p in prompts]
    assert len({len(i) for i in ids}) > 1  # really different lengths, so padding happens
    batched = generate_batch(model, tokenizer, ids, GREEDY)
    single = [generate_batch(model, tokenizer, [i], dataclasses.replace(GREEDY, batch_size=1))[0] for i in ids]
    assert [t.tolist() for t in batched] == [t.tolist() for t in single]
    assert all(1 <= len(t) <= GREEDY.max_new_tokens for t in batched)


def test_post_eos_tokens_removed(tiny):
    model, tokenizer = tiny
    eos = tokenizer.eos_token_id
    # Force EOS at step 2 for row 0 by biasing the logits; row 1 never gets EOS.
    original = model.lm_head.forward
    calls = {"n": 0}

    def biased(hidden):
        logits = original(hidden)  # (B, T, V)
        calls["n"] += 1
        logits[:, :, eos] = -1e9
        if calls["n"] == 2:
            logits[0, -1, eos] = 1e9
        return logits

    model.lm_head.forward = biased
    try:
        ids = [build_prompt_ids(tokenizer, "one"), build_prompt_ids(tokenizer, "two")]
        out = generate_batch(model, tokenizer, ids, dataclasses.replace(GREEDY, max_new_tokens=5))
    finally:
        model.lm_head.forward = original
    assert len(out[0]) == 2 and int(out[0][-1]) == eos
    assert len(out[1]) == 5 and eos not in out[1].tolist()
    assert decode_responses(tokenizer, out)[0] == tokenizer.decode(out[0][:1])


def test_sampling_is_seeded_and_leaves_global_rng_alone(tiny):
    model, tokenizer = tiny
    ids = [build_prompt_ids(tokenizer, "Hi")] * 3
    settings = GenerationSettings(max_new_tokens=8, batch_size=3, seed=7)
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    first = generate_batch(model, tokenizer, ids, settings)
    assert torch.equal(torch.rand(1), before)  # global RNG not advanced
    second = generate_batch(model, tokenizer, ids, settings)
    other = generate_batch(model, tokenizer, ids, dataclasses.replace(settings, seed=8))
    assert [t.tolist() for t in first] == [t.tolist() for t in second]
    assert [t.tolist() for t in first] != [t.tolist() for t in other]
    # Rows of one batch are independent samples of the same prompt (a random 49k-vocab model).
    assert len({tuple(t.tolist()) for t in first}) > 1


def test_progress_and_autocast(tiny):
    model, tokenizer = tiny
    ids = [build_prompt_ids(tokenizer, str(n)) for n in range(5)]
    seen = []
    out = generate_batch(
        model, tokenizer, ids, dataclasses.replace(GREEDY, batch_size=2, autocast=True), progress=lambda d, t: seen.append((d, t))
    )
    assert seen == [(2, 5), (4, 5), (5, 5)]
    assert len(out) == 5 and next(model.parameters()).dtype == torch.float32


def test_kl_unsafe_reasons_match_kl_safe():
    assert kl_unsafe_reasons(GenerationSettings()) == [] and GenerationSettings().kl_safe
    for change in [
        {"do_sample": False},
        {"top_k": 50},
        {"top_p": 0.9},
        {"temperature": 0.7},
        {"min_length": 4},
        {"autocast": True},
    ]:
        settings = GenerationSettings(**change)
        reasons = kl_unsafe_reasons(settings)
        assert len(reasons) == 1 and list(change)[0] in reasons[0] and not settings.kl_safe


@pytest.mark.slow
def test_default_model_generates(default_model_dir):
    from rlhf.loading import load_causal_lm, load_tokenizer

    model, tokenizer = load_causal_lm("default"), load_tokenizer("default")
    ids = [build_prompt_ids(tokenizer, "What is the capital of France?")]
    out = generate_batch(model, tokenizer, ids, GenerationSettings(max_new_tokens=8, do_sample=False))
    text = decode_responses(tokenizer, out)[0]
    assert 1 <= len(out[0]) <= 8 and "Paris" in text
