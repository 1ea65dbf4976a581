"""The ``kind`` of a device config: which target measures it, named in every config and checked
against the tables the config has.

A config written before the field loads only where its tables tell the kind unambiguously
(:func:`inferred_kind`): an ``sdk`` field and no measurement table is ``qualcomm``, an ``[fpga]``
table is ``fpga``, ``[latency]`` / ``[throughput]`` tables are ``remote`` with a ``[remote]``
table and ``local`` without one; anything else needs ``kind``.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LOCAL, REMOTE, FPGA, QUALCOMM = "local", "remote", "fpga", "qualcomm"
DEVICE_KINDS = {
    LOCAL: "a protocol config measured by this host's back-ends (tables [latency]/[throughput])",
    REMOTE: "a protocol config measured on a board (tables [latency]/[throughput] and [remote])",
    FPGA: "an FPGA board config (tables [fpga] and [remote])",
    QUALCOMM: "a Qualcomm config (sdk = 'snpe')",
}
"""Each kind and what a config of it holds."""
PROTOCOL_TABLES = ("latency", "throughput")
"""The measurement tables of a protocol config (one protocol each)."""


def inferred_kind(data: Mapping[str, Any]) -> str | None:
    """The kind a table without ``kind`` shows (see module docstring); None when it shows none
    or more than one."""
    protocols, fpga, sdk = (any(t in data for t in PROTOCOL_TABLES), "fpga" in data,
                            "sdk" in data)
    if protocols + fpga + sdk != 1:
        return None
    if sdk:
        return QUALCOMM
    if fpga:
        return FPGA
    return REMOTE if "remote" in data else LOCAL


def device_kind(data: Mapping[str, Any]) -> str:
    """The kind of a device config table: its ``kind`` field, checked against its tables, or
    the one :func:`inferred_kind` finds in a config written before the field."""
    allowed = sorted(DEVICE_KINDS)
    kind = data.get("kind")
    if kind is None:
        found = inferred_kind(data)
        if found is None:
            raise ValueError(f"kind=None is invalid; allowed: one of {allowed} (a config "
                             "without kind loads only when its tables show one kind: 'sdk' "
                             "for qualcomm, [fpga], or [latency]/[throughput] with [remote] "
                             "for remote and without for local)")
        return found
    if kind not in DEVICE_KINDS:
        raise ValueError(f"kind={kind!r} is invalid; allowed: one of {allowed}")
    if kind in (LOCAL, REMOTE) and not any(t in data for t in PROTOCOL_TABLES):
        raise ValueError(f"kind={kind!r} needs at least one of the tables "
                         f"{list(PROTOCOL_TABLES)}")
    if kind == LOCAL and "remote" in data:
        raise ValueError("kind='local' is invalid with a [remote] table; allowed: 'remote' (a "
                         "board over [remote]), or no [remote] table")
    if kind == REMOTE and "remote" not in data:
        raise ValueError("kind='remote' needs a [remote] table (transport, runtime...); "
                         "allowed without one: 'local'")
    if kind == FPGA and "fpga" not in data:
        raise ValueError("kind='fpga' needs an [fpga] table (xmodels, ...)")
    return str(kind)


def without_kind(data: Mapping[str, Any], *kinds: str) -> dict[str, Any]:
    """``data`` less its ``kind`` field for the loader of ``kinds``: a ``kind`` it names is
    checked (:func:`device_kind`) and refused (ValueError) unless it is one of ``kinds``; a table
    without one is taken as the loader's."""
    if "kind" not in data:
        return dict(data)
    kind = device_kind(data)
    if kind not in kinds:
        raise ValueError(f"kind={kind!r} is invalid here; allowed: {list(kinds)} "
                         f"({'; '.join(DEVICE_KINDS[k] for k in kinds)})")
    return {k: v for k, v in data.items() if k != "kind"}
