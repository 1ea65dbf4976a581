#!/usr/bin/env bash
# Everything needed on a fresh machine, then the whole test suite: bash test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
# The TPU back-end's tests need their own torch-xla environment (build/venv-xla, ~4 GB download
# once); tests/test_xla_env.py runs them there. ANB_SKIP_XLA=1 skips both.
[ "${ANB_SKIP_XLA:-0}" = 1 ] || bash scripts/setup_xla_env.sh
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 WANDB_MODE=offline
exec .venv/bin/python -m pytest "$@"
