#!/usr/bin/env bash
# Set up a fresh machine for anb: system packages, a local virtual environment (.venv)
# with the pinned requirements, and anb installed in editable mode. Idempotent.
#
# The first set-up on a machine keeps a copy of the finished environment in
# ~/.cache/anb/venv-base-<key> (key: the Python version, requirements.txt and scripts/ci/*.sh);
# a later clean clone starts its .venv as hard links to that copy (seconds, no disk space)
# instead of unpacking every wheel again (about 4 of the 5 minutes of a set-up on two cores),
# then runs the same installs, which find everything present. ANB_VENV_CACHE=0 builds from
# scratch and keeps no copy.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
key=$( { "$PYTHON" --version; cat requirements.txt scripts/ci/*.sh; } | sha256sum | cut -c1-16)
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/anb/venv-base-$key"
use_cache=${ANB_VENV_CACHE:-1}

if [ ! -x .venv/bin/python ]; then
  if [ "$use_cache" = 1 ] && [ -f "$CACHE/.anb-origin" ] && cp -al "$CACHE" .venv.tmp 2>/dev/null; then
    # Scripts and activate name the environment they were installed in: point them here. sed -i
    # writes a new file, so the cached copy keeps its own.
    origin=$(cat "$CACHE/.anb-origin")
    grep -rlIF "$origin" .venv.tmp/bin | xargs -r sed -i "s|$origin|$PWD/.venv|g"
    rm .venv.tmp/.anb-origin
    mv .venv.tmp .venv
    echo "setup: .venv from the cached environment $CACHE"
  else
    rm -rf .venv.tmp
    "$PYTHON" -m venv .venv
  fi
fi
# Stage-specific system set-up (apt packages, services' accounts) beside the Python installs:
# both are mostly downloads, in one process each, so on a fresh machine they overlap.
mkdir -p build
( for script in scripts/ci/*.sh; do bash "$script" --system; done ) > build/setup_system.log 2>&1 &
system=$!
.venv/bin/python -m pip install --quiet --upgrade pip 2>/dev/null || true
.venv/bin/python -m pip install --quiet -r requirements.txt
wait "$system" || { cat build/setup_system.log; echo "setup: system packages failed"; exit 1; }

# Then what needs both (optional extras built against apt libraries), each script idempotent.
for script in scripts/ci/*.sh; do
  [ -e "$script" ] || continue
  echo "setup: $script"
  bash "$script"
done

# Keep the finished environment (before anb itself goes in) for the next clean clone.
if [ "$use_cache" = 1 ] && [ ! -d "$CACHE" ]; then
  mkdir -p "$(dirname "$CACHE")"
  rm -rf "$CACHE.tmp.$$"
  if cp -al .venv "$CACHE.tmp.$$" 2>/dev/null; then
    echo "$PWD/.venv" > "$CACHE.tmp.$$/.anb-origin"
    mv -T "$CACHE.tmp.$$" "$CACHE" 2>/dev/null || rm -rf "$CACHE.tmp.$$"
  else
    rm -rf "$CACHE.tmp.$$"
  fi
fi
.venv/bin/python -m pip install --quiet --no-deps -e .
