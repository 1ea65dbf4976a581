"""Device configs of every kind: a protocol config (``configs/devices/*.toml``: this host's
back-ends, a plug-in's back-end, or a board over its ``[remote]`` table), a Qualcomm SNPE one
(``configs/devices/qualcomm/*.toml``) or an FPGA board (``[fpga]`` + ``[remote]``,
:mod:`.fpga`). The one place that tells them apart by the config's ``kind``
(:mod:`anb.collect_throughput.device_kinds`): read a config's table, load it, and turn it into
its :class:`~anb.collect_throughput.targets.base.MeasureTarget`.
A config is a TOML path, a shipped name, or the name of an installed package's config (an
``anb.devices`` entry point, :data:`~anb.collect_throughput.registries.DEVICES`).

Every caller that takes a device for measurement (``anb measure``, ``anb queue submit``, ``anb
search --measure``, the queue worker's ``measure`` stage) goes through :func:`load_target` /
:func:`as_target`.
"""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from anb.collect_throughput.device_kinds import (
    DEVICE_KINDS,
    FPGA,
    LOCAL,
    REMOTE,
    device_kind,
)
from anb.collect_throughput.registries import DEVICES
from anb.collect_throughput.targets import fpga
from anb.collect_throughput.targets.base import MeasureTarget
from anb.collect_throughput.targets.qualcomm import config as qc
from anb.collect_throughput.timing.protocol import (
    CONFIG_DIR,
    DeviceConfig,
    available_devices,
    device_from_mapping,
)
from anb.io import read_text
from anb.searchspace.registry import DEFAULT_SPACE


def config_kind(data: Mapping[str, Any]) -> str:
    """What kind of device config a table is, in words (for errors)."""
    try:
        return DEVICE_KINDS[device_kind(data)]
    except ValueError:
        return "a device config of no known kind"


def device_names() -> dict[str, list[str]]:
    """The device configs that can be named: shipped protocol and Qualcomm ones, and those of
    installed packages."""
    return {"protocol": available_devices(),
            "qualcomm": sorted(p.stem for p in qc.QUALCOMM_DIR.glob("*.toml")),
            "installed": DEVICES.names()}


def _read_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the backport, a dependency there
        import tomli as tomllib
    try:
        return tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"device config {str(path)!r} is not valid TOML: {err}") from None


def read_device_table(spec: str | Path) -> dict[str, Any]:
    """The TOML table of a device config of either kind: a path, a shipped name (``cpu-ort``,
    ``snpe-dsp``) or an installed package's (an ``anb.devices`` entry point naming a table or
    a TOML file)."""
    path = Path(spec)
    if not path.is_file() and not path.suffix:
        path = next((p for p in (CONFIG_DIR / f"{spec}.toml", qc.QUALCOMM_DIR / f"{spec}.toml")
                     if p.is_file()), path)
        if not path.is_file() and str(spec) in DEVICES:
            found = DEVICES.load(str(spec))
            if isinstance(found, Mapping):
                return dict(found)
            path = Path(found)
    if not path.is_file():
        names = device_names()
        raise ValueError(f"device={str(spec)!r} is invalid; allowed: a TOML file, a shipped "
                         f"protocol config {names['protocol']}, a Qualcomm config "
                         f"{names['qualcomm']} or an installed one {names['installed']}")
    return _read_toml(path)


def load_any_device(spec: str | Path | Mapping[str, Any],
                    overrides: Mapping[str, Any] | None = None,
                    *, space: str) -> Any:
    """A device config of either kind measuring ``space`` from a TOML path, a name (see
    :func:`read_device_table`) or a parsed table. ``overrides`` apply to every protocol of a
    protocol config, and replace top-level fields of a Qualcomm one (e.g. ``{"duration":
    10}``). An error names the config and what kind of config it was read as."""
    data = dict(spec) if isinstance(spec, Mapping) else read_device_table(spec)
    where = f"device config {str(spec)!r}" if not isinstance(spec, Mapping) else \
        f"device config {data.get('name')!r}"
    try:
        return _load(data, overrides, space)
    except ValueError as err:
        raise ValueError(f"{where} ({config_kind(data)}): {err}") from None


def _load(data: dict[str, Any], overrides: Mapping[str, Any] | None, space: str) -> Any:
    kind = device_kind(data)
    if kind == FPGA:
        return fpga.device_from_mapping(data, overrides, space=space)
    if kind in (LOCAL, REMOTE):
        return device_from_mapping(data, overrides, space=space)
    device = qc.device_from_mapping(data)
    if space != DEFAULT_SPACE:
        raise ValueError(f"search space {space!r} is invalid; allowed: {DEFAULT_SPACE!r} (a "
                         "Qualcomm device measures it only)")
    if overrides:
        unknown = sorted(set(overrides) - set(qc.QualcommDevice.__dataclass_fields__) - {"name"})
        if unknown:
            raise ValueError(f"override {unknown[0]}={overrides[unknown[0]]!r} is invalid; "
                             f"allowed: a Qualcomm config field "
                             f"{sorted(set(qc.QualcommDevice.__dataclass_fields__) - {'name'})}")
        device = dataclasses.replace(device, **dict(overrides))
    return device


def as_target(config: Any) -> MeasureTarget:
    """The :class:`MeasureTarget` of a loaded config of either kind (a target is returned
    as is)."""
    if isinstance(config, MeasureTarget):
        return config
    if isinstance(config, qc.QualcommDevice):
        from anb.collect_throughput.targets.qualcomm.stages import QualcommTarget

        return QualcommTarget(config)
    if isinstance(config, fpga.FpgaDevice):
        return fpga.FpgaTarget(config)
    if isinstance(config, DeviceConfig) and config.remote is not None:
        from anb.collect_throughput.targets.remote import RemoteTarget

        return RemoteTarget(config)
    if isinstance(config, DeviceConfig):
        from anb.collect_throughput.targets.local import LocalTarget

        return LocalTarget(config)
    raise TypeError(f"not a device config: {config!r}")


def load_target(spec: str | Path | Mapping[str, Any],
                overrides: Mapping[str, Any] | None = None,
                *, space: str) -> MeasureTarget:
    """:func:`load_any_device` then :func:`as_target`."""
    return as_target(load_any_device(spec, overrides, space=space))


def device_table(spec: str) -> tuple[str, dict[str, Any]]:
    """A device config's name and TOML table (validated; either kind), by shipped name or path:
    what a queued job carries, so any worker can load the device."""
    try:
        table = read_device_table(spec)
        return load_any_device(table, space=DEFAULT_SPACE).name, table
    except ValueError as err:
        raise ValueError(f"--device {spec!r}: {err}") from None
