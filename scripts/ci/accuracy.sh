#!/usr/bin/env bash
# Install what the accuracy-collection tests need beyond requirements.txt (idempotent):
# SLURM + munge for the single-node cluster test, and FFCV (built against libturbojpeg/OpenCV).
# Usage: scripts/ci/accuracy.sh [path/to/venv]   (default: .venv)
#        scripts/ci/accuracy.sh --system         (the apt packages only)
set -euo pipefail
system_only=0
if [[ "${1:-}" == --system ]]; then system_only=1; shift; fi
VENV=${1:-.venv}
PIP="$VENV/bin/pip"
APT_PACKAGES=(slurm-wlm munge libopencv-dev libturbojpeg0-dev pkg-config)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$pkg")
done
if ((${#missing[@]})); then
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
if ((system_only)); then exit 0; fi

# FFCV 1.0.2 builds from source against numpy 2.x / Python 3.11 (checked with numpy 2.4.6).
# These pins must satisfy the `ffcv` extra of pyproject.toml (FFCV itself requires
# opencv-python, so the extra names it, not the headless wheel); tests/test_accuracy_packaging.py.
"$VENV/bin/python" -c "import ffcv" 2>/dev/null \
    || "$PIP" install ffcv==1.0.2 numba==0.68.1 opencv-python==5.0.0.93
"$VENV/bin/python" -c "import psutil" 2>/dev/null || "$PIP" install psutil==7.2.2
