#!/usr/bin/env bash
# Commit subjects stay under 72 characters (checked from the commit named below on;
# older history is left as it was).
set -euo pipefail
cd "$(dirname "$0")/.."
since=b431720bc1f725c9b2af59bcb3e1e81fc4eb1685
git rev-parse -q --verify "$since^{commit}" >/dev/null || exit 0  # a shallow clone lacks it
long=$(git log --format='%s' "$since..HEAD" | awk 'length($0) > 72')
if [ -n "$long" ]; then
  echo "commit subjects over 72 characters:" >&2
  echo "$long" >&2
  exit 1
fi
