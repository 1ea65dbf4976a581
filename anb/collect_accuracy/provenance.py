"""Build and store the per-architecture record (released JSON shape + provenance)."""
from __future__ import annotations

import platform
import socket
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import anb
from anb.io import atomic_write_json
from anb.records import write_record
from anb.searchspace.arch import Arch
from anb.searchspace.counting import count
from anb.searchspace.space import SearchSpace


def versions() -> dict[str, str]:
    out = {"anb": anb.__version__, "python": platform.python_version(),
           "torch": torch.__version__, "numpy": np.__version__}
    for name in ("wandb", "ffcv"):
        module = sys.modules.get(name)
        if module is not None:
            out[name] = getattr(module, "__version__", "unknown")
    return out


def model_info(arch: Arch, space: SearchSpace, num_classes: int, in_channels: int,
               length: int | None = None) -> dict[str, float]:
    """MACs / params in millions (6 decimals). 2-D: the dataset's convention (224 px, 1000
    classes); 1-D: the task's input length, channels and classes."""
    if space.dims == 2:
        counts = count(arch, 224, 1000, space)
    else:
        counts = count(arch, length or 1000, num_classes, space, in_channels)
    return {"macs": round(counts.macs / 1e6, 6), "params": round(counts.params / 1e6, 6)}


def base_provenance(arch: Arch, config: dict, recipe_hash: str, stream_index: int,
                    world_size: int, device: torch.device) -> dict[str, Any]:
    model = config["model"]
    return {
        "anb_version": anb.__version__, "arch_id": arch.id, "arch": str(arch), "space": model["space"], "seed": model["seed"],
        "shard": model["shard"], "stream_index": stream_index, "recipe_hash": recipe_hash,
        "world_size": world_size, "device": device.type, "hostname": socket.gethostname(),
        "dataset": {k: config["dataloader"][k] for k in ("kind", "train_path", "val_path")},
        "versions": versions(),
    }


def make_record(arch: Arch, metrics: dict[str, float], info: dict[str, float],
                provenance: dict[str, Any]) -> dict[str, Any]:
    return {"architecture": arch.to_anb_dict(), "metrics": metrics, "model_info": info,
            "platform_perf": {}, "provenance": {**provenance, "finished_at": time.time()}}


def record_path(folder: Path, arch: Arch) -> Path:
    return folder / "records" / f"{arch.id}.json"


def skipped_path(folder: Path, arch: Arch) -> Path:
    return folder / "skipped" / f"{arch.id}.json"


def save_record(folder: Path, record: dict[str, Any], arch: Arch, space: SearchSpace) -> Path:
    return write_record(record, record_path(folder, arch), space=space)


def save_skipped(folder: Path, arch: Arch, reason: str, provenance: dict[str, Any]) -> Path:
    """Mark an architecture as skipped (e.g. over the memory budget): never retried."""
    return atomic_write_json(skipped_path(folder, arch), {
        "architecture": arch.to_anb_dict(), "status": "skipped", "reason": reason,
        "provenance": {**provenance, "finished_at": time.time()}})
