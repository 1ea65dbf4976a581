"""The one measurement-target interface: a device that measurement can target, whatever reaches
it (this host's back-ends, a board over ssh or adb (an FPGA's DPU, an ARM CPU), a Qualcomm
SoC through its SDK).

A target has the device's ``name``, its record ``keys``, ``measure(archs, out)`` (a resumable
run into a results folder) and ``measure_job(arch, workdir)`` (one architecture for a queue
job). Implementations: :class:`~anb.collect_throughput.driver.ProtocolTarget` (protocol configs,
local or remote) and :class:`~anb.collect_throughput.qualcomm.stages.QualcommTarget`;
:func:`anb.collect_throughput.devices.as_target` picks one for a loaded config.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class MeasureSummary:
    """What a ``measure`` run did."""

    measured: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    anchor_sessions: list[str] = field(default_factory=list)
    pinned_cpus: list[int] | None = None


class MeasureTarget(ABC):
    """A device measurement can target (see module docstring). ``config`` is the loaded config
    (:class:`~anb.collect_throughput.protocol.DeviceConfig` or
    :class:`~anb.collect_throughput.qualcomm.config.QualcommDevice`)."""

    config: Any
    name: str
    keys: tuple[str, ...]

    @abstractmethod
    def measure(self, archs: Iterable[Any], out: str | Path, workdir: str | Path | None = None,
                progress: bool = True, keep_going: bool = False, interleave: int = 1,
                anchors: Sequence[Any] | None = None, keep_work: bool = False,
                anchor_every: int = 500) -> MeasureSummary:
        """Measure ``archs`` (architectures of the target's search space) into
        ``<out>/<name>/<arch_id>.json`` (resumable: a result stored under the same protocol
        fingerprint is skipped, one under another is re-measured or refused, never kept as
        this run's); ``anchors`` None: the space's default anchors
        (:func:`~anb.collect_throughput.anchors.default_anchors`), re-measured every
        ``anchor_every`` architectures; ``keep_work``: keep exported models in ``workdir``.
        A target that times one model at a time on its board may ignore ``interleave``,
        ``anchors`` and ``anchor_every``."""

    @abstractmethod
    def measure_job(self, arch: Any, workdir: Path) -> dict:
        """One architecture for a queue job, nothing written to a results folder: ``record``
        (the per-architecture record), ``values`` (key -> value), ``latency_ms`` and
        ``files`` (paths to copy beside the record when it is published). Errors name the
        device and the step (a :class:`~anb.collect_throughput.transports.TransportError`
        whose ``transient`` says whether a retry can help)."""

    def check(self) -> None:  # noqa: B027 - optional hook: most targets check nothing here
        """Refuse (ValueError) a setting this host cannot run, before any folder is made.
        Default: nothing to check."""

    def prepare_job(self, arch: Any, workdir: Path) -> dict:
        """The host-only part of a queue job (export, conversion, quantization: no device
        needed) into ``workdir``, where :meth:`measure_job` finds it: ``models`` (record key
        -> ``model`` path and details). Default: nothing to prepare apart."""
        return {"models": {}}
