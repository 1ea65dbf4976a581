"""A protocol config as a :class:`~anb.collect_throughput.targets.base.MeasureTarget`: the
resumable, block-by-block run both of its targets share (this host's back-ends,
:mod:`.local`; a board over ``[remote]``, :mod:`.remote`).

Results go to ``<out>/<device>/<arch_id>.json`` (:mod:`anb.collect_throughput.records.folder`),
written atomically after every measurement; a (architecture, key) already in that file under
the same protocol fingerprint is skipped, so an interrupted job picks up where it stopped and
loses at most the measurement in flight (one under another protocol is an error, never reused).
Anchor architectures are re-measured at the start of the run and every ``anchor_every``
architectures (:mod:`anb.collect_throughput.records.anchors`); exported models are deleted once
used unless ``keep_work``. The device config names the search space measured
(``DeviceConfig.space``); a results folder holds one space's records and a run of another space
is refused. With ``interleave=K`` blocks of K architectures are timed round-robin (robust ranks
on a shared machine); each block's records are written when the block is done.
"""
from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anb.collect_throughput.defaults import ANCHOR_EVERY
from anb.collect_throughput.records.anchors import (
    anchor_path,
    anchor_rows,
    append_anchor_rows,
    default_anchors,
    new_session_id,
)
from anb.collect_throughput.records.folder import (
    check_results_space,
    read_result,
    remove_work_files,
    result_path,
    stored_matches,
)
from anb.collect_throughput.targets.base import MeasureSummary, MeasureTarget, RunSettings
from anb.collect_throughput.timing.protocol import DeviceConfig, Protocol
from anb.collect_throughput.timing.result import Measurement, arch_record
from anb.io import atomic_write_json
from anb.searchspace.registry import get_space

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Schedule:
    """When a protocol target times what: architectures in blocks of ``interleave`` timed
    round-robin, and ``anchors`` (None: the space's
    :func:`~anb.collect_throughput.records.anchors.default_anchors`; empty: none) measured
    before the first block and before the first block after every ``anchor_every``
    architectures."""

    interleave: int = 1
    anchors: Sequence[Any] | None = None
    anchor_every: int = ANCHOR_EVERY

    def __post_init__(self) -> None:
        if self.interleave < 1:
            raise ValueError(f"interleave={self.interleave} is invalid; allowed: an integer >= 1")
        if self.anchor_every < 1:
            raise ValueError(f"anchor_every={self.anchor_every} is invalid; allowed: an integer "
                             ">= 1")


def scheduled(target: MeasureTarget, schedule: Schedule) -> MeasureTarget:
    """``target`` timing under ``schedule`` when it is a protocol config's; a target that
    times one model at a time on its board (an FPGA's batch runner, a Qualcomm SoC) as it is."""
    return target.with_schedule(schedule) if isinstance(target, ProtocolTarget) else target


class ProtocolTarget(MeasureTarget):
    """A protocol config's device (see module docstring); a subclass says how one protocol is
    timed on a block of architectures, how a model is prepared and how outputs are computed."""

    config: DeviceConfig
    where: str
    """Where the models run, as a quality entry names it: ``host`` or ``board``."""

    def __init__(self, config: DeviceConfig, schedule: Schedule | None = None):
        self.config, self.name, self.keys = config, config.name, config.keys
        self.schedule = schedule or Schedule()

    @abstractmethod
    def measure_block(self, protocol: Protocol, archs: list[Any],
                      workdir: Path) -> list[Measurement]:
        """``protocol`` timed on ``archs`` (architectures of the protocol's space), models
        prepared in (or found in) ``workdir``."""

    @abstractmethod
    def prepare_model(self, arch: Any, protocol: Protocol,
                      workdir: Path) -> tuple[Path, dict[str, Any]]:
        """(model path, details) of ``arch`` under ``protocol``, prepared in ``workdir`` (an
        empty path where the back-end runs the ONNX model itself)."""

    @abstractmethod
    def outputs(self, protocol: Protocol, model: str | Path, images: np.ndarray) -> np.ndarray:
        """``model``'s outputs for ``images`` computed where this target runs (one row per
        image)."""

    def with_schedule(self, schedule: Schedule) -> ProtocolTarget:
        """This target timing under ``schedule``."""
        return type(self)(self.config, schedule)

    def measure(self, archs: Iterable[Any], out: str | Path,
                run: RunSettings) -> MeasureSummary:
        """Measure every protocol of the config on ``archs`` (see module docstring).

        A stored result is reused only when it was measured under the same protocol (its
        fingerprint); one taken under another protocol stops the run before anything is
        measured. With ``run.keep_going`` a failing architecture (or block) is logged in the
        summary and the job moves on; otherwise the error propagates (everything measured
        before is already on disk)."""
        space = get_space(self.config.space)
        todo = [space.arch(a) for a in archs]
        check_results_space(out, self.name, space.name)
        summary = MeasureSummary()
        records = {}
        for arch in todo:
            path = result_path(out, self.name, arch)
            record = read_result(path) or arch_record(arch, [], space=space)
            done = [stored_matches(record["platform_perf"].get(p.key), p, path)
                    for p in self.config.protocols]
            if all(done):
                summary.skipped.append(arch.id)
            else:
                records[arch.id] = (arch, record)
        if records:
            self.run_pending(list(records.values()), out, run, summary)
        return summary

    def run_pending(self, pending: list, out: str | Path, run: RunSettings,
                    summary: MeasureSummary) -> None:
        """Time the ``(arch, record)`` pairs not yet measured, block by block."""
        from tqdm import tqdm

        space = get_space(self.config.space)
        schedule = self.schedule
        anchors = (default_anchors(space) if schedule.anchors is None
                   else [space.arch(a) for a in schedule.anchors])
        workdir = Path(run.workdir) if run.workdir else Path(out) / self.name / ".work"
        session: str | None = None
        since_anchor = schedule.anchor_every
        bar = tqdm(total=len(pending), desc=f"measure {self.name}", unit="arch",
                   disable=not run.progress)
        for start in range(0, len(pending), schedule.interleave):
            block = pending[start:start + schedule.interleave]
            try:
                if anchors and since_anchor >= schedule.anchor_every:
                    session = new_session_id()
                    rows = []
                    for protocol in self.config.protocols:
                        ms = self.measure_block(protocol, list(anchors), workdir)
                        rows += anchor_rows(session, start, ms)
                    append_anchor_rows(anchor_path(out, self.name), rows)
                    summary.anchor_sessions.append(session)
                    since_anchor = 0
                    if not run.keep_work:
                        for arch in anchors:
                            remove_work_files(workdir, arch)
                for protocol in self.config.protocols:
                    missing = [(a, r) for a, r in block
                               if protocol.key not in r["platform_perf"]]
                    if not missing:
                        continue
                    ms = self.measure_block(protocol, [a for a, _ in missing], workdir)
                    for (arch, record), m in zip(missing, ms, strict=True):
                        entry = m.to_perf_entry()
                        if session:
                            entry["anchor_session"] = session
                        record["platform_perf"][m.key] = entry
                        atomic_write_json(result_path(out, self.name, arch), record)
                    bar.set_postfix_str(f"{ms[-1].key}={ms[-1].value:.4g} cv={ms[-1].cv:.3f}")
            except Exception as err:  # reported per block with keep_going
                if not run.keep_going:
                    raise
                for arch, _ in block:
                    summary.failed[arch.id] = f"{type(err).__name__}: {err}"
                log.warning("architectures %s failed: %s", [str(a) for a, _ in block], err)
                bar.update(len(block))
                continue
            finally:
                if not run.keep_work:
                    for arch, _ in block:
                        remove_work_files(workdir, arch)
            since_anchor += len(block)
            summary.measured += [a.id for a, _ in block]
            bar.update(len(block))
        bar.close()

    def measurements(self, arch: Any, workdir: str | Path) -> list[Measurement]:
        """Every protocol of the config measured on ``arch`` alone."""
        return [self.measure_block(p, [arch], Path(workdir))[0] for p in self.config.protocols]

    def prepare_job(self, arch: Any, workdir: Path) -> dict:
        models = {}
        for protocol in self.config.protocols:
            path, extra = self.prepare_model(arch, protocol, workdir)
            models[protocol.key] = {"model": str(path), **extra}
        return {"models": models}

    def measure_job(self, arch: Any, workdir: Path) -> dict:
        ms = self.measurements(arch, workdir)
        latency = [m.value for m in ms if m.kind == "latency"]
        return {"record": arch_record(arch, ms, tool="anb worker",
                                      space=get_space(self.config.space)),
                "values": {m.key: m.value for m in ms},
                "latency_ms": latency[0] if latency else None}
