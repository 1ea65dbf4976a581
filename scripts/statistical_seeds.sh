#!/usr/bin/env bash
# The statistical-band tests (marker `statistical`: coverage and rank-correlation bands of fitted
# models) over several seeds; .ci/run runs them once with seed 0 inside the suite.
#   bash scripts/statistical_seeds.sh [SEED ...]      (default: 1 2 3 4)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 WANDB_MODE=offline
status=0
seeds=("$@")
if [ "${#seeds[@]}" -eq 0 ]; then seeds=(1 2 3 4); fi
for seed in "${seeds[@]}"; do
  echo "== ANB_TEST_SEED=$seed"
  ANB_TEST_SEED="$seed" .venv/bin/python -m pytest -m statistical -q -p no:cacheprovider || status=1
done
exit "$status"
