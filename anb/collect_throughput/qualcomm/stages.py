"""One architecture on a Qualcomm device, end to end: export -> convert -> calibrate ->
quantize -> encodings (host), push -> throughput -> timed net-run -> per-layer times (device).

Results: ``<out>/<device>/<arch_id>.json`` (the usual per-architecture record with
``throughput_<device>`` in images/s and ``latency_<device>`` in ms) and beside it
``<arch_id>.layers.csv`` (per-layer times from the diagnostic log, joined with the DLC's
output encodings). An architecture whose record already has both keys is skipped (resumable).
An error carries the step it happened in (``err.step``: export, convert, quantize, dlc-info,
the device steps, diagview).

:class:`QualcommTarget` is the device as a measurement target
(:func:`anb.collect_throughput.devices.load_target`): ``anb search --measure`` measures with it
here, the queue worker's ``measure`` stage with it on the machine the board is attached to;
there, SDK errors become :class:`~anb.collect_throughput.transports.TransportError` naming device
and step (tool missing, tool failed, unparsable output: not retried; no device: transient).
"""
from __future__ import annotations

import json
import logging
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from anb.collect_throughput.inputs import synthetic_batch
from anb.collect_throughput.qualcomm import host
from anb.collect_throughput.qualcomm.config import QualcommDevice
from anb.collect_throughput.qualcomm.device import DeviceStages, open_device_transport
from anb.collect_throughput.result import arch_record
from anb.collect_throughput.target import MeasureSummary, MeasureTarget
from anb.collect_throughput.transports import Transport, TransportError
from anb.io import atomic_write, atomic_write_json
from anb.searchspace.arch import Arch, as_arch

log = logging.getLogger(__name__)


@contextmanager
def step(name: str) -> Iterator[None]:
    """Tag an error raised inside with ``err.step = name`` unless it names a step already
    (a transport error does); the error itself is re-raised unchanged."""
    try:
        yield
    except Exception as err:
        if getattr(err, "step", None) is None:
            try:
                setattr(err, "step", name)  # noqa: B010 - a tag on any exception type (mypy knows no .step)
            except AttributeError:  # an exception type without a __dict__
                pass
        raise


def build_dlc(arch: Arch, device: QualcommDevice, folder: Path,
              calibration: np.ndarray | None = None, model: Any = None) -> tuple[Path, Path]:
    """Host stages: the (quantized when configured) DLC and the static float ONNX it came from
    (``model``: a built network of ``arch``; default: freshly initialised)."""
    from anb.searchspace.model import build_model
    from anb.searchspace.onnx_export import export_onnx

    folder.mkdir(parents=True, exist_ok=True)
    with step("export"):
        onnx_path = export_onnx(model if model is not None else build_model(arch),
                                folder / "model.onnx", resolution=device.resolution,
                                dynamic=False)
    with step("convert"):
        dlc = host.convert(onnx_path, folder / "model_float.dlc")
    q = device.quantization
    if q is None:
        return dlc, onnx_path
    with step("quantize"):
        if calibration is None:
            calibration = synthetic_batch(q.calibration_images, device.resolution, seed=1)
        raws = host.write_raw_inputs(calibration[:q.calibration_images], folder / "calibration")
        listing = host.write_input_list([str(p) for p in raws], folder / "calibration.txt")
        return host.quantize(dlc, listing, folder / "model.dlc", q), onnx_path


def _entry(kind: str, value: float, device: QualcommDevice, extra: dict[str, Any]) -> dict:
    unit = "images/s" if kind == "throughput" else "ms"
    return {f"{kind}_mean": value, f"{kind}_std": None, "unit": unit, "batch": 1,
            "resolution": device.resolution, "precision": device.precision,
            "runtime": device.runtime, "sdk": device.sdk, "perf_profile": device.perf_profile,
            "protocol": device.as_dict(), **extra}


def measure_qualcomm(arch: Arch | str, device: QualcommDevice, out: str | Path,
                     transport: Transport | None = None, workdir: str | Path | None = None,
                     ) -> dict:
    """Measure ``arch`` on ``device`` (see module docstring); return its record."""
    arch = as_arch(arch)
    out_dir = Path(out) / device.name
    record_path = out_dir / f"{arch.id}.json"
    record = (json.loads(record_path.read_text()) if record_path.exists()
              else arch_record(arch, [], tool="anb measure (qualcomm)"))
    keys = (f"throughput_{device.name}", f"latency_{device.name}")
    if all(k in record["platform_perf"] for k in keys):
        return record
    transport = transport or open_device_transport(device)
    with tempfile.TemporaryDirectory(prefix="anb-qc-", dir=workdir) as tmp_name:
        tmp = Path(tmp_name)
        dlc, _ = build_dlc(arch, device, tmp / "host")
        with step("dlc-info"):
            encodings = host.dlc_info(dlc)
        inputs = host.write_raw_inputs(synthetic_batch(device.latency_inputs, device.resolution),
                                       tmp / "inputs")
        with step("device"):
            stages = DeviceStages(device, transport, tag=arch.id)
        try:
            with step("prepare"):
                model, input_list, raws = stages.prepare(dlc, inputs)
            with step("throughput"):
                ips, _ = stages.throughput(model, raws[0])
            with step("net-run"):
                stages.net_run(model, input_list)
            with step("diagview"):
                totals, layers = stages.layer_times(tmp / "pulled")
        finally:
            stages.cleanup()
    avg = totals.get("Avg Total Inference Time")
    if avg is None:
        err = RuntimeError(f"{device.name}: the diagnostic log has no 'Avg Total Inference "
                           f"Time' (got {sorted(totals)})")
        setattr(err, "step", "diagview")  # noqa: B010 - the tag step() puts on errors
        raise err
    layers = layers.merge(encodings[["layer", "bitwidth", "min", "max", "scale", "offset"]],
                          on="layer", how="left")
    out_dir.mkdir(parents=True, exist_ok=True)
    layers_path = atomic_write(out_dir / f"{arch.id}.layers.csv",
                               lambda t: layers.to_csv(t, index=False))
    extra = {"layers_file": layers_path.name, "diag_totals_us": totals}
    record["platform_perf"][keys[0]] = _entry("throughput", ips, device,
                                              {"duration_s": device.duration, **extra})
    record["platform_perf"][keys[1]] = _entry("latency", avg / 1e3, device,
                                              {"inputs": device.latency_inputs, **extra})
    atomic_write_json(record_path, record)
    return record


def step_error(device: QualcommDevice, err: BaseException) -> BaseException:
    """``err`` as the queue worker reports it: an SDK error (tool missing, tool failed, output
    not in the documented format) becomes a :class:`TransportError` naming the device and the
    step, not transient (a retry cannot help); transport errors (no device: transient) and
    anything else are returned as they are."""
    from anb.collect_throughput.qualcomm.parse import ParseError
    from anb.collect_throughput.qualcomm.tools import ToolFailed, ToolMissing

    if isinstance(err, TransportError) or not isinstance(err, (ToolMissing, ToolFailed,
                                                               ParseError)):
        return err
    new = TransportError(device.name, getattr(err, "step", None) or "measure",
                         f"{type(err).__name__}: {err}",
                         "missing" if isinstance(err, ToolMissing) else "command")
    new.__cause__ = err
    return new


class QualcommTarget(MeasureTarget):
    """A :class:`QualcommDevice` as a measurement target (see module docstring)."""

    def __init__(self, device: QualcommDevice, transport: Transport | None = None):
        if device.sdk != "snpe":
            raise ValueError(f"device {device.name!r}: sdk={device.sdk!r} cannot be measured in "
                             "this build (host conversion only); allowed: 'snpe'")
        self.config, self.name = device, device.name
        self.keys = (f"throughput_{device.name}", f"latency_{device.name}")
        self.transport = transport  # None: the config's, opened per call

    def _transport(self) -> Transport:
        return self.transport or open_device_transport(self.config)

    def measure(self, archs: Iterable[Arch], out: str | Path, workdir: str | Path | None = None,
                progress: bool = True, keep_going: bool = False, interleave: int = 1,
                anchors: Sequence[Any] | None = None):
        """Each architecture in turn with :func:`measure_qualcomm` (the board runs one model at
        a time: ``interleave`` and drift ``anchors`` do not apply); a failure is logged in the
        summary with ``keep_going``, raised (naming device and step) otherwise."""
        summary = MeasureSummary()
        transport = None
        for arch in map(as_arch, archs):
            path = Path(out) / self.name / f"{arch.id}.json"
            if path.exists() and all(k in json.loads(path.read_text())["platform_perf"]
                                     for k in self.keys):
                summary.skipped.append(arch.id)
                continue
            try:
                transport = transport or self._transport()
                if workdir is not None:
                    Path(workdir).mkdir(parents=True, exist_ok=True)
                measure_qualcomm(arch, self.config, out, transport, workdir)
            except Exception as err:  # reported per architecture with keep_going
                named = step_error(self.config, err)
                if not keep_going:
                    if named is err:
                        raise
                    raise named from err
                summary.failed[arch.id] = str(named) if named is not err else (
                    f"device {self.name!r}, step {getattr(err, 'step', None) or 'measure'!r}: "
                    f"{type(err).__name__}: {err}")
                log.warning("%s on %s failed: %s", arch, self.name, named)
                continue
            summary.measured.append(arch.id)
        return summary

    def measure_job(self, arch: Arch, workdir: Path) -> dict:
        """:func:`measure_qualcomm` into a scratch folder under ``workdir``; the per-layer
        table is kept in ``workdir`` as ``<arch_id>.layers.csv`` and listed in ``files``."""
        arch = as_arch(arch)
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f"{arch.id[:12]}-", dir=workdir) as tmp:
            try:
                record = measure_qualcomm(arch, self.config, tmp, self._transport(), tmp)
            except Exception as err:  # re-raised naming device and step
                named = step_error(self.config, err)
                if named is err:
                    raise
                raise named from err
            files = []
            for entry in record["platform_perf"].values():
                name = entry.get("layers_file")
                if name and (Path(tmp) / self.name / name).is_file() and \
                        workdir / name not in files:
                    files.append(Path(shutil.copyfile(Path(tmp) / self.name / name,
                                                      workdir / name)))
        perf = record["platform_perf"]
        values = {k: float(perf[k][f"{k.split('_', 1)[0]}_mean"]) for k in self.keys}
        return {"record": record, "values": values, "latency_ms": values[self.keys[1]],
                "files": [str(f) for f in files]}
