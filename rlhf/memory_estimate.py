"""How much memory a training run will need, from the model's shape (parameter count, vocabulary, width, depth)
and the run's (rows and tokens per mini-batch, precision, LoRA, reference copy, gradient checkpointing), before
any weight is loaded: the arithmetic of accelerate's `estimate-memory` (weights, gradients, Adam's two states)
plus what mixed precision adds and the activations and logits that dominate RL fine-tuning at long answers and large
vocabularies.

Precision's own costs: under 16-bit autocast every fp32 weight that trains gets a 16-bit copy (autocast caches the
cast of a leaf that requires grad for the whole forward, and the backward keeps it): 2 bytes per trained weight. A
frozen reference copied from the policy keeps its matmul weights in bf16 when the run computes in bf16
(rlhf/precision.py reference_dtype; its embeddings and norms stay as loaded), else the policy's dtype. QLoRA quantises
the linear layers to NF4 (4 bits and its double-quantised scales, ~0.52 bytes a weight) while peft's
prepare_model_for_kbit_training casts the rest, the embeddings, the LM head and the norms, to fp32: for Llama-3-8B's
untied 128k-token vocabulary that is 4.2 GB of fp32 beside 3.6 GB of NF4, not 8B x 0.5 bytes; its fp32 LM head also gets
a 16-bit autocast copy.

Activation bytes per token and layer are those a Llama-style block keeps for backward under autocast (residual
stream in fp32, projections in the compute dtype): about 30 h + 8 i bytes in bf16 (h: hidden size, i: MLP width)
and 28 h + 16 i in fp32; eager attention (the CPU's lean_eager) also keeps the scores and probabilities, 2 x heads
x length values per token. With gradient checkpointing a layer keeps only its fp32 input (4 h) and one layer's
activations exist at a time, in the recomputation. The log-probs of the taken tokens keep the logits and, in
backward, their gradient (rlhf/core.py selective_log_softmax), and the LM head's backward one more copy: 3 x
tokens x vocabulary x compute bytes. A no-grad pass (PPO's rollouts, GRPO's old and reference log-probs) keeps no
KV cache and no hidden states but the last (use_cache=False; rlhf/value_head.py last_hidden_state), so what it holds
is the policy's and the reference's logits of a chunk.

Checked against the measured peak of PPO steps on CPU (tests/rlhf/test_memory_estimate.py, bench/memory_at_scale.py):
within 15% for a small Llama (bf16 and fp32, with and without checkpointing), the 135M default model and a random
Qwen2.5-1.5B-shape model with LoRA. Not included: the runtime's own memory (CUDA context and kernels, about 0.5 GiB
on a GPU; torch's libraries on a CPU).
"""
from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3
# Bytes per weight of NF4 with double quantisation (Dettmers et al. 2023): 4 bits, plus an fp8 scale per 64 weights
# and an fp32 scale per 256 of those: 0.5 + 1/64 + 4/(64*256) = 0.516.
NF4_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)
# Copies of the (rows, answer, vocabulary) logits alive at a training step's peak: the logits selective_log_softmax
# keeps, their gradient, and one more measured in the LM head's backward (tests/rlhf/test_memory_estimate.py).
LOGIT_COPIES = 3


@dataclass(frozen=True)
class ModelShape:
    parameters: int
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    layers: int
    heads: int
    kv_heads: int
    tied_embeddings: bool = True  # one (vocabulary, hidden) matrix for the input embeddings and the LM head

    @property
    def kv_width(self) -> int:
        return self.kv_heads * (self.hidden_size // self.heads)

    @property
    def head_parameters(self) -> int:
        """The LM head's weights: vocabulary x hidden (the embeddings' own matrix when tied)."""
        return self.vocab_size * self.hidden_size

    @property
    def unquantized_parameters(self) -> int:
        """What a 4-bit load leaves unquantised, and QLoRA keeps in fp32: embeddings, LM head (once when tied) and the
        norms (two per block and the final one)."""
        matrices = 1 if self.tied_embeddings or not self.vocab_size else 2
        return matrices * self.vocab_size * self.hidden_size + (2 * self.layers + 1) * self.hidden_size

    def lora_parameters(self, r: int) -> int:
        """LoRA's A and B matrices on every linear of every block: r x (in + out) each."""
        h, i, kv = self.hidden_size, self.intermediate_size, self.kv_width
        in_plus_out = (h + h) + 2 * (h + kv) + (h + h) + 2 * (h + i) + (i + h)
        return r * in_plus_out * self.layers


@dataclass(frozen=True)
class TrainShape:
    """What one optimizer step of the run holds. rows: sequences per forward/backward (DPO: 2 per pair); tokens:
    per sequence; logit_tokens: positions per sequence through the LM head (the answer for PPO/GRPO, 0 for a reward
    model); no_grad_rows: rows per no-grad pass (0: none); generation_rows: answers generated at once."""

    rows: int
    tokens: int
    logit_tokens: int
    lora_r: int = 0  # 0: full fine-tuning
    load_bytes: float = 4.0  # bytes per weight as loaded: 4 fp32 (full fine-tuning), 2 bf16 (LoRA's base)
    compute_bytes: int = 2  # 2 under bf16/fp16 autocast, 4 in fp32
    reference: bool = False  # a frozen copy of the weights is held (PPO, GRPO beta > 0, DPO, KTO without LoRA)
    reference_bytes: float | None = None  # bytes per weight of that copy (None: load_bytes; 2 for PPO/GRPO in bf16)
    quantized_4bit: bool = False  # QLoRA: linear layers in NF4, embeddings, LM head and norms in fp32
    gradient_checkpointing: bool = False
    eager_attention: bool = False  # the attention scores are kept (eager / lean_eager; not SDPA or FlashAttention)
    no_grad_rows: int = 0
    generation_rows: int = 0


@dataclass(frozen=True)
class MemoryEstimate:
    weights: float
    gradients: float
    optimizer: float
    reference: float
    activations: float  # the larger of a training mini-batch's and a no-grad pass's / generation's
    autocast_copies: float = 0.0  # 16-bit copies of fp32 weights that autocast keeps for a forward and its backward
    reward_models: float = 0.0  # the reward models a policy run scores with (reward=rm/mix), resident beside it

    @property
    def total(self) -> float:
        return (self.weights + self.gradients + self.optimizer + self.reference + self.autocast_copies
                + self.activations + self.reward_models)

    def summary(self) -> str:
        parts = [("weights", self.weights), ("gradients", self.gradients), ("Adam", self.optimizer),
                 ("reference", self.reference), ("autocast copies", self.autocast_copies),
                 ("activations and logits", self.activations), ("reward models", self.reward_models)]
        listed = ", ".join(f"{name} {value / GIB:.2f}" for name, value in parts if value)
        return f"{self.total / GIB:.1f} GiB ({listed})"


def layer_activation_bytes(shape: ModelShape, compute_bytes: int) -> float:
    """Bytes one block keeps per token for backward (the module docstring's counts)."""
    h, i = shape.hidden_size, shape.intermediate_size
    return 30 * h + 8 * i if compute_bytes == 2 else 28 * h + 16 * i


def loaded_weight_bytes(shape: ModelShape, run: TrainShape) -> float:
    """The base model's weights as loaded: NF4 linears and fp32 rest under QLoRA, else load_bytes each."""
    if run.quantized_4bit:
        kept = shape.unquantized_parameters
        return (shape.parameters - kept) * NF4_BYTES + kept * 4.0
    return shape.parameters * run.load_bytes


def autocast_copy_bytes(shape: ModelShape, run: TrainShape, trainable: int) -> float:
    """16-bit copies autocast makes of fp32 weights and keeps until the backward: every trained fp32 weight (the
    whole model in full fine-tuning, the adapters in LoRA) and, under QLoRA, the fp32 LM head."""
    if run.compute_bytes != 2:
        return 0.0
    trained_fp32 = trainable if (run.lora_r or run.load_bytes == 4) else 0
    head = shape.head_parameters if run.quantized_4bit else 0
    return (trained_fp32 + head) * 2.0


def reference_weight_bytes(shape: ModelShape, run: TrainShape) -> float:
    """The frozen reference's weights: a copy cast to `reference_bytes` casts only its matmul weights
    (rlhf/precision.copy_in_dtype); the embeddings (with a head tied to them) and the norms keep load_bytes."""
    each = run.load_bytes if run.reference_bytes is None else run.reference_bytes
    if each == run.load_bytes:
        return shape.parameters * each
    kept = shape.unquantized_parameters - (0 if shape.tied_embeddings else shape.head_parameters)
    return (shape.parameters - kept) * each + kept * run.load_bytes


def estimate_training_memory(shape: ModelShape, run: TrainShape) -> MemoryEstimate:
    full = run.lora_r == 0
    trainable = shape.parameters if full else shape.lora_parameters(run.lora_r)
    weights = loaded_weight_bytes(shape, run) + (0 if full else trainable * 4.0)  # LoRA adapters in fp32
    gradients = trainable * (run.load_bytes if full else 4.0)
    optimizer = trainable * 8.0  # Adam's first and second moments, fp32
    reference = reference_weight_bytes(shape, run) if run.reference and full else 0.0
    autocast = autocast_copy_bytes(shape, run, trainable)

    tokens = run.rows * run.tokens
    per_layer = layer_activation_bytes(shape, run.compute_bytes)
    if run.eager_attention:
        per_layer += 2 * shape.heads * run.tokens * run.compute_bytes  # scores and probabilities, per token
    if run.gradient_checkpointing:
        blocks = tokens * (4 * shape.hidden_size * shape.layers + per_layer)
    else:
        blocks = tokens * per_layer * shape.layers
    logits = LOGIT_COPIES * run.rows * run.logit_tokens * shape.vocab_size * run.compute_bytes
    training = blocks + logits
    no_grad = 2 * run.no_grad_rows * run.logit_tokens * shape.vocab_size * run.compute_bytes  # policy + reference
    kv_cache = 2 * run.generation_rows * run.tokens * shape.layers * shape.kv_width * run.compute_bytes
    return MemoryEstimate(weights, gradients, optimizer, reference, max(training, no_grad, kv_cache), autocast)


def model_shape(name_or_path: str) -> ModelShape:
    """The shape of a causal LM (or sequence classifier) from its config.json alone: the parameters are counted
    on the meta device (no weights read or allocated)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    from rlhf.loading import resolve_model_path

    config = AutoConfig.from_pretrained(resolve_model_path(name_or_path))
    causal = any(a.endswith("ForCausalLM") for a in (config.architectures or [])) or not config.architectures
    with torch.device("meta"):
        model = (AutoModelForCausalLM if causal else AutoModelForSequenceClassification).from_config(config)
    parameters = sum(p.numel() for p in model.parameters())  # tied weights are one parameter: counted once
    return shape_of_config(config, parameters, causal)


def shape_of_config(config, parameters: int, causal: bool = True) -> ModelShape:
    """The ModelShape of a transformers config whose model has `parameters` weights."""
    text = config.get_text_config()
    heads = getattr(text, "num_attention_heads", 1)
    return ModelShape(parameters=parameters, vocab_size=text.vocab_size if causal else 0, hidden_size=text.hidden_size,
                      intermediate_size=getattr(text, "intermediate_size", 4 * text.hidden_size),
                      layers=text.num_hidden_layers, heads=heads,
                      kv_heads=getattr(text, "num_key_value_heads", None) or heads,
                      tied_embeddings=bool(getattr(config, "tie_word_embeddings", True)))
