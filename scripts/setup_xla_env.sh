#!/usr/bin/env bash
# Build the torch-xla environment (torch 2.9.1 + torch-xla 2.9.0) and, with --test, run the TPU
# back-end's tests in it on the XLA CPU device (PJRT_DEVICE=CPU).
#
#   scripts/setup_xla_env.sh            # create/refresh $XLA_VENV (default ~/.cache/anb/venv-xla)
#   scripts/setup_xla_env.sh --test     # ... then run tests/test_throughput_tpu.py in it
#   (tests/test_xla_env.py runs them from the main suite)
#
# torch-xla X.Y needs torch X.Y exactly; on x86_64 PyPI's torch 2.9.1 is a CUDA build (~7 GB in the
# venv, ~4 GB download). The venv lives in the user's cache, outside any clone, so every clone
# on the machine reuses it (anb itself is not installed there: the tests run it from the clone's
# PYTHONPATH); a build in progress holds $VENV.lock. ANB_SKIP_XLA=1 skips building and the tests.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${XLA_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/anb/venv-xla}"
PY="${PYTHON:-python3}"
TORCH_VERSION="${XLA_TORCH_VERSION:-2.9.1}"
XLA_VERSION="${XLA_VERSION:-2.9.0}"

mkdir -p "$(dirname "$VENV")"
exec 9> "$VENV.lock"
flock 9
if [[ ! -x "$VENV/bin/python" ]]; then
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import torch_xla, torch; assert torch.__version__.startswith('${TORCH_VERSION}')" 2>/dev/null; then
  # The machine-wide pip constraint (torch<=2.14.1) admits 2.9.1, so no override is needed.
  "$VENV/bin/pip" install --quiet --upgrade pip
  "$VENV/bin/pip" install --quiet "torch==${TORCH_VERSION}" "torch-xla==${XLA_VERSION}"
  "$VENV/bin/pip" install --quiet numpy pandas pyarrow typer rich tqdm onnx onnxruntime pytest pytest-timeout
fi
"$VENV/bin/python" -c "import torch, torch_xla; print('torch', torch.__version__, 'torch_xla', torch_xla.__version__)"

if [[ "${1:-}" == "--test" ]]; then
  cd "$ROOT"
  PYTHONPATH="$ROOT" PJRT_DEVICE=CPU OMP_NUM_THREADS=1 "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
    tests/test_throughput_tpu.py
fi
