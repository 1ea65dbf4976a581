#!/usr/bin/env bash
# bash scripts/timed.sh LOG NAME COMMAND...: run COMMAND, append "NAME: S s (exit E)" to LOG
# and exit with COMMAND's status. The one writer of the phase lines .ci/run prints at its end.
set -uo pipefail
log=$1 name=$2
shift 2
began=$(date +%s)
status=0
"$@" || status=$?
echo "$name: $(( $(date +%s) - began )) s (exit $status)" >> "$log"
exit "$status"
