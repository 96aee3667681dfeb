"""Make tests/fixtures/trl_0_11_4/ with the real TRL 0.11.4, once, in its own virtual environment.

    python3 -m venv /tmp/trlvenv
    /tmp/trlvenv/bin/pip install torch==2.13.0 trl==0.11.4 transformers==4.46.3 rich
    OMP_NUM_THREADS=1 /tmp/trlvenv/bin/python scripts/make_trl_fixture.py

Writes a tiny random Llama (vocab 64, hidden 16, 2 layers) wrapped in TRL's AutoModelForCausalLMWithValueHead,
with the value head set to known values, saved by TRL itself (`policy/`: the head's v_head.summary.* keys inside
model.safetensors, TRL's layout); a second random Llama as PPO's reference (`ref/`); and `reference.json`: TRL's
logits and values on fixed input ids, the stats of one TRL PPOTrainer.step on fixed queries/responses/scores,
and the logits and values after that step. tests/rlhf/test_trl_fixture.py loads the folders with this library
and compares; it needs only the committed files, not TRL. The whole fixture is ~100 KB.

The other direction, a folder saved by this library loaded by TRL 0.11.4 (run with this repository's python, then
with the TRL venv's):

    python3 -c "from rlhf.model import AutoModelForCausalLMWithValueHead as M; \
        M.from_pretrained('tests/fixtures/trl_0_11_4/policy').save_pretrained('/tmp/ours')"
    /tmp/trlvenv/bin/python scripts/make_trl_fixture.py --check /tmp/ours

This library does not import TRL anywhere; this script is the only place TRL runs, and it is not a dependency.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "trl_0_11_4"
VOCAB = 64
# Input ids for the forward-pass reference; two rows, no padding.
INPUT_IDS = [[1, 5, 9, 13, 17, 21, 25, 29], [1, 40, 41, 42, 43, 44, 45, 46]]
# One PPO batch of 4: queries of different lengths (TRL pads on the right inside step()), responses too.
QUERIES = [[1, 10, 11, 12], [1, 20, 21], [1, 30, 31, 32, 33], [1, 50, 51, 52]]
RESPONSES = [[7, 8, 9, 2], [17, 18, 19, 20, 2], [27, 28, 2], [37, 38, 39, 40]]
SCORES = [1.0, -0.5, 0.25, 2.0]
# PPO settings given to TRL's PPOConfig; the test passes the same to ours (plus advantage_estimator="gae").
PPO_SETTINGS = dict(batch_size=4, mini_batch_size=4, gradient_accumulation_steps=1, ppo_epochs=1,
                    learning_rate=1e-3, init_kl_coef=0.2, adap_kl_ctrl=False, kl_penalty="kl", gamma=1.0,
                    lam=0.95, cliprange=0.2, cliprange_value=0.2, vf_coef=0.1, whiten_rewards=False, seed=0)
# TRL 0.11 step() stats the test compares (all computed from the policy before its update, or the update's
# first and only mini-batch, whose forward pass also runs at the old weights).
STAT_KEYS = [
    "objective/kl", "objective/kl_coef", "objective/entropy", "objective/logprobs", "objective/ref_logprobs",
    "ppo/mean_scores", "ppo/mean_non_score_reward", "ppo/loss/policy", "ppo/loss/value", "ppo/loss/total",
    "ppo/policy/entropy", "ppo/policy/approxkl", "ppo/policy/policykl", "ppo/policy/clipfrac",
    "ppo/policy/advantages_mean", "ppo/returns/mean", "ppo/returns/var", "ppo/val/vpred", "ppo/val/error",
    "ppo/val/clipfrac", "ppo/val/mean", "ppo/val/var",
]


def tokenizer():
    """A word-level tokenizer over VOCAB ids ('<pad>', '<s>', '</s>', 't3'...): TRL's step pads with it."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


def llama(seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # the default init (std 0.02) gives near-uniform logits; widen it so KL is not ~0
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(10.0)
    return model


def forward(model, ids: torch.Tensor) -> dict:
    model.eval()
    with torch.no_grad():
        logits, _, values = model(input_ids=ids)
    return {"logits": logits.tolist(), "values": values.tolist()}


def check(folder: str) -> int:
    """Load a folder saved by this library with TRL 0.11.4: its value head and outputs must be the fixture's."""
    from trl import AutoModelForCausalLMWithValueHead

    record = json.loads((OUT / "reference.json").read_text())
    model = AutoModelForCausalLMWithValueHead.from_pretrained(folder, summary_dropout_prob=0.0)
    got = forward(model, torch.tensor(record["input_ids"]))
    for key in ("logits", "values"):
        torch.testing.assert_close(torch.tensor(got[key]), torch.tensor(record["before"][key]), atol=1e-5, rtol=1e-5)
    print(f"TRL 0.11.4 loads {folder}: value head and logits match the fixture")
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--check"]:
        return check(sys.argv[2])
    import transformers
    import trl
    from trl import AutoModelForCausalLMWithValueHead, PPOConfig, PPOTrainer

    if trl.__version__ != "0.11.4":
        print(f"needs trl 0.11.4, found {trl.__version__}", file=sys.stderr)
        return 1
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    tok = tokenizer()

    # summary_dropout_prob=0: TRL's default dropout (0.1) would make the step's values random.
    policy = AutoModelForCausalLMWithValueHead.from_pretrained(llama(0), summary_dropout_prob=0.0)
    with torch.no_grad():  # known values: weight[i] = (i - 7.5) / 16, bias 0.25
        policy.v_head.summary.weight.copy_((torch.arange(16, dtype=torch.float32) - 7.5)[None] / 16)
        policy.v_head.summary.bias.fill_(0.25)
    policy.save_pretrained(OUT / "policy")  # TRL's own layout: v_head.summary.* inside model.safetensors
    tok.save_pretrained(OUT / "policy")
    reference = AutoModelForCausalLMWithValueHead.from_pretrained(llama(1), summary_dropout_prob=0.0)
    reference.save_pretrained(OUT / "ref")

    ids = torch.tensor(INPUT_IDS)
    record = {
        "versions": {"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__},
        "input_ids": INPUT_IDS,
        "v_head": {"weight": policy.v_head.summary.weight.tolist(), "bias": policy.v_head.summary.bias.tolist()},
        "before": forward(policy, ids),
        "ref_before": forward(reference, ids),
        "ppo": {"settings": PPO_SETTINGS, "queries": QUERIES, "responses": RESPONSES, "scores": SCORES},
    }

    np.random.seed(0)  # TRL shuffles mini-batch indices with numpy's global RNG
    trainer = PPOTrainer(PPOConfig(**PPO_SETTINGS), policy, reference, tok)
    stats = trainer.step([torch.tensor(q) for q in QUERIES], [torch.tensor(r) for r in RESPONSES],
                         [torch.tensor(s) for s in SCORES])
    record["ppo"]["stats"] = {k: float(np.asarray(stats[k]).mean()) for k in STAT_KEYS}
    record["after"] = forward(trainer.accelerator.unwrap_model(trainer.model), ids)

    (OUT / "reference.json").write_text(json.dumps(record) + "\n")
    size = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"wrote {OUT} ({size / 1024:.0f} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
