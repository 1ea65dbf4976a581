"""``anb measure``: measure a list of architectures on a device, resumable and shardable.

Results go to ``<out>/<device>/<arch_id>.json``, one per-architecture record per device, written
atomically after every measurement; a (architecture, key) already in that file is skipped, so
an interrupted job picks up where it stopped and loses at most the measurement in flight.
Shard ``i/k`` takes positions ``i, i + k, ...`` of the de-duplicated list, like the sampler.
With ``interleave=K`` blocks of K architectures are timed round-robin (robust ranks on a shared
machine); each block's records are written when the block is done.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from anb.collect_throughput.protocol import DeviceConfig
from anb.collect_throughput.result import arch_record
from anb.io import atomic_write_json
from anb.searchspace.arch import Arch, as_arch
from anb.searchspace.sampler import Sampler, parse_shard

log = logging.getLogger(__name__)
_RECORD_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".json", ".jsonl", ".csv", ".parquet", ".pq")


def read_arch_list(spec: str | Path) -> list[Arch]:
    """Architectures from a dataset (any form ``anb.records`` reads), a text file with one
    architecture string per line, ``sample:N[:seed]``, or comma-separated strings. De-duplicated,
    first occurrence kept."""
    text = str(spec)
    path = Path(text)
    if text.startswith("sample:"):
        parts = text.split(":")
        try:
            n, seed = int(parts[1]), int(parts[2]) if len(parts) > 2 else 0
        except (IndexError, ValueError):
            raise ValueError(f"--archs {text!r} is malformed; expected 'sample:N' or "
                             "'sample:N:seed'") from None
        archs = Sampler(seed).sample(n)
    elif path.is_dir() or (path.is_file() and text.endswith(_RECORD_SUFFIXES)):
        from anb.records import load_dataset

        archs = [Arch.from_string(a) for a in load_dataset(path)["arch"]]
    elif path.is_file():
        archs = [as_arch(line.strip()) for line in path.read_text().splitlines()
                 if line.strip() and not line.startswith("#")]
    elif "/" in text or text.endswith((".txt", ".json")):
        raise ValueError(f"--archs {text!r}: no such file or folder")
    else:
        archs = [as_arch(part.strip()) for part in text.split(",") if part.strip()]
    unique: dict[str, Arch] = {}
    for arch in archs:
        unique.setdefault(arch.id, arch)
    return list(unique.values())


def shard_of(archs: list[Arch], shard: str | tuple[int, int] | None) -> list[Arch]:
    i, k = parse_shard(shard)
    return archs[i::k]


def result_path(out: str | Path, device: str, arch: Arch) -> Path:
    return Path(out) / device / f"{arch.id}.json"


def read_result(path: Path) -> dict | None:
    """The stored record at ``path`` (None if absent)."""
    if not path.exists():
        return None
    return json.loads(path.read_text())


@dataclass
class MeasureSummary:
    """What a ``measure_archs`` call did."""

    measured: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def measure_archs(device: DeviceConfig, archs: Iterable[Arch], out: str | Path,
                  shard: str | tuple[int, int] | None = None, workdir: str | Path | None = None,
                  progress: bool = True, keep_going: bool = False, interleave: int = 1,
                  ) -> MeasureSummary:
    """Measure every protocol of ``device`` on this shard of ``archs`` (see module docstring).

    With ``keep_going`` a failing architecture (or block) is logged in the summary and the job
    moves on; otherwise the error propagates (everything measured before is already on disk).
    """
    from tqdm import tqdm

    from anb.collect_throughput.backends import get_backend
    from anb.collect_throughput.measure import measure_interleaved

    if interleave < 1:
        raise ValueError(f"interleave={interleave} is invalid; allowed: an integer >= 1")
    todo = shard_of(list(archs), shard)
    summary = MeasureSummary()
    backends = {} if device.remote else {p.backend: get_backend(p.backend)
                                         for p in device.protocols}
    workdir = Path(workdir) if workdir else Path(out) / device.name / ".work"
    records = {}
    for arch in todo:
        record = read_result(result_path(out, device.name, arch)) or arch_record(arch, [])
        if all(p.key in record["platform_perf"] for p in device.protocols):
            summary.skipped.append(arch.id)
        else:
            records[arch.id] = (arch, record)
    pending = list(records.values())
    bar = tqdm(total=len(pending), desc=f"measure {device.name}", unit="arch",
               disable=not progress)
    for start in range(0, len(pending), interleave):
        block = pending[start:start + interleave]
        try:
            for protocol in device.protocols:
                missing = [(a, r) for a, r in block if protocol.key not in r["platform_perf"]]
                if not missing:
                    continue
                if device.remote:  # a board reached over a transport: see .remote
                    from anb.collect_throughput.remote import measure_remote_archs

                    ms = measure_remote_archs(device, protocol, [a for a, _ in missing], workdir)
                else:
                    ms = measure_interleaved([a for a, _ in missing], protocol, workdir,
                                             backends[protocol.backend])
                for (arch, record), m in zip(missing, ms):
                    record["platform_perf"][m.key] = m.to_perf_entry()
                    atomic_write_json(result_path(out, device.name, arch), record)
                bar.set_postfix_str(f"{ms[-1].key}={ms[-1].value:.4g} cv={ms[-1].cv:.3f}")
        except Exception as err:  # noqa: BLE001 - reported per block with keep_going
            if not keep_going:
                raise
            for arch, _ in block:
                summary.failed[arch.id] = f"{type(err).__name__}: {err}"
            log.warning("architectures %s failed: %s", [str(a) for a, _ in block], err)
            bar.update(len(block))
            continue
        summary.measured += [a.id for a, _ in block]
        bar.update(len(block))
    bar.close()
    return summary
