"""A thin adapter for users of the reference benchmark's ensemble API.

``ensemble = load_ensemble(path, metric="throughput", device="a100")`` then
``mean, std = ensemble.query(arch)`` and ``ensemble.query_noise(arch, seed=0)``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from anb.surrogates.artifact import load
from anb.surrogates.benchmark import SurrogateBenchmark


class EnsembleView:
    """One metric of a benchmark, queried the reference way."""

    def __init__(self, bench: SurrogateBenchmark, metric: str):
        self.bench = bench
        self.metric = bench.resolve(metric)[0]

    def query(self, archs: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(mean, std)`` arrays for one or many architectures."""
        frame = self.bench.query(archs, self.metric)
        return frame[self.metric].to_numpy(), frame[f"{self.metric}_std"].to_numpy()

    def query_noise(self, archs: Any, seed: int | None = None) -> np.ndarray:
        """One plausible observed value per architecture (seeded)."""
        return self.bench.query(archs, self.metric, noise=True, seed=seed)[self.metric].to_numpy()


def load_ensemble(path: str | Path, metric: str = "accuracy", device: str | None = None
                  ) -> EnsembleView:
    """``metric`` is ``accuracy``, ``throughput`` or ``latency``; device metrics need ``device``."""
    bench = load(path)
    if metric in ("throughput", "latency"):
        if device is None:
            raise ValueError(f"metric {metric!r} needs a device; known devices are {bench.devices}")
        name = f"{metric}_{device}"
        if name not in bench.metrics:
            raise ValueError(f"unknown device {device!r} for {metric!r}; this benchmark has "
                             f"{[m for m in bench.metrics if m.startswith(metric)]}")
        return EnsembleView(bench, name)
    return EnsembleView(bench, metric)
