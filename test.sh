#!/usr/bin/env bash
# Everything needed on a fresh machine, then the whole test suite: bash test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")"
# ANB_SKIP_SETUP=1: the environment is set up already (.ci/run has just run scripts/setup.sh,
# whose pip resolves every requirement again even when nothing is missing).
if [ "${ANB_SKIP_SETUP:-0}" != 1 ]; then bash scripts/setup.sh; fi
# The TPU back-end's tests need their own torch-xla environment (~/.cache/anb/venv-xla, reused
# by every clone); tests/test_xla_env.py runs them there. It builds in the background, started
# here unless .ci/run started it before its set-up; ANB_SKIP_XLA=1 skips both.
source scripts/xla_env_background.sh
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 WANDB_MODE=offline
# One pytest worker per core (pytest-xdist), each test file whole on one worker so that its
# module fixtures are built once; ANB_TEST_WORKERS=0 runs in this process. Every test pins
# one thread, so two workers on two cores take about 16 instead of 31 minutes.
workers="${ANB_TEST_WORKERS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}"  # nproc obeys both
parallel=()
if [ "$workers" -gt 1 ]; then parallel=(-n "$workers" --dist loadfile); fi
exec .venv/bin/python -m pytest "${parallel[@]}" "$@"
