"""``anb measure``: measure a list of architectures on a device, resumable and shardable.

Results go to ``<out>/<device>/<arch_id>.json``, one per-architecture record per device, written
atomically after every measurement; a (architecture, key) already in that file is skipped, so
an interrupted job picks up where it stopped and loses at most the measurement in flight.
Shard ``i/k`` takes positions ``i, i + k, ...`` of the de-duplicated list, like the sampler.
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
                  progress: bool = True, keep_going: bool = False) -> MeasureSummary:
    """Measure every protocol of ``device`` on this shard of ``archs`` (see module docstring).

    With ``keep_going`` a failing architecture is logged in the summary and the job moves on;
    otherwise the error propagates (everything measured before it is already on disk).
    """
    from tqdm import tqdm

    from anb.collect_throughput.backends import get_backend
    from anb.collect_throughput.measure import measure

    todo = shard_of(list(archs), shard)
    summary = MeasureSummary()
    backends = {p.backend: get_backend(p.backend) for p in device.protocols}
    workdir = Path(workdir) if workdir else Path(out) / device.name / ".work"
    bar = tqdm(todo, desc=f"measure {device.name}", unit="arch", disable=not progress)
    for arch in bar:
        path = result_path(out, device.name, arch)
        record = read_result(path) or arch_record(arch, [])
        missing = [p for p in device.protocols if p.key not in record["platform_perf"]]
        if not missing:
            summary.skipped.append(arch.id)
            continue
        try:
            for protocol in missing:
                m = measure(arch, protocol, workdir, backends[protocol.backend])
                record["platform_perf"][m.key] = m.to_perf_entry()
                atomic_write_json(path, record)
                bar.set_postfix_str(f"{m.key}={m.value:.4g} cv={m.cv:.3f}")
        except Exception as err:  # noqa: BLE001 - reported per architecture with keep_going
            if not keep_going:
                raise
            summary.failed[arch.id] = f"{type(err).__name__}: {err}"
            log.warning("architecture %s failed: %s", arch, err)
            continue
        summary.measured.append(arch.id)
    return summary
