#!/usr/bin/env bash
# Install what the job-queue and remote-board tests need beyond requirements.txt (idempotent):
# PostgreSQL (initdb/pg_ctl, started by the tests on 127.0.0.1) and OpenSSH's server (a real sshd
# on 127.0.0.1 plays the board), and the unprivileged account the tests run them as.
# Usage: scripts/ci/queue.sh [--system]   (all of it is system-wide: --system changes nothing)
set -euo pipefail
cd "$(dirname "$0")/../.."
APT_PACKAGES=(postgresql openssh-server openssh-client)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$pkg")
done
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO=sudo
if ((${#missing[@]})); then
    $SUDO apt-get update -qq
    # policy-rc.d keeps the packages from starting system-wide services; the tests start their own.
    DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 $SUDO apt-get install -y -qq --no-install-recommends \
        "${missing[@]}"
fi
# The "board" account of tests/test_remote_board.py (root CI only; a normal user is its own board).
if [[ $(id -u) -eq 0 ]] && ! id anb-board >/dev/null 2>&1; then
    useradd --system --create-home --home-dir /var/lib/anb-board --shell /bin/sh anb-board
fi
# No password, but not "locked" ('!'): sshd without PAM refuses locked accounts even with a key.
if [[ $(id -u) -eq 0 ]] && [[ $(getent shadow anb-board | cut -d: -f2) == '!'* ]]; then
    usermod -p '*' anb-board
fi
# Its runtime, as one would set up a real board: Python 3 + numpy + onnxruntime in a venv.
BOARD_VENV=/var/lib/anb-board/venv
if [[ $(id -u) -eq 0 ]] && ! "$BOARD_VENV/bin/python" -c "import numpy, onnxruntime" 2>/dev/null; then
    command -v python3 >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
    runuser -u anb-board -- python3 -m venv "$BOARD_VENV"
    runuser -u anb-board -- "$BOARD_VENV/bin/pip" install --quiet \
        "$(grep -E '^numpy==' requirements.txt)" "$(grep -E '^onnxruntime==' requirements.txt)"
fi
