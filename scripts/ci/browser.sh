#!/usr/bin/env bash
# Install Debian's Chromium for tests/test_pages.py (Playwright drives it; its own browser
# download is never used). Idempotent.
# Usage: scripts/ci/browser.sh [--system]   (all of it is system-wide)
set -euo pipefail
if command -v chromium >/dev/null; then
    exit 0
fi
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium
