"""The result record of one measurement and its place in the per-architecture record.

One :class:`Measurement` per (architecture, device, kind, batch, precision, resolution). It keeps
every repetition's raw per-step time and becomes the ``platform_perf`` entry
``throughput_<device>`` (images/s) or ``latency_<device>`` (ms)::

    {"throughput_mean": ..., "throughput_std": ..., "throughput_median": ..., "cv": ...,
     "ci_rel": ..., "n": ..., "unit": "images/s", "statistic": "trimmed_mean(0.1)",
     "batch": ..., "resolution": ..., "precision": ..., "raw_times_s": [...], "stop_reason": ...,
     "protocol": {...}, "protocol_fingerprint": "<16 hex>", "environment": {...},
     "peak_rss_bytes": ..., "utilisation": {"samples": [...], ...}}

``*_mean`` is the 10 %-trimmed mean of the per-repetition values (robust to preempted
repetitions on a shared machine); the plain mean is kept as ``mean_untrimmed``. Interleaved
measurements also keep ``drift_factors`` (the machine's speed at each repetition, estimated from
the other architectures timed around it): the statistics are of ``raw_times_s / drift_factors``,
and ``cv_uncorrected`` is the CV of the raw times.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from anb.collect_throughput.timing.protocol import protocol_fingerprint
from anb.collect_throughput.timing.stats import summarize
from anb.searchspace.base import Space
from anb.version import __version__

UNITS = {"latency": "ms", "throughput": "images/s"}


def values_from_times(kind: str, times_s: list[float], batch: int) -> np.ndarray:
    """Per-repetition metric values: ms per batch (latency) or images/s (throughput)."""
    t = np.asarray(times_s, dtype=float)
    if kind == "latency":
        return t * 1e3
    if kind == "throughput":
        return batch / t
    raise ValueError(f"kind={kind!r} is invalid; allowed: ['latency', 'throughput']")


@dataclass
class Measurement:
    """One measured (architecture, device, kind, batch, precision, resolution)."""

    arch: str
    arch_id: str
    device: str
    kind: str
    batch: int
    resolution: int
    precision: str
    times_s: list[float]
    warmup_times_s: list[float]
    inner: int
    stop_reason: str
    protocol: dict[str, Any]
    environment: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    drift: list[float] | None = None
    """The machine's speed factor at each repetition (interleaved timing); statistics use
    ``times_s / drift``, and ``times_s`` stays what the clock read."""
    measured_at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                   time.gmtime()))

    @property
    def key(self) -> str:
        return f"{self.kind}_{self.device}"

    def _summarize(self, times_s: Any) -> dict[str, Any]:
        trim = self.protocol.get("stopping", {}).get("trim", 0.1)
        confidence = self.protocol.get("stopping", {}).get("confidence", 0.95)
        return summarize(values_from_times(self.kind, times_s, self.batch), trim, confidence)

    @property
    def summary(self) -> dict[str, Any]:
        """Statistics of the drift-corrected repetitions (the raw ones without drift)."""
        if self.drift is None:
            return self._summarize(self.times_s)
        return self._summarize(np.asarray(self.times_s) / np.asarray(self.drift))

    @property
    def value(self) -> float:
        return self.summary["trimmed_mean"]

    @property
    def cv(self) -> float:
        return self.summary["cv"]

    def to_perf_entry(self) -> dict[str, Any]:
        """The ``platform_perf`` entry (see module docstring)."""
        s = self.summary
        k = self.kind
        return {
            f"{k}_mean": s["trimmed_mean"], f"{k}_std": s["trimmed_std"],
            f"{k}_median": s["median"], "mean_untrimmed": s["mean"], "std_untrimmed": s["std"],
            "cv": s["cv"], "ci_rel": s["ci_rel"], "n": s["n"], "unit": UNITS[k],
            "statistic": f"trimmed_mean({s['trim']})", "batch": self.batch,
            "resolution": self.resolution, "precision": self.precision, "inner": self.inner,
            "raw_times_s": list(map(float, self.times_s)),
            "warmup_times_s": list(map(float, self.warmup_times_s)),
            **({"drift_factors": list(map(float, self.drift)),
                "cv_uncorrected": self._summarize(self.times_s)["cv"]}
               if self.drift is not None else {}),
            "stop_reason": self.stop_reason, "measured_at": self.measured_at,
            "protocol": self.protocol, "protocol_fingerprint": protocol_fingerprint(self.protocol),
            "environment": self.environment, **self.extra,
        }


def utilisation_fields(stats: dict[str, Any] | None) -> dict[str, Any]:
    """A measurement's extra fields from the utilisation a run sampled (``board.runner.Sampler``
    summary): ``peak_rss_bytes`` (peak resident memory of the process running the model while
    it ran) and ``utilisation`` (the samples over time and their means); none without it."""
    if not stats:
        return {}
    return {"peak_rss_bytes": stats.get("peak_rss_bytes"), "utilisation": stats}


def arch_record(arch: Any, measurements: list[Measurement], tool: str = "anb measure",
                *, space: Space) -> dict:
    """A per-architecture record of ``space`` (:func:`anb.records.new_record`) holding the
    measurements' ``platform_perf`` entries."""
    from anb.records import new_record

    arch = space.arch(arch)
    return {
        **new_record(arch, space),
        "platform_perf": {m.key: m.to_perf_entry() for m in measurements},
        "provenance": {"throughput": {"tool": tool, "anb_version": __version__, "arch": str(arch),
                                      "arch_id": arch.id}},
    }
