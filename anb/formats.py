"""The version of every format anb persists: written into each file, checked when it is read.

A writer puts :func:`stamp` into what it writes; a reader passes the version it found to
:func:`check`, which accepts the current version and the older ones still read, and refuses a
newer one (:class:`NewerFormat`, naming the file, both versions and "upgrade anb") or one it
does not know. Files written before a format carried a version hold none: where that format
existed unversioned (``unversioned=True``), a missing version reads as version 1, the layout
those files have; surrogate and adapted artifacts always carried one, so a missing one is
refused. The table of formats is in ``docs/concepts/records.md`` ("Formats and versions").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: The field (a JSON key, a queue table column) that holds a format's version.
VERSION_FIELD = "format_version"
#: The version a file written before its format carried one is read as.
UNVERSIONED = 1


class NewerFormat(ValueError):
    """A file written by a newer anb, in a version of its format this one cannot read."""


@dataclass(frozen=True)
class Format:
    """A persisted format: what it is called in messages, the version written and the oldest
    version still read; ``unversioned``: files without a version are read as version 1."""

    what: str
    current: int
    oldest: int = 1
    unversioned: bool = True


FORMATS: dict[str, Format] = {
    "record": Format("record", 1),
    "merge": Format("merge output", 1),
    "queue": Format("queue database", 1),
    "plan": Format("plan", 1),
    "search": Format("search results", 1),
    "surrogate": Format("surrogate artifact", 1, unversioned=False),
    # 2: the adapted model's own per-layer model (own_blend, own_weights, own_floor); 3: the
    # analytic proxy that can win over the transfer (proxy, proxy_coef, proxy_range,
    # transfer_rmse, proxy_rmse); 4: a new board's analytic prior (board_prior; its components
    # follow the op totals in op_scale and nnls_weights) and the architecture-aware ridge in
    # the blend (embed_blend, embed_intercept, embed_mean, embed_scale, embed_coef,
    # embed_lambdas)
    "adapted": Format("adapted surrogate", 4, unversioned=False),
}


def get_format(name: str) -> Format:
    """The registered format ``name`` (an unknown name is a programming error)."""
    if name not in FORMATS:
        raise KeyError(f"unknown format {name!r}; registered: {sorted(FORMATS)}")
    return FORMATS[name]


def current(name: str) -> int:
    """The version of ``name`` this anb writes."""
    return get_format(name).current


def stamp(name: str) -> dict[str, int]:
    """The version field to write into a file of format ``name``."""
    return {VERSION_FIELD: current(name)}


def check(name: str, found: Any, source: str) -> int:
    """The version of a file of format ``name`` at ``source`` (``found``: its version field,
    None when absent), checked: the current version and older ones down to ``oldest`` are
    returned; a newer one raises :class:`NewerFormat`, anything else ValueError."""
    fmt = get_format(name)
    readable = f"{fmt.oldest}" if fmt.oldest == fmt.current else f"{fmt.oldest} to {fmt.current}"
    if found is None:
        if fmt.unversioned:
            return UNVERSIONED
        raise ValueError(f"{source}: the {fmt.what} has no {VERSION_FIELD}; this anb reads "
                         f"version {readable}")
    if isinstance(found, bool) or not isinstance(found, int):
        raise ValueError(f"{source}: {fmt.what} {VERSION_FIELD} {found!r} is not a version "
                         f"number; this anb reads version {readable}")
    if found > fmt.current:
        raise NewerFormat(f"{source}: the {fmt.what} is format version {found}, newer than "
                          f"version {fmt.current} this anb reads; upgrade anb to read it")
    if found < fmt.oldest:
        raise ValueError(f"{source}: the {fmt.what} is format version {found}, older than "
                         f"this anb reads (version {readable})")
    return found
