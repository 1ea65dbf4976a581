"""The architectures a command measures or queues: a dataset, a text file, ``sample:N[:seed]``
or comma-separated strings of one search space, and the shard ``i/k`` of that list."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from anb.io import read_text
from anb.searchspace.base import Space
from anb.searchspace.sampler import Sampler, parse_shard

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

