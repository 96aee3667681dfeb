#!/usr/bin/env bash
# The whole loop the app runs (project, import, generate, people ranking through the web API, train rm, PPO with
# reward=rm and with people, DPO, evaluation, chat), each stage in its own processes, on a random model of a given
# shape: per stage wall time, peak memory, the app's memory estimate and bytes written (bench/gpu_check.py).
# Run from anywhere:
#
#   bash bench/gpu_check.sh --device cpu --shape tiny     # smoke run (tests/bench/test_gpu_check.py)
#   bash bench/gpu_check.sh --device cpu --shape 1.5b     # Qwen2.5-1.5B's shape on this CPU (~15 min on 2 cores)
#   bash bench/gpu_check.sh --shape 1.5b                  # on the GPU when there is one
#
# It writes gpu_check.md (the table) and gpu_check.json in the current folder (--markdown/--json to change).
# It exits non-zero when a stage failed. bench/trainer_check.py times the trainers alone, without the app.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
exec python3 "$ROOT/bench/gpu_check.py" "$@"
