#!/usr/bin/env bash
# Everything needed on a fresh machine, then the whole test suite: bash test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 WANDB_MODE=offline
exec .venv/bin/python -m pytest "$@"
