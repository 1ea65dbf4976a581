"""Per-architecture training state, written atomically after every epoch.

A checkpoint holds everything to continue an architecture from its last finished epoch:
model / optimiser / grad-scaler state, the epoch count, validation history, accumulated train
time and the ids of the jobs that worked on it. It is tied to the architecture and the recipe
hash; a mismatch or an unreadable file is an error, never a silent restart.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from anb.extras import missing

try:
    import torch
except ModuleNotFoundError as err:
    raise missing(err, "train", "anb.collect_accuracy.checkpoint") from None

from anb.io import atomic_write

FORMAT = 1


class CheckpointError(RuntimeError):
    """A checkpoint exists but cannot be used."""


def save(path: Path, state: dict[str, Any]) -> Path:
    """Write ``state`` atomically (a kill mid-write leaves the previous checkpoint)."""
    return atomic_write(path, lambda tmp: torch.save({"format": FORMAT, **state}, tmp))


def load(path: Path, arch: str, recipe_hash: str, global_batch: int | None = None,
         world_size: int | None = None) -> dict[str, Any] | None:
    """The state in ``path`` (None when there is none); checks it belongs to ``arch``, the
    global batch (a resume on another GPU count would change the lr mid-architecture) and
    ``recipe_hash``."""
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch raises many types for damaged files
        raise CheckpointError(
            f"checkpoint {str(path)!r} is corrupted ({type(err).__name__}: {err}); "
            "remove it to retrain this architecture from epoch 0") from None
    found = state.get("format") if isinstance(state, dict) else None
    if found != FORMAT:
        raise CheckpointError(f"checkpoint {str(path)!r} has an unknown format "
                              f"(field 'format' = {found!r}, expected {FORMAT})")
    other = state.get("global_batch")
    if global_batch is not None and other is not None and other != global_batch:
        raise CheckpointError(
            f"checkpoint {str(path)!r} was trained at global batch {other} "
            f"({state.get('world_size')} ranks), this run has global batch {global_batch} "
            f"({world_size} ranks), which would change the lr mid-architecture; resume on "
            f"{state.get('world_size')} ranks, or keep the global batch with "
            f"--trainval.global_batch {other}")
    for key, want in (("arch", arch), ("recipe_hash", recipe_hash)):
        if state.get(key) != want:
            raise CheckpointError(f"checkpoint {str(path)!r}: field {key!r} is "
                                  f"{state.get(key)!r}, this run has {want!r}; use the original "
                                  "config or another logging.folder")
    return state
