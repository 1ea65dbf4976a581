"""The self-contained board runner (``runner.py``: Python >= 3.7 + numpy + onnxruntime), pushed
to boards by :mod:`anb.collect_throughput.targets.remote`; it never imports ``anb``."""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path

RUNNER = Path(str(files(__name__) / "runner.py"))
