"""Device configs of either kind: a protocol config (``configs/devices/*.toml``: this host's
back-ends or a board over its ``[remote]`` table) or a Qualcomm SNPE one
(``configs/devices/qualcomm/*.toml``). The one place that tells them apart: read a config's
table, load it, and turn it into its :class:`~anb.collect_throughput.target.MeasureTarget`.

Every caller that takes a device for measurement (``anb measure``'s queue counterpart, ``anb
search --measure``, the queue worker's ``measure`` stage) goes through :func:`load_target` /
:func:`as_target`.
"""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from anb.collect_throughput.protocol import (
    CONFIG_DIR,
    KINDS,
    DeviceConfig,
    available_devices,
    device_from_mapping,
)
from anb.collect_throughput.qualcomm import config as qc
from anb.collect_throughput.target import MeasureTarget


def is_qualcomm_table(data: Mapping[str, Any]) -> bool:
    """A Qualcomm SNPE/QNN device table: it names an ``sdk``, or it has no protocol kind
    table and only Qualcomm fields."""
    if "sdk" in data:
        return True
    return not any(k in data for k in KINDS) and set(data) <= set(
        qc.QualcommDevice.__dataclass_fields__)


def read_device_table(spec: str | Path) -> dict[str, Any]:
    """The TOML table of a device config of either kind: a path or a shipped name
    (``cpu-ort``, ``snpe-dsp``)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the backport, a dependency there
        import tomli as tomllib

    path = Path(spec)
    if not path.is_file() and not path.suffix:
        path = next((p for p in (CONFIG_DIR / f"{spec}.toml", qc.QUALCOMM_DIR / f"{spec}.toml")
                     if p.is_file()), path)
    if not path.is_file():
        raise ValueError(f"device={str(spec)!r} is invalid; allowed: a TOML file or one of "
                         f"{available_devices()} or of the Qualcomm configs "
                         f"{sorted(p.stem for p in qc.QUALCOMM_DIR.glob('*.toml'))}")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"device config {str(path)!r} is not valid TOML: {err}") from None


def load_any_device(spec: str | Path | Mapping[str, Any],
                    overrides: Mapping[str, Any] | None = None) -> Any:
    """A device config of either kind from a TOML path, a shipped name (``cpu-ort``,
    ``snpe-dsp``) or a parsed table. ``overrides`` apply to every protocol of a protocol
    config, and replace top-level fields of a Qualcomm one (e.g. ``{"duration": 10}``)."""
    data = dict(spec) if isinstance(spec, Mapping) else read_device_table(spec)
    if not is_qualcomm_table(data):
        return device_from_mapping(data, overrides)
    device = qc.device_from_mapping(data)
    if overrides:
        unknown = sorted(set(overrides) - set(qc.QualcommDevice.__dataclass_fields__) - {"name"})
        if unknown:
            raise ValueError(f"device {device.name!r}: override {unknown[0]}="
                             f"{overrides[unknown[0]]!r} is not a Qualcomm config field")
        device = dataclasses.replace(device, **dict(overrides))
    return device


def as_target(config: Any) -> MeasureTarget:
    """The :class:`MeasureTarget` of a loaded config of either kind (a target is returned
    as is)."""
    if isinstance(config, MeasureTarget):
        return config
    if isinstance(config, qc.QualcommDevice):
        from anb.collect_throughput.qualcomm.stages import QualcommTarget

        return QualcommTarget(config)
    if isinstance(config, DeviceConfig):
        from anb.collect_throughput.driver import ProtocolTarget

        return ProtocolTarget(config)
    raise TypeError(f"not a device config: {config!r}")


def load_target(spec: str | Path | Mapping[str, Any],
                overrides: Mapping[str, Any] | None = None) -> MeasureTarget:
    """:func:`load_any_device` then :func:`as_target`."""
    return as_target(load_any_device(spec, overrides))


def device_table(spec: str) -> tuple[str, dict[str, Any]]:
    """A device config's name and TOML table (validated; either kind), by shipped name or path:
    what a queued job carries, so any worker can load the device."""
    try:
        table = read_device_table(spec)
        return load_any_device(table).name, table
    except ValueError as err:
        raise ValueError(f"--device {spec!r}: {err}") from None
