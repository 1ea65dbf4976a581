#!/usr/bin/env bash
# The supported range, tested (noxfile.py): the wheel at the dependency floors on Python 3.10
# and at the newest releases on Python 3.13, each answer held to the pinned environment's at
# 1e-6 relative. Environments live in the user's cache (~/.cache/anb/nox) and are reused by a
# later run of any clone on this machine (ANB_SKIP_MATRIX=1 skips the whole check).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${ANB_SKIP_MATRIX:-0}" = 1 ]; then echo "version matrix: skipped (ANB_SKIP_MATRIX=1)"; exit 0; fi
for v in 3.10 3.13; do  # pyenv's interpreters, where the image has them
  for dir in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin; do
    [ -x "$dir/python$v" ] && PATH="$dir:$PATH"
  done
done
export PATH OMP_NUM_THREADS=1
answers=build/answers
rm -rf "$answers" && mkdir -p "$answers"
envdir="${XDG_CACHE_HOME:-$HOME/.cache}/anb/nox"
mkdir -p "$envdir"
exec 9> "$envdir.lock"
flock 9  # one run at a time per machine
.venv/bin/nox -r --envdir "$envdir"
.venv/bin/python scripts/query_answers.py "$answers/pinned-native.json" --fit --optuna --syne-tune
.venv/bin/python scripts/query_answers.py "$answers/pinned-tables.json" --tables --optuna --syne-tune
.venv/bin/python scripts/compare_answers.py "$answers/pinned-native.json" \
  "$answers/pinned-tables.json" "$answers"/query_*.json "$answers"/syne_tune_*.json \
  "$answers"/fit_*.json
