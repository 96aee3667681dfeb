"""TRL 0.11 users' code runs with only the import changed (`trl` -> `rlhf`), on tiny models, offline.

The two PPO snippets are the seeds' own (TRL's README quick start and the IMDB sentiment notebook), verbatim
except for the import line, the model name ("gpt2" -> a tiny local model), the sentiment pipeline (a word
count stands in for it) and the dataset (a few movie openings instead of IMDB): no network here.
"""
from __future__ import annotations

import importlib.util
import math
import warnings

import pytest
import torch
from datasets import Dataset

# TRL 0.11.4's PPOConfig fields, written out (trl/trainer/ppo_config.py), each with a value a user might pass.
TRL_PPO_CONFIG_FIELDS = {
    "exp_name": "my_exp", "seed": 1, "log_with": None, "task_name": "sentiment", "model_name": "lvwerra/gpt2-imdb",
    "query_dataset": "imdb", "reward_model": "sentiment-analysis:lvwerra/distilbert-imdb",
    "remove_unused_columns": True, "tracker_kwargs": {"wandb": {"entity": "me"}}, "accelerator_kwargs": {},
    "project_kwargs": {"logging_dir": "logs"}, "tracker_project_name": "trl", "push_to_hub_if_best_kwargs": {},
    "steps": 20000, "learning_rate": 1.41e-5, "adap_kl_ctrl": True, "init_kl_coef": 0.2, "kl_penalty": "kl",
    "target": 6.0, "horizon": 10000, "gamma": 1.0, "lam": 0.95, "cliprange": 0.2, "cliprange_value": 0.2,
    "vf_coef": 0.1, "batch_size": 128, "forward_batch_size": None, "mini_batch_size": 128,
    "gradient_accumulation_steps": 1, "world_size": None, "ppo_epochs": 4, "max_grad_norm": None,
    "optimize_cuda_cache": None, "optimize_device_cache": False, "early_stopping": False, "target_kl": 1.0,
    "compare_steps": 1, "ratio_threshold": 10.0, "use_score_scaling": False, "use_score_norm": False,
    "score_clip": None, "whiten_rewards": False, "gradient_checkpointing": False, "is_encoder_decoder": None,
    "is_peft_model": None, "backward_batch_size": None, "global_backward_batch_size": None,
    "global_batch_size": None, "dataset_num_proc": None,
}
# TRL fills this one at runtime from mini_batch_size * gradient_accumulation_steps, whatever was passed; so here.
DERIVED = {"backward_batch_size"}


@pytest.mark.parametrize("name", sorted(TRL_PPO_CONFIG_FIELDS))
def test_every_trl_ppo_config_field_is_accepted(name):
    from rlhf import PPOConfig

    if name in DERIVED:
        assert PPOConfig(batch_size=8, mini_batch_size=2, gradient_accumulation_steps=2,
                         backward_batch_size=TRL_PPO_CONFIG_FIELDS[name]).backward_batch_size == 4
        return
    value = TRL_PPO_CONFIG_FIELDS[name]
    kwargs = {name: value, "batch_size": 128} if name == "mini_batch_size" else {name: value}
    config = PPOConfig(**kwargs)
    if name not in ("forward_batch_size", "optimize_cuda_cache"):  # aliases: resolved, then cleared
        assert getattr(config, name) == value


def test_every_ppo_config_field_has_help():
    import dataclasses

    from rlhf import PPOConfig

    assert all(f.metadata.get("help") for f in dataclasses.fields(PPOConfig))


def test_small_batch_sizes_and_trl_aliases():
    from rlhf import PPOConfig

    assert PPOConfig(**{"batch_size": 1}).mini_batch_size == 1  # the seeds' example, verbatim
    assert PPOConfig(batch_size=8).mini_batch_size == 8
    tuned = PPOConfig()  # the tuned recipe is unchanged
    assert (tuned.batch_size, tuned.mini_batch_size, tuned.ppo_epochs, tuned.learning_rate,
            tuned.advantage_estimator, tuned.target) == (64, 16, 1, 6e-5, "rloo", 9.0)
    with pytest.warns(FutureWarning, match="forward_batch_size is deprecated"):
        aliased = PPOConfig(batch_size=8, forward_batch_size=4)
    assert aliased.mini_batch_size == 4 and aliased.forward_batch_size is None
    with pytest.warns(FutureWarning, match="optimize_cuda_cache"), pytest.warns(UserWarning, match="does not apply"):
        assert PPOConfig(optimize_cuda_cache=True).optimize_device_cache is True
    with pytest.raises(ValueError, match="log_with='comet'"):
        PPOConfig(log_with="comet")


def test_log_with(tmp_path):
    from rlhf import PPOConfig

    assert PPOConfig(log_with="tensorboard", exp_name="imdb").log_dir == "runs/imdb"
    logs = str(tmp_path / "tb")
    assert PPOConfig(log_with="tensorboard", project_kwargs={"logging_dir": logs}).log_dir == logs
    assert PPOConfig(log_with="tensorboard", log_dir="mine").log_dir == "mine"
    config = PPOConfig(model_name="lvwerra/gpt2-imdb", learning_rate=1.41e-5, log_with="wandb")  # never fails here
    if importlib.util.find_spec("wandb") is None:
        with pytest.raises(ImportError, match="pip install wandb"):
            config.check_trackers()
    PPOConfig(log_with="tensorboard").check_trackers()


def test_trl_module_paths():
    from rlhf.core import LengthSampler
    from rlhf.model import AutoModelForCausalLMWithValueHead, create_reference_model
    from rlhf.trainer import PPOConfig, PPOTrainer

    import rlhf

    assert LengthSampler is rlhf.LengthSampler and PPOConfig is rlhf.PPOConfig and PPOTrainer is rlhf.PPOTrainer
    assert AutoModelForCausalLMWithValueHead is rlhf.AutoModelForCausalLMWithValueHead
    assert create_reference_model is rlhf.create_reference_model


def test_readme_quick_start_verbatim(tiny_model_dir):
    """TRL's README example (the seeds' `PPOConfig(**{"batch_size": 1})`), 'gpt2' -> a tiny model."""
    # 0. imports
    import torch
    from transformers import AutoTokenizer

    from rlhf import AutoModelForCausalLMWithValueHead, PPOConfig, PPOTrainer

    # 1. load a pretrained model
    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir)
    model_ref = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.pad_token = tokenizer.eos_token

    # 2. initialize trainer
    ppo_config = {"batch_size": 1}
    config = PPOConfig(**ppo_config)
    ppo_trainer = PPOTrainer(config, model, model_ref, tokenizer)

    # 3. encode a query
    query_txt = "This morning I went to the "
    query_tensor = tokenizer.encode(query_txt, return_tensors="pt").to(model.pretrained_model.device)

    # 4. generate model response
    generation_kwargs = {
        "min_length": -1,
        "top_k": 0.0,
        "top_p": 1.0,
        "do_sample": True,
        "pad_token_id": tokenizer.eos_token_id,
        "max_new_tokens": 20,
    }
    response_tensor = ppo_trainer.generate([item for item in query_tensor], return_prompt=False, **generation_kwargs)
    response_txt = tokenizer.decode(response_tensor[0])

    # 5. define a reward for response
    reward = [torch.tensor(1.0, device=model.pretrained_model.device)]

    # 6. train model with ppo
    ref_before = {n: p.detach().clone() for n, p in model_ref.named_parameters()}
    train_stats = ppo_trainer.step([query_tensor[0]], [response_tensor[0]], reward)

    assert isinstance(response_txt, str) and "objective/kl" in train_stats
    assert all(math.isfinite(v) for v in train_stats.values() if isinstance(v, float))
    # No "parameters changed" check here: under the default RLOO estimator one rollout's whitened advantage is
    # 0, so this one-sample step moves nothing (TRL's GAE whitens over tokens instead). The notebook test does.
    assert all(torch.equal(p, ref_before[n]) for n, p in model_ref.named_parameters())


def test_sentiment_notebook_verbatim(tiny_model_dir):
    """The seeds' IMDB notebook (TRL 0.11 sentiment example): one PPO step over one batch."""
    from transformers import AutoTokenizer

    from rlhf import AutoModelForCausalLMWithValueHead, PPOConfig, PPOTrainer
    from rlhf.core import LengthSampler

    config = PPOConfig(
        model_name="lvwerra/gpt2-imdb",
        learning_rate=1.41e-5,
    )
    config_name = tiny_model_dir  # stands in for config.model_name: no hub here

    def build_dataset(config, input_min_text_length=2, input_max_text_length=8):
        tokenizer = AutoTokenizer.from_pretrained(config_name)
        tokenizer.pad_token = tokenizer.eos_token

        ds = Dataset.from_list([{"review": f"This movie number {i} was a long and winding film about {i} cats."}
                                for i in range(config.batch_size)])  # stands in for load_dataset("imdb")
        ds = ds.filter(lambda x: len(x["review"]) > 20, batched=False)

        input_size = LengthSampler(input_min_text_length, input_max_text_length)

        def tokenize(sample):
            sample["input_ids"] = tokenizer.encode(sample["review"])[:input_size()]
            sample["query"] = tokenizer.decode(sample["input_ids"])
            return sample

        ds = ds.map(tokenize, batched=False)
        ds.set_format(type="torch")
        return ds

    dataset = build_dataset(config)

    def collator(data):
        return dict((key, [d[key] for d in data]) for key in data[0])

    model = AutoModelForCausalLMWithValueHead.from_pretrained(config_name)
    ref_model = AutoModelForCausalLMWithValueHead.from_pretrained(config_name)
    tokenizer = AutoTokenizer.from_pretrained(config_name)
    tokenizer.pad_token = tokenizer.eos_token

    ppo_trainer = PPOTrainer(config, model, ref_model, tokenizer, dataset=dataset, data_collator=collator)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}

    def sentiment_pipe(texts):  # stands in for pipeline("sentiment-analysis", ...)
        return [[{"label": "NEGATIVE", "score": 0.0}, {"label": "POSITIVE", "score": float(len(t.split()))}]
                for t in texts]

    output_length_sampler = LengthSampler(4, 16)
    generation_kwargs = {
        "min_length": -1,
        "top_k": 0.0,
        "top_p": 1.0,
        "do_sample": True,
        "pad_token_id": tokenizer.eos_token_id,
    }
    for epoch, batch in enumerate(ppo_trainer.dataloader):
        query_tensors = batch["input_ids"]

        response_tensors = []
        for query in query_tensors:
            gen_len = output_length_sampler()
            generation_kwargs["max_new_tokens"] = gen_len
            response = ppo_trainer.generate(query, **generation_kwargs)
            response_tensors.append(response.squeeze()[-gen_len:])
        batch["response"] = [tokenizer.decode(r.squeeze()) for r in response_tensors]

        texts = [q + r for q, r in zip(batch["query"], batch["response"])]
        pipe_outputs = sentiment_pipe(texts)
        rewards = [torch.tensor(output[1]["score"]) for output in pipe_outputs]

        stats = ppo_trainer.step(query_tensors, response_tensors, rewards)
        ppo_trainer.log_stats(stats, batch, rewards)
    assert epoch == 0 and ppo_trainer.current_step == 1 and "ppo/loss/total" in stats
    assert any(not torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_trainers_take_trl_tokenizer_and_data_collator(tiny_model_dir, tiny_encoder_dir, tmp_path):
    from transformers import AutoTokenizer

    from rlhf import DPOConfig, DPOTrainer, RewardConfig, RewardTrainer, SFTConfig, SFTTrainer
    from rlhf.data import PreferenceCollator, RewardCollator
    from rlhf.loading import load_causal_lm

    common = dict(output_dir=str(tmp_path), save_strategy="no", disable_tqdm=True, max_steps=1,
                  per_device_train_batch_size=2, report_to="none")
    pairs = Dataset.from_list([{"prompt": "The film", "chosen": " was great", "rejected": " was awful"}] * 2)

    encoder_tokenizer = AutoTokenizer.from_pretrained(tiny_encoder_dir)
    from transformers import AutoModelForSequenceClassification

    encoder = AutoModelForSequenceClassification.from_pretrained(tiny_encoder_dir, num_labels=1)
    collator = RewardCollator(encoder_tokenizer.pad_token_id)
    with pytest.warns(FutureWarning, match="tokenizer= is deprecated"):
        reward = RewardTrainer(encoder, args=RewardConfig(**common), train_dataset=pairs,
                               tokenizer=encoder_tokenizer, data_collator=collator)
    assert reward.processing_class is encoder_tokenizer and reward.data_collator is collator
    with pytest.raises(ValueError, match="pass the tokenizer once"):
        RewardTrainer(encoder, args=RewardConfig(**common), train_dataset=pairs, tokenizer=encoder_tokenizer,
                      processing_class=AutoTokenizer.from_pretrained(tiny_encoder_dir))

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    dpo_collator = PreferenceCollator(tokenizer.pad_token_id)
    with pytest.warns(FutureWarning, match="tokenizer= is deprecated"):
        dpo = DPOTrainer(load_causal_lm(tiny_model_dir), args=DPOConfig(**common), train_dataset=pairs,
                         tokenizer=tokenizer, data_collator=dpo_collator, compute_metrics=len)
    assert dpo.processing_class is tokenizer and dpo.data_collator is dpo_collator and dpo.compute_metrics is len

    # SFT: TRL 0.11's batched formatting_func, and a per-row one, and dataset_text_field
    qa = Dataset.from_list([{"instruction": "Say hi.", "output": "Hi!"}, {"instruction": "Say no.", "output": "No."}])

    def formatting_prompts_func(example):  # as in TRL 0.11's docs
        output_texts = []
        for i in range(len(example["instruction"])):
            output_texts.append(f"### Question: {example['instruction'][i]}\n ### Answer: {example['output'][i]}")
        return output_texts

    from rlhf.sft import text_rows

    expected = ["### Question: Say hi.\n ### Answer: Hi!", "### Question: Say no.\n ### Answer: No."]
    assert text_rows(qa, formatting_prompts_func)["text"] == expected
    per_row = text_rows(qa, lambda row: f"### Question: {row['instruction']}\n ### Answer: {row['output']}")
    assert per_row["text"] == expected
    assert text_rows(qa, text_field="output").column_names == ["text"]
    with pytest.raises(ValueError, match="dataset_text_field='body'"):
        text_rows(qa, text_field="body")

    model = load_causal_lm(tiny_model_dir)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        sft = SFTTrainer(model, args=SFTConfig(**common, learning_rate=1e-2), train_dataset=qa, tokenizer=tokenizer,
                         formatting_func=formatting_prompts_func)
    sft.train()
    assert any(not torch.equal(p, before[n]) for n, p in model.named_parameters())
    sft_text = SFTTrainer(load_causal_lm(tiny_model_dir), args=SFTConfig(**common, dataset_text_field="output"),
                          train_dataset=qa, processing_class=tokenizer)
    assert sft_text.train_dataset[0]["input_ids"][:-1] == tokenizer("Hi!")["input_ids"]


def test_best_of_n_takes_a_generation_config(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from rlhf import BestOfNSampler
    from rlhf.core import LengthSampler

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    gen_config = GenerationConfig(min_length=-1, top_k=0.0, top_p=1.0, do_sample=True,
                                  pad_token_id=tokenizer.eos_token_id, max_new_tokens=3, temperature=0.7)
    sampler = BestOfNSampler(model, tokenizer, lambda texts: [len(t) for t in texts],
                             length_sampler=LengthSampler(2, 4), sample_size=3, generation_config=gen_config)
    assert (sampler.settings.temperature, sampler.settings.top_k, sampler.settings.max_new_tokens) == (0.7, 0, 3)
    query = tokenizer("The film", return_tensors="pt").input_ids[0]
    best = sampler.generate([query], device="cpu", max_new_tokens=2)
    assert len(best) == 1 and len(best[0]) == 1 and best[0][0].startswith("The film")


def test_online_dpo_quick_start_with_only_the_import_changed(tiny_model_dir, tmp_path, monkeypatch):
    """TRL's online DPO quick start (docs: online_dpo_trainer) and its judges page's PrefersShorterJudge, `from trl`
    -> `from rlhf`. PairRMJudge (the llm-blender package, a hub model) is replaced by the docs' own custom judge, the
    hub model and dataset by a tiny local model and prompts, and the config made small enough for a test."""
    monkeypatch.chdir(tmp_path)
    model_name = str(tiny_model_dir)  # stands in for "Qwen/Qwen2-0.5B-Instruct"
    train_dataset = Dataset.from_dict({"prompt": ["The movie was", "My review:", "In short,", "I watched"] * 2})
    # --- the script ---
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlhf import BasePairwiseJudge, OnlineDPOConfig, OnlineDPOTrainer

    class PrefersShorterJudge(BasePairwiseJudge):
        def judge(self, prompts, completions, shuffle_order=False):
            return [0 if len(completion[0]) > len(completion[1]) else 1 for completion in completions]

    model = AutoModelForCausalLM.from_pretrained(model_name)
    tokenizer = AutoTokenizer.from_pretrained(model_name)
    judge = PrefersShorterJudge()

    training_args = OnlineDPOConfig(output_dir="Qwen2-0.5B-OnlineDPO", logging_steps=1, max_steps=2,
                                    max_new_tokens=8, report_to="none")
    trainer = OnlineDPOTrainer(
        model=model, judge=judge, args=training_args, processing_class=tokenizer, train_dataset=train_dataset
    )
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()
    # --- end ---
    trainer.save_model()
    assert (tmp_path / "Qwen2-0.5B-OnlineDPO" / "model.safetensors").exists()
    assert trainer.state.global_step == 2 and "rewards/margins" in trainer.state.log_history[0]
    assert any(not torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_online_dpo_with_a_reward_model_as_trl_0_12_wrote_it(tiny_model_dir, tiny_encoder_dir, tmp_path, monkeypatch):
    """TRL 0.12's release note: any reward model, with its own tokenizer (reward_processing_class)."""
    monkeypatch.chdir(tmp_path)
    model_name, reward_model_name = str(tiny_model_dir), str(tiny_encoder_dir)
    dataset = {"train": Dataset.from_dict({"prompt": ["The movie was", "My review:"] * 2})}
    # --- the script ---
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    from rlhf import OnlineDPOConfig, OnlineDPOTrainer

    model = AutoModelForCausalLM.from_pretrained(model_name)
    tokenizer = AutoTokenizer.from_pretrained(model_name, padding_side="left")
    reward_model = AutoModelForSequenceClassification.from_pretrained(reward_model_name, num_labels=1)
    reward_tokenizer = AutoTokenizer.from_pretrained(reward_model_name, truncation=True, truncation_side="left")
    training_args = OnlineDPOConfig(output_dir="online-dpo", max_steps=1, max_new_tokens=4, report_to="none")
    trainer = OnlineDPOTrainer(
        model=model,
        reward_model=reward_model,
        args=training_args,
        train_dataset=dataset["train"],
        processing_class=tokenizer,
        reward_processing_class=reward_tokenizer,
    )
    trainer.train()
    # --- end ---
    assert trainer.state.global_step == 1 and trainer.judge.tokenizer is reward_tokenizer
