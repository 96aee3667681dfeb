"""rlhf/data.py on a character tokenizer (id = code point, BOS 1, EOS 0), so every id is known by hand."""
import pytest
import torch
from datasets import Dataset

from rlhf.data import (
    DataError, PreferenceCollator, RewardCollator, SFTCollator, check_preference_rows, check_sft_rows,
    is_conversational, pack_examples, render_prompt_completion, split_preference, tokenize_for_reward,
    tokenize_preference_causal, tokenize_sft, tokenizer_alias,
)

A, B, C, D, E = (ord(c) for c in "abcde")  # 97..101


class CharTokenizer:
    eos_token_id, sep_token_id, chat_template = 0, None, None

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": ([1] if add_special_tokens else []) + [ord(c) for c in text]}


TOK = CharTokenizer()


def test_rows_conversational_split_and_rendered_without_a_template():
    chosen = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"}]
    rejected = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "no"}]
    row = {"chosen": chosen, "rejected": rejected}
    assert is_conversational(row) and not is_conversational({"prompt": "p", "chosen": "c", "rejected": "r"})
    assert split_preference(row) == (chosen[:1], chosen[1:], rejected[1:])  # the prompt is the shared start
    with pytest.raises(ValueError, match="needs a 'prompt' column"):
        split_preference({"chosen": "c", "rejected": "r"})
    # No chat template (an encoder): a readable transcript of the prompt, the completion's content
    assert render_prompt_completion(TOK, chosen[:1], chosen[1:]) == ("user: hi", "yes")
    assert render_prompt_completion(TOK, "p", "c") == ("p", "c")
    with pytest.raises(ValueError, match="both be strings or both be lists"):
        render_prompt_completion(TOK, "p", chosen[1:])


def test_row_checks_name_row_and_field():
    def problem(rows, check=check_preference_rows):
        with pytest.raises(DataError) as error:
            check(Dataset.from_list(rows))
        return error.value.row, error.value.field, error.value.message

    good = {"prompt": "p", "chosen": "c", "rejected": "r"}
    check_preference_rows(Dataset.from_list([good, {**good, "prompt": ""}]))  # an empty prompt is allowed
    assert problem([{"prompt": "p", "chosen": "c"}])[1:] == ("rejected", "preference data needs columns prompt, "
                                                              "chosen, rejected; got ['chosen', 'prompt']")
    assert problem([good, {**good, "chosen": "  "}]) == (1, "chosen", "is empty")
    assert problem([{**good, "margin": float("nan")}]) == (0, "margin", "must be finite, got nan")
    assert problem([{"text": "t"}, {"text": "  "}], check_sft_rows) == (1, "text", "is empty")
    assert problem([{"other": "x"}], check_sft_rows)[2].startswith("SFT data needs columns prompt+completion")


def test_tokenize_preference_causal_truncation():
    row = {"prompt": "ab", "chosen": "c", "rejected": "de"}
    # prompt: BOS + a b; completions: their characters + EOS
    assert tokenize_preference_causal(row, TOK, None, None) == {
        "prompt_input_ids": [1, A, B], "chosen_input_ids": [C, 0], "rejected_input_ids": [D, E, 0]}
    # the prompt keeps its last 2 tokens; then 4 - 2 = 2 tokens of room for each completion
    assert tokenize_preference_causal(row, TOK, 4, 2) == {
        "prompt_input_ids": [A, B], "chosen_input_ids": [C, 0], "rejected_input_ids": [D, E]}


def test_tokenize_for_reward_keeps_the_end_and_sft_masks_the_prompt():
    assert tokenize_for_reward(TOK, "ab", "c", None) == {"input_ids": [1, A, B, C, 0], "attention_mask": [1] * 5}
    assert tokenize_for_reward(TOK, "ab", "c", 3) == {"input_ids": [B, C, 0], "attention_mask": [1] * 3}
    assert tokenize_sft({"prompt": "ab", "completion": "c"}, TOK, None) == {
        "input_ids": [1, A, B, C, 0], "completion_mask": [0, 0, 0, 1, 1]}
    assert tokenize_sft({"text": "ab"}, TOK, 2) == {"input_ids": [1, A], "completion_mask": [1, 1]}
    packed = pack_examples({"input_ids": [[1, 2, 3], [4, 5]], "completion_mask": [[0, 1, 1], [0, 1]]}, 2)
    assert packed == {"input_ids": [[1, 2], [3, 4], [5]], "completion_mask": [[0, 1], [1, 0], [1]]}


def test_collators_put_chosen_then_rejected_on_dim_0_right_padded():
    examples = [{"prompt_input_ids": [1], "chosen_input_ids": [C], "rejected_input_ids": [D, E], "ref_chosen_logps": -1.0,
                 "ref_rejected_logps": -2.0}]
    batch = PreferenceCollator(pad_token_id=9)(examples)
    assert batch["input_ids"].tolist() == [[1, C, 9], [1, D, E]]  # (2B, T): chosen row, then rejected row
    assert batch["attention_mask"].tolist() == [[1, 1, 0], [1, 1, 1]]
    assert batch["completion_mask"].tolist() == [[0, 1, 0], [0, 1, 1]]
    assert batch["ref_chosen_logps"].tolist() == [-1.0] and batch["ref_rejected_logps"].tolist() == [-2.0]
    reward = RewardCollator(pad_token_id=9)([
        {"input_ids_chosen": [1, A], "attention_mask_chosen": [1, 1], "input_ids_rejected": [1],
         "attention_mask_rejected": [1], "margin": 2}])
    assert reward["input_ids"].tolist() == [[1, A], [1, 9]] and reward["attention_mask"].tolist() == [[1, 1], [1, 0]]
    assert reward["margin"].tolist() == [2.0]
    sft = [{"input_ids": [1, A, B], "completion_mask": [0, 1, 1]}, {"input_ids": [1], "completion_mask": [0]}]
    assert SFTCollator(9)(sft)["labels"].tolist() == [[-100, A, B], [-100, -100, -100]]
    assert SFTCollator(9, completion_only_loss=False)(sft)["labels"].tolist() == [[1, A, B], [1, -100, -100]]
    assert SFTCollator(9)(sft)["input_ids"].dtype == torch.long


def test_tokenizer_alias_takes_the_old_name_once():
    assert tokenizer_alias(TOK, None, "DPOTrainer") is TOK
    with pytest.warns(FutureWarning, match="tokenizer= is deprecated"):
        assert tokenizer_alias(None, TOK, "DPOTrainer") is TOK
    with pytest.raises(ValueError, match="pass the tokenizer once"):
        tokenizer_alias(CharTokenizer(), TOK, "DPOTrainer")
