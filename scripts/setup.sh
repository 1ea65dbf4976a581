#!/usr/bin/env bash
# Set up a fresh machine for anb: system packages, a local virtual environment (.venv)
# with the pinned requirements, and anb installed in editable mode. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip 2>/dev/null || true
.venv/bin/python -m pip install --quiet -r requirements.txt
.venv/bin/python -m pip install --quiet --no-deps -e .

# Stage-specific system set-up (apt packages, optional extras), each script idempotent.
for script in scripts/ci/*.sh; do
  [ -e "$script" ] || continue
  echo "setup: $script"
  bash "$script"
done
