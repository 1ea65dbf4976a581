"""``anb measure``: measure a list of architectures on a device, resumable and shardable.

Results go to ``<out>/<device>/<arch_id>.json``, one per-architecture record per device, written
atomically after every measurement; a (architecture, key) already in that file under the same
protocol fingerprint is skipped, so an interrupted job picks up where it stopped and loses at
most the measurement in flight (one under another protocol is an error, never reused).
Anchor architectures are re-measured at the start of the run and every ``anchor_every``
architectures (:mod:`.anchors`); exported models are deleted once used unless ``keep_work``.
Shard ``i/k`` takes positions ``i, i + k, ...`` of the de-duplicated list, like the sampler.
The device config names the search space measured (``DeviceConfig.space``); a results folder
holds one space's records and a run of another space is refused.
With ``interleave=K`` blocks of K architectures are timed round-robin (robust ranks on a shared
machine); each block's records are written when the block is done.

:class:`ProtocolTarget` is a protocol config as a
:class:`~anb.collect_throughput.target.MeasureTarget` (:mod:`.devices` loads either kind of
device config and picks its target).
"""
from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from anb.collect_throughput.anchors import (
    anchor_path,
    anchor_rows,
    append_anchor_rows,
    default_anchors,
    new_session_id,
)
from anb.collect_throughput.environment import check_pinnable, pin_cpus
from anb.collect_throughput.protocol import (
    DeviceConfig,
    Protocol,
    entry_fingerprint,
    protocol_difference,
)
from anb.collect_throughput.result import arch_record
from anb.collect_throughput.target import MeasureSummary, MeasureTarget
from anb.io import atomic_write_json, read_json, read_text
from anb.outputs import Kind
from anb.searchspace.base import Space
from anb.searchspace.registry import DEFAULT_SPACE, check_same_space, get_space
from anb.searchspace.sampler import Sampler, parse_shard

log = logging.getLogger(__name__)
_RECORD_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".json", ".jsonl", ".csv", ".parquet", ".pq")
#: Most architectures ``sample:N`` gives (a list to measure or queue is held in memory).
SAMPLE_LIMIT = 100_000


def split_arch_list(text: str, space: Space, option: str = "--archs") -> list[Any]:
    """Comma-separated architecture strings of ``space``; a string that itself holds commas
    (``ofa-mbv3``'s layers) is taken whole: each architecture is the shortest run of parts
    that parses. A part that starts no architecture is an error naming it."""
    parts = [part.strip() for part in text.split(",")]
    archs, start = [], 0
    while start < len(parts):
        if not parts[start]:
            start += 1
            continue
        for end in range(start + 1, len(parts) + 1):
            try:
                archs.append(space.arch(",".join(parts[start:end])))
                break
            except ValueError:
                continue
        else:
            try:
                space.arch(parts[start])
            except ValueError as err:
                raise ValueError(f"{option}: {parts[start]!r} is not an architecture of search "
                                 f"space {space.name!r}: {err}") from None
        start = end
    return archs


def _arch_at(space: Space, text: str, where: str) -> Any:
    try:
        return space.arch(text)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def read_arch_list(spec: str | Path, space: Space) -> list[Any]:
    """Architectures of ``space`` from a dataset (any form ``anb.records`` reads), a text file
    with one architecture string per line, ``sample:N[:seed]`` (N at most
    :data:`SAMPLE_LIMIT`), or comma-separated strings (:func:`split_arch_list`).
    De-duplicated, first occurrence kept."""
    text = str(spec)
    path = Path(text)
    try:
        is_dir, is_file = path.is_dir(), path.is_file()
    except OSError:  # e.g. a long comma-separated list is too long for a file name
        is_dir = is_file = False
    if text.startswith("sample:"):
        parts = text.split(":")
        try:
            n, seed = int(parts[1]), int(parts[2]) if len(parts) > 2 else 0
        except (IndexError, ValueError):
            raise ValueError(f"--archs {text!r} is malformed; expected 'sample:N' or "
                             "'sample:N:seed'") from None
        sampler = Sampler(seed, space=space)
        try:
            sampler.check_size(n)
        except ValueError as err:
            raise ValueError(f"--archs {text!r}: {err}") from None
        if n > SAMPLE_LIMIT:
            raise ValueError(f"--archs {text!r} asks for {n:,} architectures; sample:N takes at "
                             f"most {SAMPLE_LIMIT:,}; for more, write disjoint parts with "
                             "`anb space sample -n N --shard i/k > part_i.txt` and pass each file")
        archs = sampler.sample(n)
    elif is_dir or (is_file and text.endswith(_RECORD_SUFFIXES)):
        from anb.records import load_dataset

        frame = load_dataset(path, space)
        if frame.empty:
            raise ValueError(f"--archs {text!r} holds no architecture records; allowed: a "
                             "dataset, a text file of architecture strings, 'sample:N' or "
                             "comma-separated strings")
        archs = [space.arch(a) for a in frame["arch"]]
    elif is_file:
        archs = [_arch_at(space, line.strip(), f"--archs {text}:{i}")
                 for i, line in enumerate(read_text(path).splitlines(), 1)
                 if line.strip() and not line.startswith("#")]
    elif "/" in text or text.endswith((".txt", ".json")):
        raise ValueError(f"--archs {text!r}: no such file or folder")
    else:
        archs = split_arch_list(text, space)
    unique: dict[str, Any] = {}
    for arch in archs:
        unique.setdefault(arch.id, arch)
    return list(unique.values())


def shard_of(archs: list[Any], shard: str | tuple[int, int] | None) -> list[Any]:
    i, k = parse_shard(shard)
    return archs[i::k]


def _holds_results(folder: Path) -> bool:
    """A results folder written before anb's output marker: device folders of JSON records."""
    devices = [p for p in folder.iterdir() if not p.name.startswith(".")]
    return bool(devices) and all(
        d.is_dir() and any(d.glob("*.json")) and all(
            f.name.startswith(".") or f.suffix in (".json", ".jsonl") for f in d.iterdir())
        for d in devices)


#: The results folder ``anb measure`` (and the queue's workers) write (see :mod:`anb.outputs`).
RESULTS = Kind("measure", "anb measure results", _holds_results)


def result_path(out: str | Path, device: str, arch: Any) -> Path:
    return Path(out) / device / f"{arch.id}.json"


def record_space(record: dict) -> str:
    """The search space a record names (the default when it names none)."""
    return str(record.get("space", DEFAULT_SPACE))


def check_results_space(out: str | Path, device: str, space: str) -> None:
    """Refuse to add ``space``'s records to a device folder holding another space's: every
    run checks, so one stored record tells the folder's space."""
    folder = Path(out) / device
    stored = next((p for p in sorted(folder.glob("*.json")) if not p.name.startswith(".")),
                  None) if folder.is_dir() else None
    if stored is not None:
        check_same_space(space, record_space(read_json(stored)), f"results folder {folder}")


def read_result(path: Path) -> dict | None:
    """The stored record at ``path`` (None if absent)."""
    if not path.exists():
        return None
    return read_json(path)


class ProtocolMismatch(ValueError):
    """A stored result was measured under another protocol than this run's."""


def stored_matches(entry: dict | None, protocol: Protocol, where: Path) -> bool:
    """True when ``entry`` holds ``protocol``'s result; False when absent; raise
    :class:`ProtocolMismatch` when it was measured under another protocol (never reused)."""
    if entry is None:
        return False
    found = entry_fingerprint(entry)
    if found == protocol.fingerprint:
        return True
    detail = (protocol_difference(entry["protocol"], protocol.as_dict())
              if isinstance(entry.get("protocol"), dict) else "no protocol recorded")
    raise ProtocolMismatch(
        f"{where}: {protocol.key} was measured under protocol {found} and this run's is "
        f"{protocol.fingerprint} ({detail}); measure into another --out, or delete that entry")


def remove_work_files(workdir: Path, arch: Any) -> None:
    """Delete the intermediate files (exported models) of ``arch`` in ``workdir``."""
    for path in Path(workdir).glob(f"{arch.id}_*"):
        if path.is_file():
            path.unlink()


def measure_archs(device: DeviceConfig, archs: Iterable[Any], out: str | Path,
                  shard: str | tuple[int, int] | None = None, workdir: str | Path | None = None,
                  progress: bool = True, keep_going: bool = False, interleave: int = 1,
                  keep_work: bool = False, anchors: Sequence[Any] | None = None,
                  anchor_every: int = 500) -> MeasureSummary:
    """Measure every protocol of ``device`` on this shard of ``archs`` (architectures of the
    device's space, see module docstring).

    A stored result is reused only when it was measured under the same protocol (its
    fingerprint); one taken under another protocol stops the run before anything is measured.
    ``anchors`` (default: the space's :func:`~.anchors.default_anchors`) are measured before the
    first block and before the first block after every ``anchor_every`` architectures (see
    :mod:`.anchors`). Each architecture's exported models
    are deleted from ``workdir`` once it is measured unless ``keep_work``. A config with
    ``pinned = true`` pins this process to ``threads`` CPUs first.

    With ``keep_going`` a failing architecture (or block) is logged in the summary and the job
    moves on; otherwise the error propagates (everything measured before is already on disk).
    """
    if interleave < 1:
        raise ValueError(f"interleave={interleave} is invalid; allowed: an integer >= 1")
    if anchor_every < 1:
        raise ValueError(f"anchor_every={anchor_every} is invalid; allowed: an integer >= 1")
    space = get_space(device.space)
    anchors = default_anchors(space) if anchors is None else [space.arch(a) for a in anchors]
    todo = shard_of([space.arch(a) for a in archs], shard)
    check_results_space(out, device.name, space.name)
    summary = MeasureSummary()
    records = {}
    for arch in todo:
        path = result_path(out, device.name, arch)
        record = read_result(path) or arch_record(arch, [], space=space)
        done = [stored_matches(record["platform_perf"].get(p.key), p, path)
                for p in device.protocols]
        if all(done):
            summary.skipped.append(arch.id)
        else:
            records[arch.id] = (arch, record)
    pending = list(records.values())
    if not pending:
        return summary
    pinned = pinned_threads(device)
    affinity = os.sched_getaffinity(0) if pinned else None
    if pinned:
        summary.pinned_cpus = pin_cpus(max(pinned))
    try:
        _run_blocks(device, pending, out, workdir, progress, keep_going, interleave, keep_work,
                    anchors, anchor_every, summary)
    finally:
        if affinity is not None:
            os.sched_setaffinity(0, affinity)
    return summary


def _run_blocks(device: DeviceConfig, pending: list, out: str | Path, workdir: str | Path | None,
                progress: bool, keep_going: bool, interleave: int, keep_work: bool,
                anchors: Sequence[Any], anchor_every: int, summary: MeasureSummary) -> None:
    from tqdm import tqdm

    from anb.collect_throughput.backends import get_backend
    from anb.collect_throughput.measure import measure_interleaved

    backends = {} if device.remote else {p.backend: get_backend(p.backend)
                                         for p in device.protocols}
    workdir = Path(workdir) if workdir else Path(out) / device.name / ".work"

    def measure(protocol, archs: list) -> list:
        if device.remote:  # a board reached over a transport: see .remote
            from anb.collect_throughput.remote import measure_remote_archs

            return measure_remote_archs(device, protocol, archs, workdir)
        return measure_interleaved(archs, protocol, workdir, backends[protocol.backend])

    session: str | None = None
    since_anchor = anchor_every
    bar = tqdm(total=len(pending), desc=f"measure {device.name}", unit="arch",
               disable=not progress)
    for start in range(0, len(pending), interleave):
        block = pending[start:start + interleave]
        try:
            if anchors and since_anchor >= anchor_every:
                session = new_session_id()
                rows = []
                for protocol in device.protocols:
                    ms = measure(protocol, list(anchors))
                    rows += anchor_rows(session, start, ms)
                append_anchor_rows(anchor_path(out, device.name), rows)
                summary.anchor_sessions.append(session)
                since_anchor = 0
                if not keep_work:
                    for arch in anchors:
                        remove_work_files(workdir, arch)
            for protocol in device.protocols:
                missing = [(a, r) for a, r in block if protocol.key not in r["platform_perf"]]
                if not missing:
                    continue
                ms = measure(protocol, [a for a, _ in missing])
                for (arch, record), m in zip(missing, ms, strict=True):
                    entry = m.to_perf_entry()
                    if session:
                        entry["anchor_session"] = session
                    record["platform_perf"][m.key] = entry
                    atomic_write_json(result_path(out, device.name, arch), record)
                bar.set_postfix_str(f"{ms[-1].key}={ms[-1].value:.4g} cv={ms[-1].cv:.3f}")
        except Exception as err:  # reported per block with keep_going
            if not keep_going:
                raise
            for arch, _ in block:
                summary.failed[arch.id] = f"{type(err).__name__}: {err}"
            log.warning("architectures %s failed: %s", [str(a) for a, _ in block], err)
            bar.update(len(block))
            continue
        finally:
            if not keep_work:
                for arch, _ in block:
                    remove_work_files(workdir, arch)
        since_anchor += len(block)
        summary.measured += [a.id for a, _ in block]
        bar.update(len(block))
    bar.close()


def pinned_threads(device: DeviceConfig) -> list[int]:
    """The thread counts of ``device``'s protocols pinned on this host (none for a board)."""
    return [] if device.remote else [p.threads for p in device.protocols if p.pinned]


class ProtocolTarget(MeasureTarget):
    """A protocol config: this host's back-ends, or a board over its ``[remote]`` table."""

    def __init__(self, config: DeviceConfig):
        self.config, self.name, self.keys = config, config.name, config.keys

    def check(self) -> None:
        pinned = pinned_threads(self.config)
        if pinned:
            check_pinnable(max(pinned))

    def measure(self, archs, out, workdir=None, progress=True, keep_going=False, interleave=1,
                anchors=None, keep_work=False, anchor_every=500) -> MeasureSummary:
        return measure_archs(self.config, archs, out, workdir=workdir, progress=progress,
                             keep_going=keep_going, interleave=interleave, anchors=anchors,
                             keep_work=keep_work, anchor_every=anchor_every)

    def prepare_models(self, arch: Any, workdir: Path) -> list[tuple[str, Path, dict]]:
        """(protocol key, model path, back-end details) of each protocol, the model prepared
        in ``workdir`` (an empty path where the back-end runs the ONNX model)."""
        from anb.collect_throughput.backends import get_backend

        out = []
        for protocol in self.config.protocols:
            if self.config.remote:
                from anb.collect_throughput.remote import get_runtime, remote_spec

                spec = remote_spec(self.config)
                path, extra = get_runtime(spec.runtime, spec).model(arch, protocol, workdir)
            else:
                backend = get_backend(protocol.backend)
                if not hasattr(backend, "model_path"):
                    out.append((protocol.key, Path(), {"converted": False}))
                    continue
                path, extra = backend.model_path(arch, protocol, workdir)
            out.append((protocol.key, path, extra))
        return out

    def prepare_job(self, arch: Any, workdir: Path) -> dict:
        return {"models": {key: {"model": str(path), **extra}
                           for key, path, extra in self.prepare_models(arch, workdir)}}

    def measure_job(self, arch: Any, workdir: Path) -> dict:
        if self.config.remote:
            from anb.collect_throughput.remote import measure_remote

            ms = measure_remote(self.config, arch, workdir)
        else:
            from anb.collect_throughput.measure import measure

            ms = [measure(arch, p, workdir) for p in self.config.protocols]
        latency = [m.value for m in ms if m.kind == "latency"]
        return {"record": arch_record(arch, ms, tool="anb worker",
                                      space=get_space(self.config.space)),
                "values": {m.key: m.value for m in ms},
                "latency_ms": latency[0] if latency else None}
