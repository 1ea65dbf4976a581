#!/usr/bin/env bash
# CI step for the throughput stage's TPU back-end: build the torch-xla environment
# (torch 2.9.1 + torch-xla 2.9.0 under build/venv-xla; ~4 GB download, ~3.5 min here) and run
# tests/test_throughput_tpu.py in it on the XLA CPU client (PJRT_DEVICE=CPU, ~1 min).
# The rest of the stage's tests run in the main environment with the other tests.
# Set ANB_SKIP_XLA=1 to skip (e.g. when the CI machine has no room for the CUDA build of torch).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [[ "${ANB_SKIP_XLA:-0}" == "1" ]]; then
  echo "throughput.sh: ANB_SKIP_XLA=1, skipping the torch-xla tests"
  exit 0
fi
exec "$ROOT/scripts/setup_xla_env.sh" --test
