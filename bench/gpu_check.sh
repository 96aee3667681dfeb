#!/usr/bin/env bash
# The whole loop on one GPU: generate, reward model, PPO, GRPO, DPO and chat, for the embedded model and for a
# random model of Qwen2.5-1.5B's shape (no download), printing time and peak GPU memory per stage
# (bench/gpu_check.py). Run from the repository root on the GPU machine:
#
#   bash bench/gpu_check.sh                 # full fine-tuning, bf16 autocast, fp32 master weights
#   bash bench/gpu_check.sh --lora          # LoRA adapters instead
#   bash bench/gpu_check.sh --tiny --device cpu   # the CPU check the tests run (tiny sizes)
#
# It writes gpu_check.json beside the printed table. It exits non-zero when a stage failed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
python3 bench/gpu_check.py --json gpu_check.json "$@"
