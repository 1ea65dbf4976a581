"""The one measurement-target interface: a device that measurement can target, whatever reaches
it (this host's back-ends, a board over ssh or adb (an FPGA's DPU, an ARM CPU), a Qualcomm
SoC through its SDK).

A target has the device's ``name``, its record ``keys``, ``measure(archs, out, run)`` (a
resumable run into a results folder, as :class:`RunSettings` says) and ``measure_job(arch,
workdir)`` (one architecture for a queue job). Implementations: the protocol configs'
:class:`~anb.collect_throughput.targets.local.LocalTarget` (this host's back-ends) and
:class:`~anb.collect_throughput.targets.remote.RemoteTarget` (a board over ``[remote]``),
:class:`~anb.collect_throughput.targets.fpga.FpgaTarget` and
:class:`~anb.collect_throughput.targets.qualcomm.stages.QualcommTarget`;
:func:`anb.collect_throughput.targets.devices.as_target` picks one for a loaded config.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunSettings:
    """How one ``measure`` run goes, for a target of any kind."""

    workdir: Path | None = None
    """Where exported / converted models go (None: a folder the target chooses)."""
    progress: bool = True
    """Show a progress bar while measuring."""
    keep_going: bool = False
    """Log a failing architecture in the summary and go on (otherwise raise)."""
    keep_work: bool = False
    """Keep each architecture's exported models in ``workdir`` (otherwise deleted once used)."""


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
    (:class:`~anb.collect_throughput.timing.protocol.DeviceConfig` or
    :class:`~anb.collect_throughput.targets.qualcomm.config.QualcommDevice`)."""

    config: Any
    name: str
    keys: tuple[str, ...]

    @abstractmethod
    def measure(self, archs: Iterable[Any], out: str | Path, run: RunSettings) -> MeasureSummary:
        """Measure ``archs`` (architectures of the target's search space) into
        ``<out>/<name>/<arch_id>.json`` under ``run`` (resumable: a result stored under the
        same protocol fingerprint is skipped, one under another is re-measured or refused,
        never kept as this run's)."""

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
