"""Measurement protocols: what is measured (device, batch, precision, ...) and the stopping rule.

A device is described by a TOML file in ``anb/configs/devices/`` (or any path)::

    kind = "local"              # this host's back-ends; "remote": a board over [remote]
    name = "cpu-ort"            # used in the record keys throughput_<name> / latency_<name>
    backend = "onnxruntime"     # a registered back-end (onnxruntime, openvino, tvm, cuda...)
    precision = "fp32"
    threads = 1
    pinned = true               # pin the process to `threads` CPUs
    resolution = 224            # the anb-mnasnet protocol's (see below)
    [latency]                   # one table per measured kind; each may override the settings
    batch = 1
    [throughput]
    batch = 8
    [warmup]                    # WarmupRule fields
    [stopping]                  # StoppingRule fields

A config describes a device, not a search space: the space is chosen when it is loaded
(``space=``, ``anb measure --space``). Its ``resolution`` is the one the default space
``anb-mnasnet`` is measured at; another space is measured at the resolution given as an
override (``--resolution``), else at each architecture's own input size (the space's task
resolution, or the architecture's ``r`` in ``ofa-mbv3``): ``Protocol.resolution`` is then None.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anb import resources
from anb.collect_throughput.device_kinds import LOCAL, REMOTE, without_kind
from anb.collect_throughput.device_kinds import PROTOCOL_TABLES as KINDS
from anb.collect_throughput.registries import BACKENDS
from anb.searchspace.registry import DEFAULT_SPACE, space_names

INT8_BACKENDS = ("onnxruntime-int8", "openvino-int8", "vart")
"""The built-in back-ends that run int8 (and only int8); a plug-in back-end checks its own
precisions (``Backend.check``)."""
DEVICE_BACKENDS = ("cuda", "xla", "vart")
"""The built-in back-ends whose work is not this thread's CPU time (no ``clock = "cpu"``)."""
PRECISIONS = ("fp32", "fp16", "bf16", "int8")
LAYOUTS = ("nchw", "channels_last")
INPUTS = ("synthetic", "imagenet")
CLOCKS = ("wall", "cpu")
QUANTIZATIONS = ("u8s8", "per-channel", "dpu")
_DEVICE_NAME = re.compile(r"[A-Za-z0-9.\-]+")  # as anb.records.perf_key
CONFIG_DIR = resources.CONFIG_DIR / "devices"
FINGERPRINT_FIELDS = ("device", "backend", "kind", "batch", "resolution", "precision", "threads",
                      "layout", "inputs", "clock", "pinned", "compile", "cudnn_benchmark",
                      "allow_fallbacks", "calibration_images", "quantization", "warmup",
                      "stopping")
"""What makes two measurements comparable: every setting that can change the number (not where
the images lie, nor how a board is reached). A field added later joins only by being listed."""
LATER_FINGERPRINT_FIELDS = {"cuda_graphs": False, "space": DEFAULT_SPACE}
"""Fields added after results were stored, with their default: each joins the fingerprint only
when set to something else, so the fingerprints of results taken before it existed still hold."""


def _fail(field_name: str, value: Any, allowed: str) -> None:
    raise ValueError(f"{field_name}={value!r} is invalid; allowed: {allowed}")


def _positive(field_name: str, value: Any, integer: bool = True, zero: bool = False) -> None:
    kind = int if integer else (int, float)
    wrong_type = isinstance(value, bool) or not isinstance(value, kind)
    if wrong_type or value < 0 or (value == 0 and not zero):
        what = f"{'' if zero else 'positive '}{'integer' if integer else 'number'}"
        _fail(field_name, value, f"a {what}{' >= 0' if zero else ''}")


@dataclass(frozen=True)
class WarmupRule:
    """Warm up until the per-step time is stable (and no compilation happens any more).

    Stable: the median of the last ``window`` steps is within ``tolerance`` (relative) of the
    median of the ``window`` steps before, and the compile counter (XLA) did not grow during the
    last ``window`` steps. Bounded by ``max_steps`` and ``max_seconds``.
    """

    min_steps: int = 3
    window: int = 3
    tolerance: float = 0.05
    max_steps: int = 200
    max_seconds: float = 30.0

    def __post_init__(self) -> None:
        for name in ("min_steps", "window", "max_steps"):
            _positive(f"warmup.{name}", getattr(self, name))
        for name in ("tolerance", "max_seconds"):
            _positive(f"warmup.{name}", getattr(self, name), integer=False)


@dataclass(frozen=True)
class StoppingRule:
    """Repeat until the confidence interval of the (trimmed) mean is within ``rel_ci``.

    A repetition times ``inner`` back-to-back steps, ``inner`` chosen after warm-up so that one
    repetition lasts at least ``min_rep_seconds``. Stops when ``n >= min_reps`` and the
    half-width of the ``confidence`` interval of the ``trim``-trimmed mean is at most ``rel_ci``
    of it, or when ``budget_seconds`` or ``max_reps`` is reached (the reason is recorded).

    When several architectures are timed round-robin, the machine's speed drift is estimated at
    each repetition from the ``drift_window`` repetitions of *other* architectures on each side
    and divided out (:func:`~anb.collect_throughput.timing.stats.drift_factors`); the raw times and
    the factors are both recorded, and the rule and the statistics use the corrected times.
    ``drift_window = 0`` turns the correction off.
    """

    min_reps: int = 5
    max_reps: int = 1000
    rel_ci: float = 0.01
    confidence: float = 0.95
    trim: float = 0.1
    budget_seconds: float = 10.0
    min_rep_seconds: float = 0.05
    drift_window: int = 2

    def __post_init__(self) -> None:
        for name in ("min_reps", "max_reps"):
            _positive(f"stopping.{name}", getattr(self, name))
        _positive("stopping.drift_window", self.drift_window, zero=True)
        for name in ("rel_ci", "budget_seconds"):
            _positive(f"stopping.{name}", getattr(self, name), integer=False)
        _positive("stopping.min_rep_seconds", self.min_rep_seconds, integer=False, zero=True)
        if not 0 < self.confidence < 1:
            _fail("stopping.confidence", self.confidence, "a number in (0, 1)")
        if not 0 <= self.trim < 0.5:
            _fail("stopping.trim", self.trim, "a number in [0, 0.5)")
        if self.max_reps < self.min_reps:
            _fail("stopping.max_reps", self.max_reps, f">= stopping.min_reps ({self.min_reps})")


@dataclass(frozen=True)
class Protocol:
    """One measurement: a kind on a device at a batch size, precision, resolution."""

    device: str
    backend: str
    kind: str = "latency"
    batch: int = 1
    resolution: int | None = 224
    """Input size; None: each architecture's own (see the module docstring)."""
    precision: str = "fp32"
    threads: int = 1
    layout: str = "nchw"
    inputs: str = "synthetic"
    clock: str = "wall"
    """``wall``: elapsed time (device-synchronised). ``cpu``: the calling thread's CPU time, for
    single-threaded CPU back-ends on a shared machine (excludes preemption by other work)."""
    imagenet_dir: str | None = None
    pinned: bool = False
    """Pin the measuring process to ``threads`` CPUs (the last ones it may use) before timing."""
    compile: bool = False
    cudnn_benchmark: bool = True
    allow_fallbacks: bool = False
    calibration_images: int = 64
    quantization: str = "per-channel"
    """int8 scheme of the onnxruntime-int8 back-end: ``u8s8`` (uint8 activations, what the
    ``cpu-int8`` device sets), ``per-channel`` (int8 activations) or ``dpu`` (per-tensor,
    power-of-two scales, as Xilinx DPUs run); see
    :mod:`anb.collect_throughput.backends.int8_quantize`. The default stays ``per-channel``: it is
    in every protocol's fingerprint, int8 or not."""
    cuda_graphs: bool = False
    """CUDA back-end: capture the forward once as a CUDA graph and replay it per step, so a
    batch-1 request times the device's work, not Python's kernel launches."""
    space: str = DEFAULT_SPACE
    """The search space whose networks are measured (:mod:`anb.searchspace.registry`)."""
    warmup: WarmupRule = field(default_factory=WarmupRule)
    stopping: StoppingRule = field(default_factory=StoppingRule)

    def __post_init__(self) -> None:
        if not isinstance(self.device, str) or not _DEVICE_NAME.fullmatch(self.device):
            _fail("device", self.device, "a device name of letters, digits, '.' and '-'")
        for name, allowed in (("backend", BACKENDS.names()), ("kind", KINDS),
                              ("precision", PRECISIONS), ("layout", LAYOUTS), ("inputs", INPUTS),
                              ("clock", CLOCKS), ("quantization", QUANTIZATIONS)):
            if getattr(self, name) not in allowed:
                _fail(name, getattr(self, name), str(list(allowed)))
        if self.space not in space_names():
            _fail("space", self.space, str(space_names()))
        for name in ("batch", "threads", "calibration_images"):
            _positive(name, getattr(self, name))
        if self.resolution is not None:
            _positive("resolution", self.resolution)
        if self.space == DEFAULT_SPACE and (self.resolution is None or self.resolution < 32):
            _fail("resolution", self.resolution, "an integer >= 32 (the network downsamples 32x)")
        if self.clock == "cpu" and (self.threads != 1 or self.backend in DEVICE_BACKENDS):
            _fail("clock", self.clock, "'wall' unless threads=1 on a CPU back-end")
        if self.inputs == "imagenet" and not self.imagenet_dir:
            _fail("imagenet_dir", self.imagenet_dir, "a folder of images when inputs='imagenet'")
        if self.cuda_graphs and (self.backend != "cuda" or self.compile):
            _fail("cuda_graphs", self.cuda_graphs, "true only with backend='cuda' and "
                  "compile=false")
        if BACKENDS.is_builtin(self.backend) and \
                (self.precision == "int8") != (self.backend in INT8_BACKENDS):
            _fail("precision", self.precision, f"'int8' exactly with the {'/'.join(INT8_BACKENDS)} "
                  "back-ends")

    @property
    def key(self) -> str:
        """The ``platform_perf`` key this measurement fills: ``<kind>_<device>``."""
        return f"{self.kind}_{self.device}"

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def fingerprint(self) -> str:
        """See :func:`protocol_fingerprint`: equal exactly when the numbers are comparable."""
        return protocol_fingerprint(self.as_dict())

    def replace(self, **changes: Any) -> Protocol:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class DeviceConfig:
    """A device and the protocols measured on it (one per kind)."""

    name: str
    protocols: tuple[Protocol, ...]
    remote: dict[str, Any] | None = None
    """The ``[remote]`` table: how to reach the board
    (:class:`~anb.collect_throughput.targets.remote.RemoteTarget`); None: this host
    (:class:`~anb.collect_throughput.targets.local.LocalTarget`)."""

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(p.key for p in self.protocols)

    @property
    def space(self) -> str:
        """The search space the protocols measure (one for all of them)."""
        return self.protocols[0].space


def for_space(config: DeviceConfig, space: str) -> DeviceConfig:
    """``config`` measuring ``space``: its protocols as a config loaded with ``space=space`` and
    no resolution override has them (another space than the default at each architecture's
    own resolution). A config already measuring ``space`` is returned as it is."""
    if config.space == space:
        return config
    if config.space != DEFAULT_SPACE:
        raise ValueError(f"device {config.name!r} is loaded for search space {config.space!r}; "
                         f"it cannot be switched to {space!r}")
    resolution = {} if space == DEFAULT_SPACE else {"resolution": None}
    return dataclasses.replace(config, protocols=tuple(
        p.replace(space=space, **resolution) for p in config.protocols))


_PROTOCOL_FIELDS = {f.name for f in dataclasses.fields(Protocol)} - {"device", "kind", "warmup",
                                                                    "stopping", "space"}


def fingerprint_settings(protocol: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`FINGERPRINT_FIELDS` of a protocol given as a dict (a stored record's), and
    each of :data:`LATER_FINGERPRINT_FIELDS` set to other than its default."""
    settings = {k: protocol[k] for k in FINGERPRINT_FIELDS if k in protocol}
    settings.update({k: protocol[k] for k, default in LATER_FINGERPRINT_FIELDS.items()
                     if protocol.get(k, default) != default})
    return settings


def fingerprint_of(settings: Mapping[str, Any]) -> str:
    """16 hex digits of the SHA-256 of the canonical JSON of ``settings``."""
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def protocol_fingerprint(protocol: Mapping[str, Any]) -> str:
    """:func:`fingerprint_of` the protocol's :func:`fingerprint_settings`."""
    return fingerprint_of(fingerprint_settings(protocol))


def protocol_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """``field: a -> b`` for every fingerprinted setting two protocols disagree on."""
    fa, fb = fingerprint_settings(a), fingerprint_settings(b)
    parts = []
    for name in (*FINGERPRINT_FIELDS, *LATER_FINGERPRINT_FIELDS):
        default = LATER_FINGERPRINT_FIELDS.get(name)
        x, y = fa.get(name, default), fb.get(name, default)
        if isinstance(x, Mapping) and isinstance(y, Mapping):
            parts += [f"{name}.{k}: {x.get(k)!r} -> {y.get(k)!r}"
                      for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)]
        elif x != y:
            parts.append(f"{name}: {x!r} -> {y!r}")
    return ", ".join(parts) or "no fingerprinted setting"


def entry_fingerprint(entry: Mapping[str, Any]) -> str | None:
    """The protocol fingerprint of a ``platform_perf`` entry: stored, else computed from its
    ``protocol``; None when it records neither (e.g. the released dataset)."""
    if entry.get("protocol_fingerprint"):
        return str(entry["protocol_fingerprint"])
    if isinstance(entry.get("protocol"), Mapping):
        return protocol_fingerprint(entry["protocol"])
    return None


def _rule(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, Mapping):
        _fail(where, data, "a table of " + ", ".join(f.name for f in dataclasses.fields(cls)))
    allowed = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - allowed)
    if unknown:
        _fail(f"{where}.{unknown[0]}", data[unknown[0]], f"a known field {sorted(allowed)}")
    return cls(**data)


def device_from_mapping(data: Mapping[str, Any], overrides: Mapping[str, Any] | None = None,
                        *, space: str) -> DeviceConfig:
    """Build a :class:`DeviceConfig` measuring ``space`` from a parsed TOML table (see module
    docstring).

    ``overrides`` (e.g. ``{"resolution": 64, "stopping": {"budget_seconds": 1}}``) apply to
    every protocol.
    """
    overrides = dict(overrides or {})
    if "name" not in data:
        _fail("name", None, "a device name such as 'cpu-ort'")
    data = without_kind(data, LOCAL, REMOTE)
    name = data.pop("name")
    remote = data.pop("remote", None)
    kinds = {k: dict(data.pop(k) or {}) for k in KINDS if k in data}
    warmup = {**data.pop("warmup", {}), **overrides.pop("warmup", {})}
    stopping = {**data.pop("stopping", {}), **overrides.pop("stopping", {})}
    unknown = sorted(set(data) - _PROTOCOL_FIELDS)
    if unknown:
        _fail(unknown[0], data[unknown[0]], f"a known setting {sorted(_PROTOCOL_FIELDS)}")
    protocols = []
    for kind, table in kinds.items():
        kind_warmup, kind_stopping = table.pop("warmup", {}), table.pop("stopping", {})
        settings = {**data, **table, **{k: v for k, v in overrides.items() if k != "batch"}}
        if kind == "throughput" and "batch" in overrides:
            settings["batch"] = overrides["batch"]
        if space != DEFAULT_SPACE:  # the config's resolution is the default space's
            settings["resolution"] = overrides.get("resolution")
        bad = sorted(set(settings) - _PROTOCOL_FIELDS)
        if bad:
            _fail(f"{kind}.{bad[0]}", settings[bad[0]],
                  f"a known setting {sorted(_PROTOCOL_FIELDS)}")
        protocols.append(Protocol(
            device=name, kind=kind, space=space,
            warmup=_rule(WarmupRule, {**warmup, **kind_warmup}, "warmup"),
            stopping=_rule(StoppingRule, {**stopping, **kind_stopping}, "stopping"),
            **settings,
        ))
    return DeviceConfig(name=name, protocols=tuple(protocols), remote=remote)


def available_devices() -> list[str]:
    """Names of the shipped device configs."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.toml"))


def load_device(name_or_path: str | Path, overrides: Mapping[str, Any] | None = None,
                *, space: str) -> DeviceConfig:
    """Load a shipped device config by name (``cpu-ort``) or a TOML file by path, measuring
    ``space``."""
    # imported here: the rest of this module also runs on a board's older Python
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the backport, a dependency there
        import tomli as tomllib

    path = Path(name_or_path)
    if not path.suffix:
        path = CONFIG_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        _fail("device", str(name_or_path), f"a TOML file or one of {available_devices()}")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"device config {str(path)!r} is not valid TOML: {err}") from None
    return device_from_mapping(data, overrides, space=space)
