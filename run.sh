#!/usr/bin/env bash
# Everything needed on a fresh machine, then the main job on its embedded defaults:
#   bash run.sh [anb pipeline options]      (results land in outputs/pipeline/)
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
exec .venv/bin/anb pipeline "$@"
