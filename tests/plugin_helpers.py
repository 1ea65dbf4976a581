"""Test plug-in packages (``tests/plugins/<name>``) installed the way a user installs one."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def pip_install(package: Path, target: Path) -> Path:
    """Install ``package`` with pip into the folder ``target`` of its own (no anb file touched;
    put it on ``sys.path`` / ``PYTHONPATH`` to use it) and return ``target``."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(target), str(package)],
                   check=True, capture_output=True, timeout=300)
    return target
