"""Qualcomm device configs: ``configs/devices/qualcomm/<name>.toml`` (or a path).

Fields (docs/background/devices.md, "Qualcomm SNPE and QNN", for the values in use)::

    kind = "qualcomm"
    name = "snpe-dsp"            # records get throughput_<name> / latency_<name>
    sdk = "snpe"                 # snpe | qnn
    runtime = "dsp"              # dsp | gpu_fp16 | cpu (dsp needs a quantized model)
    transport = "adb://SERIAL"   # local:// | ssh://user@host | adb://SERIAL
    remote_dir = "/data/local/tmp/anb"
    resolution = 224
    duration = 60                # seconds of snpe-throughput-net-run
    perf_profile = "balanced"
    latency_inputs = 10          # inputs timed by snpe-net-run for latency and per-layer times
    repeats = 3                  # throughput: runs of duration/repeats s; latency: net-runs
    [quantization]               # snpe-dlc-quantize options
    per_channel = true
    act_bitwidth = 8             # 8 | 16
    bias_bitwidth = 8            # 8 | 32
    act_quantizer = "tf"         # tf | enhanced | symmetric
    calibration_images = 64
"""
from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from anb.collect_throughput.device_kinds import QUALCOMM, without_kind
from anb.collect_throughput.timing.protocol import fingerprint_of
from anb.resources import CONFIG_DIR

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the backport, a dependency there
    import tomli as tomllib

RUNTIMES = {"dsp": "--use_dsp", "gpu_fp16": "--use_gpu_fp16", "cpu": "--use_cpu"}
PERF_PROFILES = ("balanced", "default", "high_performance", "sustained_high_performance",
                 "burst", "power_saver", "low_power_saver", "high_power_saver",
                 "low_balanced", "extreme_power_saver", "system_settings")
ACT_QUANTIZERS = ("tf", "enhanced", "symmetric")
QUALCOMM_DIR = CONFIG_DIR / "devices" / "qualcomm"


def _check(where: str, value: Any, ok: bool, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{where}={value!r} is invalid; allowed: {allowed}")


@dataclass(frozen=True)
class Quantization:
    per_channel: bool = True
    act_bitwidth: int = 8
    bias_bitwidth: int = 8
    act_quantizer: str = "tf"
    calibration_images: int = 64

    def __post_init__(self) -> None:
        _check("quantization.act_bitwidth", self.act_bitwidth, self.act_bitwidth in (8, 16),
               "8 or 16")
        _check("quantization.bias_bitwidth", self.bias_bitwidth, self.bias_bitwidth in (8, 32),
               "8 or 32")
        _check("quantization.act_quantizer", self.act_quantizer,
               self.act_quantizer in ACT_QUANTIZERS, str(list(ACT_QUANTIZERS)))
        _check("quantization.calibration_images", self.calibration_images,
               isinstance(self.calibration_images, int) and self.calibration_images >= 1,
               "an integer >= 1")


@dataclass(frozen=True)
class QualcommDevice:
    name: str
    sdk: str = "snpe"
    runtime: str = "dsp"
    transport: str = "local://"
    remote_dir: str = "/data/local/tmp/anb"
    resolution: int = 224
    duration: int = 60
    perf_profile: str = "balanced"
    latency_inputs: int = 10
    repeats: int = 3
    """Throughput is ``repeats`` runs of ``duration / repeats`` seconds (at least 1 s each) and
    latency ``repeats`` net-runs: their mean and standard deviation are recorded."""
    quantization: Quantization | None = field(default_factory=Quantization)

    def __post_init__(self) -> None:
        _check("sdk", self.sdk, self.sdk in ("snpe", "qnn"), "'snpe' or 'qnn'")
        _check("runtime", self.runtime, self.runtime in RUNTIMES, str(sorted(RUNTIMES)))
        _check("perf_profile", self.perf_profile, self.perf_profile in PERF_PROFILES,
               str(list(PERF_PROFILES)))
        for key in ("resolution", "duration", "latency_inputs", "repeats"):
            value = getattr(self, key)
            _check(key, value, isinstance(value, int) and value >= 1, "an integer >= 1")
        if self.runtime == "dsp" and self.quantization is None:
            raise ValueError("runtime='dsp' needs a [quantization] table: the DSP runs "
                             "quantized models only")

    @property
    def runtime_flag(self) -> str:
        return RUNTIMES[self.runtime]

    @property
    def precision(self) -> str:
        if self.runtime == "gpu_fp16":
            return "fp16"
        if self.runtime == "cpu" and self.quantization is None:
            return "fp32"
        q = self.quantization
        return f"int{q.act_bitwidth}" if q else "fp32"

    @property
    def run_seconds(self) -> int:
        """Seconds of one throughput run."""
        return max(1, round(self.duration / self.repeats))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def fingerprint_settings(self, kind: str) -> dict[str, Any]:
        """What makes two measurements of ``kind`` on this device comparable: every field
        but how the board is reached (``transport``, ``remote_dir``)."""
        settings = {k: v for k, v in self.as_dict().items()
                    if k not in ("transport", "remote_dir")}
        return {**settings, "device": settings.pop("name"), "kind": kind}

    def fingerprint(self, kind: str) -> str:
        """The protocol fingerprint of ``kind``'s measurements (as local devices have)."""
        return fingerprint_of(self.fingerprint_settings(kind))


def device_from_mapping(data: Mapping[str, Any]) -> QualcommDevice:
    data = without_kind(data, QUALCOMM)
    known = set(QualcommDevice.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown field(s) {unknown} in a Qualcomm device config; allowed: "
                         f"{sorted(known)}")
    if "name" not in data:
        raise ValueError("a Qualcomm device config needs a 'name'")
    q = data.pop("quantization", None)
    if q is not None:
        qknown = set(Quantization.__dataclass_fields__)
        if set(q) - qknown:
            raise ValueError(f"unknown field(s) {sorted(set(q) - qknown)} in [quantization]; "
                             f"allowed: {sorted(qknown)}")
        q = Quantization(**q)
    return QualcommDevice(**data, quantization=q)


def load_qualcomm_device(name_or_path: str | Path) -> QualcommDevice:
    """A shipped config by name (``snpe-dsp``) or a TOML file."""
    path = Path(name_or_path)
    if not path.is_file():
        path = QUALCOMM_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        shipped = sorted(p.stem for p in QUALCOMM_DIR.glob("*.toml"))
        raise FileNotFoundError(f"no Qualcomm device config {str(name_or_path)!r}; shipped: "
                                f"{shipped}")
    with path.open("rb") as f:
        return device_from_mapping(tomllib.load(f))
