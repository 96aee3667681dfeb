"""bench/gpu_plan.py makes docs/GPU.md's table of memory and time per step from the app's estimates: the doc holds
what the script makes now, and the script's own pieces hold hand-worked values."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import gpu_plan  # noqa: E402


def test_the_doc_holds_the_table_the_script_makes_now():
    work = gpu_plan.Work()
    table = gpu_plan.markdown(gpu_plan.plan(work), work)
    text = (ROOT / "docs" / "GPU.md").read_text()
    held = text.split(gpu_plan.DOC_START + "\n", 1)[1].split(gpu_plan.DOC_END, 1)[0]
    assert held == table, "docs/GPU.md's table is stale: python bench/gpu_plan.py --doc docs/GPU.md"
    assert "Estimate, not measured." in held


def test_reward_model_drops_an_untied_lm_head_only():
    from rlhf.memory_estimate import ModelShape

    tied = ModelShape(parameters=1000, vocab_size=10, hidden_size=4, intermediate_size=8, layers=1, heads=1,
                      kv_heads=1, tied_embeddings=True)
    untied = ModelShape(parameters=1000, vocab_size=10, hidden_size=4, intermediate_size=8, layers=1, heads=1,
                        kv_heads=1, tied_embeddings=False)
    assert gpu_plan.reward_parameters(tied) == 1000  # the head is the embeddings, which the classifier keeps
    assert gpu_plan.reward_parameters(untied) == 1000 - 10 * 4


def test_inference_memory_is_bf16_weights_kv_cache_and_one_row_of_logits():
    from rlhf.memory_estimate import ModelShape

    shape = ModelShape(parameters=1_000_000, vocab_size=100, hidden_size=64, intermediate_size=128, layers=2,
                       heads=4, kv_heads=2, tied_embeddings=True)
    out = gpu_plan.inference_plan(shape, answers=8, rows=4, answer_tokens=16, prompt_tokens=16)
    # weights 2 x 1e6; KV: 2 (K and V) x 4 rows x 32 tokens x 2 layers x kv width 32 (2 heads x 16) x 2 bytes
    # = 32,768; logits 4 rows x 100 x 4 bytes = 1,600
    assert out["memory"] == 2_000_000 + 32_768 + 1_600


def test_write_doc_replaces_only_between_the_markers(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(f"before\n{gpu_plan.DOC_START}\nold table\n{gpu_plan.DOC_END}\nafter\n")
    gpu_plan.write_doc(doc, "| new |\n")
    assert doc.read_text() == f"before\n{gpu_plan.DOC_START}\n| new |\n{gpu_plan.DOC_END}\nafter\n"
    (tmp_path / "bare.md").write_text("no markers\n")
    with pytest.raises(SystemExit, match="no lines"):
        gpu_plan.write_doc(tmp_path / "bare.md", "| new |\n")
