"""Shared by the trainer tests: the repository, the digits smoke config and a 2-process
torchrun (gloo) command line of the trainer with small, fast settings."""
from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")
CONFIG = REPO / "configs" / "accuracy" / "digits_tiny.ini"
NUM_MODELS = 3
ARGS = ["--num_models", str(NUM_MODELS), "--epochs", "3", "--eval_epochs", "2",
        "--progress", "false", "--seed", "7", "--batch_size", "16", "--max_steps", "3",
        "--val_batch_size", "60"]


def child_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO),
            "WANDB_SILENT": "true"}


def torchrun_cmd(folder: Path, *extra: str, nproc: int = 2) -> list[str]:
    return [str(TORCHRUN), "--standalone", "--nproc_per_node", str(nproc), "-m",
            "anb.collect_accuracy.train", "--config", str(CONFIG), "--folder", str(folder),
            *ARGS, *extra]
