"""Training tables for surrogates: targets, label extraction and reproducible splits."""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from anb import resources
from anb.io import read_json
from anb.records import curve_columns, is_perf_metric, load_dataset, perf_columns, table_archs
from anb.searchspace.base import Space

ACCURACY_TARGET = "val_top1"
#: The training-cost target: wall seconds of the record's (proxified) training run as the
#: trainer records it, validation included; the released records were trained on 4x RTX 3090,
#: so GPU-hours there are ``train_time * 4 / 3600``. Kept in seconds, the records' unit.
TRAIN_TIME_TARGET = "train_time"
SPLIT_NAMES = ("train", "val", "test")
DEFAULT_SPLIT_DIR = resources.RELEASED_SPLIT_DIR


def fittable(frame: pd.DataFrame) -> list[str]:
    """The targets a table may be fitted on: top-1 accuracy, its learning curve
    (``val_top1_epoch_<i>``, one target per epoch: the epoch-fidelity surrogate), each device
    metric, train_time."""
    return [ACCURACY_TARGET, *curve_columns(frame), *sorted(perf_columns(frame)),
            TRAIN_TIME_TARGET]


def target_columns(frame: pd.DataFrame) -> list[str]:
    """Every target a table holds a value of: top-1 accuracy first, then its learning curve
    by epoch, each device metric, then the training cost ``train_time``."""
    return [c for c in fittable(frame) if c in frame.columns and frame[c].notna().any()]


def transform_for(target: str) -> str:
    """The label transform a target is modelled in: ``log`` for device speed and training
    time (positive, multiplicative noise), else ``identity``."""
    return "log" if is_perf_metric(target) or target == TRAIN_TIME_TARGET else "identity"


def load_table(path: str | Path, space: Space) -> pd.DataFrame:
    """Load any dataset form ``anb.records.load_dataset`` reads (tarball, folder, JSON, CSV...)."""
    frame = load_dataset(path, space)
    if frame.empty:
        raise ValueError(f"dataset {str(path)!r} holds no records")
    return frame


def frame_choices(frame: pd.DataFrame, space: Space) -> np.ndarray:
    """The choices array of a table's architectures (its ``arch`` column or record keys)."""
    return space.to_choices(table_archs(frame, "table", space=space))


@dataclass(frozen=True)
class Labels:
    """One target's labels with the rows that hold a value."""

    target: str
    values: np.ndarray
    present: np.ndarray

    @property
    def n_missing(self) -> int:
        return int((~self.present).sum())


def labels(frame: pd.DataFrame, target: str) -> Labels:
    """Labels of ``target``; missing (null / non-finite) values are flagged, not dropped."""
    if target not in fittable(frame) or target not in frame.columns:
        raise ValueError(f"unknown target {target!r}; this dataset has "
                         f"{target_columns(frame)}")
    values = pd.to_numeric(frame[target], errors="coerce").to_numpy(dtype=np.float64)
    present = np.isfinite(values)
    if transform_for(target) == "log":
        present &= values > 0
    return Labels(target, values, present)


def data_hash(frame: pd.DataFrame, targets: Sequence[str]) -> str:
    """SHA-256 of the architectures and target values a model was trained on (order-free)."""
    cols = ["arch"] + list(targets)
    text = frame[cols].sort_values(cols).to_csv(index=False, float_format="%.9g")
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------- splits
def published_split(frame: pd.DataFrame,
                    split_dir: str | Path | None = None) -> dict[str, np.ndarray]:
    """Boolean masks from the benchmark's ``{train,val,test}_paths.json`` (matched on file name)."""
    split_dir = Path(split_dir) if split_dir is not None else DEFAULT_SPLIT_DIR
    masks = {}
    for name in SPLIT_NAMES:
        file = split_dir / f"{name}_paths.json"
        if not file.exists():
            raise FileNotFoundError(f"split file {str(file)!r} does not exist")
        names = {Path(p).name for p in read_json(file)}
        masks[name] = frame["source"].astype(str).map(lambda s: Path(s).name).isin(names).to_numpy()
    if not masks["train"].any():
        raise ValueError(f"no record of this dataset is in the train split of {str(split_dir)!r}")
    return masks


def _unit_hash(keys: Sequence[str], seed: int) -> np.ndarray:
    """A per-key uniform number in [0, 1) that depends only on the key and the seed."""
    out = np.empty(len(keys))
    for i, key in enumerate(keys):
        digest = hashlib.blake2b(f"{seed}:{key}".encode(), digest_size=8).digest()
        out[i] = int.from_bytes(digest, "little") / 2**64
    return out


def random_split(frame: pd.DataFrame, seed: int = 0,
                 fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> dict[str, np.ndarray]:
    """Seeded split by architecture id (duplicates stay together); the same on every machine."""
    if len(fractions) != 3 or abs(sum(fractions) - 1) > 1e-9 or min(fractions) < 0:
        raise ValueError(f"fractions must be 3 non-negative numbers summing to 1, got {fractions}")
    u = _unit_hash(frame["arch_id"].astype(str).tolist(), seed)
    cut1, cut2 = fractions[0], fractions[0] + fractions[1]
    return {"train": u < cut1, "val": (u >= cut1) & (u < cut2), "test": u >= cut2}


def kfold_splits(frame: pd.DataFrame, k: int = 5, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Seeded k-fold by architecture id: fold ``i`` is the test set, fold ``i+1`` validation."""
    if k < 3:
        raise ValueError(f"k must be at least 3 (train, val and test folds), got {k}")
    fold = np.floor(_unit_hash(frame["arch_id"].astype(str).tolist(), seed) * k).astype(int)
    return [{"train": (fold != i) & (fold != (i + 1) % k), "val": fold == (i + 1) % k,
             "test": fold == i} for i in range(k)]


def make_split(frame: pd.DataFrame, split: str = "published", seed: int = 0,
               split_dir: str | Path | None = None) -> dict[str, np.ndarray]:
    """``published`` (default), ``random`` or ``kfold:<k>:<i>`` masks."""
    if split == "published":
        return published_split(frame, split_dir)
    if split == "random":
        return random_split(frame, seed)
    if split.startswith("kfold:"):
        try:
            _, k, i = split.split(":")
            return kfold_splits(frame, int(k), seed)[int(i)]
        except (ValueError, IndexError):
            pass
    raise ValueError(f"unknown split {split!r}; allowed: 'published', 'random', 'kfold:<k>:<i>'")
