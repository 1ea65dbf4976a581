"""Build and store the per-architecture record (released JSON shape + provenance)."""
from __future__ import annotations

import functools
import hashlib
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from anb.extras import missing

try:
    import torch
except ModuleNotFoundError as err:
    raise missing(err, "train", "anb.collect_accuracy.provenance") from None

from anb.io import atomic_write_json
from anb.records import write_record
from anb.searchspace.arch import Arch
from anb.searchspace.counting import count
from anb.searchspace.space import SearchSpace
from anb.version import __version__


def versions() -> dict[str, str]:
    out = {"anb": __version__, "python": platform.python_version(),
           "torch": torch.__version__, "numpy": np.__version__}
    for name in ("wandb", "ffcv"):
        module = sys.modules.get(name)
        if module is not None:
            out[name] = getattr(module, "__version__", "unknown")
    return out


def hardware(device: torch.device) -> dict[str, Any]:
    """GPU name, driver, CUDA and cuDNN versions (None off CUDA): slow nodes can be told apart."""
    out: dict[str, Any] = {"device": device.type, "cpu": platform.processor() or platform.machine(),
                           "cuda": torch.version.cuda, "cudnn": None, "gpu": None,
                           "driver": None}
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
        out["cudnn"] = torch.backends.cudnn.version()
        out["driver"] = _driver()
    return out


def _driver() -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30, check=True)
        return done.stdout.split("\n")[0].strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the anb checkout in use (None for an installed wheel)."""
    root = Path(__file__).resolve().parent.parent.parent  # the checkout holding anb/
    if not (root / ".git").exists():
        return None
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=30, check=True)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "anb"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
        return done.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


CHUNK = 8 << 20


@functools.lru_cache(maxsize=8)
def file_fingerprint(path: str) -> dict[str, Any] | None:
    """SHA-256 of a data file's size, first and last 8 MiB (a whole ImageNet file would take
    minutes per job); folders and missing paths give None."""
    file = Path(path)
    if not path or not file.is_file():
        return None
    size = file.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with file.open("rb") as handle:
        digest.update(handle.read(CHUNK))
        if size > CHUNK:
            handle.seek(max(CHUNK, size - CHUNK))
            digest.update(handle.read(CHUNK))
    return {"bytes": size, "sha256_head_tail": digest.hexdigest()}


def model_info(arch: Arch, space: SearchSpace, num_classes: int, in_channels: int,
               length: int | None = None) -> dict[str, float]:
    """MACs / params in millions (6 decimals). 2-D: the dataset's convention (224 px, 1000
    classes); 1-D: the task's input length, channels and classes."""
    if space.dims == 2:
        counts = count(arch, 224, 1000, space=space)
    else:
        counts = count(arch, length or 1000, num_classes, space=space, in_channels=in_channels)
    return {"macs": round(counts.macs / 1e6, 6), "params": round(counts.params / 1e6, 6)}


def base_provenance(arch: Arch, config: dict, recipe_hash: str, stream_index: int,
                    world_size: int, device: torch.device) -> dict[str, Any]:
    model = config["model"]
    return {
        "anb_version": __version__, "arch_id": arch.id, "arch": str(arch),
        "space": model["space"], "seed": model["seed"],
        "shard": model["shard"], "stream_index": stream_index, "recipe_hash": recipe_hash,
        "world_size": world_size, "device": device.type, "hostname": socket.gethostname(),
        "dataset": {**{k: config["dataloader"][k] for k in ("kind", "train_path", "val_path")},
                    "train_file": file_fingerprint(config["dataloader"]["train_path"]),
                    "val_file": file_fingerprint(config["dataloader"]["val_path"])},
        "versions": versions(), "hardware": hardware(device), "git_commit": git_commit(),
    }


def make_record(arch: Arch, metrics: dict[str, float], info: dict[str, float],
                provenance: dict[str, Any]) -> dict[str, Any]:
    """The trainer's record: it names its space (from the provenance) unless the default."""
    from anb.records import new_record
    from anb.searchspace.registry import DEFAULT_SPACE, get_space

    space = get_space(provenance.get("space", DEFAULT_SPACE))
    return {**new_record(arch, space), "metrics": metrics, "model_info": info, "platform_perf": {},
            "provenance": {**provenance, "finished_at": time.time()}}


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
