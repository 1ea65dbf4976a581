"""One architecture on a Qualcomm device, end to end: export -> convert -> calibrate ->
quantize -> encodings (host), push -> throughput -> timed net-run -> per-layer times (device).

Results: ``<out>/<device>/<arch_id>.json`` (the usual per-architecture record with
``throughput_<device>`` in images/s and ``latency_<device>`` in ms) and beside it
``<arch_id>.layers.csv`` (per-layer times from the diagnostic log, joined with the DLC's
output encodings). Throughput and latency are each ``repeats`` runs (mean, standard deviation
and the runs recorded), and each entry carries its protocol fingerprint
(:meth:`~.config.QualcommDevice.fingerprint`): an architecture whose record holds both keys
under the device's fingerprints is skipped (resumable); one measured under other settings
(``act_bitwidth``, ``perf_profile``...) is measured again and replaced. The host stages
(:func:`convert_qualcomm`) need the SDK's host tools and no board: the queue's ``convert``
stage runs them on any worker, into the store the ``measure`` stage reads.
An error carries the step it happened in (``err.step``: export, convert, quantize, dlc-info,
the device steps, diagview).

:class:`QualcommTarget` is the device as a measurement target
(:func:`anb.collect_throughput.targets.devices.load_target`): ``anb search --measure`` measures with
it here, the queue worker's ``measure`` stage with it on the machine the board is attached to;
there, SDK errors become :class:`~anb.collect_throughput.transports.TransportError` naming device
and step (tool missing, tool failed, unparsable output: not retried; no device: transient).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from anb.collect_throughput.targets.base import MeasureSummary, MeasureTarget, RunSettings
from anb.collect_throughput.targets.qualcomm import host
from anb.collect_throughput.targets.qualcomm.config import QualcommDevice
from anb.collect_throughput.targets.qualcomm.device import DeviceStages, open_device_transport
from anb.collect_throughput.timing.inputs import synthetic_batch
from anb.collect_throughput.timing.protocol import fingerprint_of
from anb.collect_throughput.timing.result import arch_record
from anb.collect_throughput.transports import Transport, TransportError
from anb.io import atomic_write, atomic_write_json
from anb.searchspace.arch import Arch, as_arch
from anb.searchspace.space import ANB_SPACE

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
        onnx_path = export_onnx(model if model is not None else build_model(arch, space=ANB_SPACE),
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


def keys_of(device: QualcommDevice) -> dict[str, str]:
    """Kind -> record key of the device's two measurements."""
    return {kind: f"{kind}_{device.name}" for kind in ("throughput", "latency")}


def is_current(record: dict | None, device: QualcommDevice) -> bool:
    """True when ``record`` holds both of the device's keys measured under its protocol
    fingerprints (a result under other settings, or with none recorded, is stale)."""
    if record is None:
        return False
    perf = record["platform_perf"]
    return all((perf.get(key) or {}).get("protocol_fingerprint") == device.fingerprint(kind)
               for kind, key in keys_of(device).items())


def _flat(settings: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, value in settings.items():
        if isinstance(value, dict):
            out.update({f"{name}.{k}": v for k, v in value.items()})
        else:
            out[name] = value
    return out


def _stale_reason(record: dict, device: QualcommDevice) -> str | None:
    """What changed since the stored entries were measured (None: nothing stored)."""
    entry = next((record["platform_perf"][k] for k in keys_of(device).values()
                  if k in record["platform_perf"]), None)
    if entry is None:
        return None
    old, new = _flat(entry.get("protocol") or {}), _flat(device.as_dict())
    changed = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new))
               if old.get(k) != new.get(k)]
    return ", ".join(changed) or "no protocol fingerprint recorded"


def _entry(kind: str, runs: list[float], device: QualcommDevice, extra: dict[str, Any]) -> dict:
    unit = "images/s" if kind == "throughput" else "ms"
    return {f"{kind}_mean": float(np.mean(runs)),
            f"{kind}_std": float(np.std(runs, ddof=1)) if len(runs) > 1 else None,
            f"{kind}_runs": runs, "unit": unit, "batch": 1,
            "resolution": device.resolution, "precision": device.precision,
            "runtime": device.runtime, "sdk": device.sdk, "perf_profile": device.perf_profile,
            "protocol": device.as_dict(), "protocol_fingerprint": device.fingerprint(kind),
            **extra}


def conversion_folder(arch: Arch, device: QualcommDevice, store: Path) -> Path:
    """Where the host stages put ``arch``'s DLC for ``device`` in a store: named by what the
    DLC depends on (SDK, resolution, quantization), so a changed setting never reuses it."""
    fp = fingerprint_of({"sdk": device.sdk, "resolution": device.resolution,
                         "quantization": device.as_dict()["quantization"]})
    return Path(store) / f"{arch.id}_{device.sdk}-{fp}"


def convert_qualcomm(arch: Arch | str, device: QualcommDevice, store: str | Path) -> Path:
    """The host stages (export, convert, quantize) into ``store`` (see
    :func:`conversion_folder`; built in a scratch folder and renamed, so a reader sees a
    whole one or none); returns the DLC. Needs the SDK's host tools, no board."""
    arch = as_arch(arch, ANB_SPACE)
    folder = conversion_folder(arch, device, Path(store))
    dlc_name = "model.dlc" if device.quantization is not None else "model_float.dlc"
    if not (folder / dlc_name).is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".convert-", dir=folder.parent) as tmp:
            dlc, _ = build_dlc(arch, device, Path(tmp) / "dlc")
            try:
                os.rename(Path(tmp) / "dlc", folder)
            except OSError:  # another worker finished it first
                if not (folder / dlc.name).is_file():
                    raise
    return folder / dlc_name


def measure_qualcomm(arch: Arch | str, device: QualcommDevice, out: str | Path,
                     transport: Transport | None = None, workdir: str | Path | None = None,
                     store: str | Path | None = None) -> dict:
    """Measure ``arch`` on ``device`` (see module docstring); return its record. A record
    measured under the device's protocol fingerprints is returned as it is; one measured under
    other settings is re-measured and replaced. ``store``: where the DLC is (or is put) by
    :func:`convert_qualcomm`; None: built in a scratch folder."""
    arch = as_arch(arch, ANB_SPACE)
    out_dir = Path(out) / device.name
    record_path = out_dir / f"{arch.id}.json"
    record = (json.loads(record_path.read_text()) if record_path.exists()
              else arch_record(arch, [], tool="anb measure (qualcomm)", space=ANB_SPACE))
    if is_current(record, device):
        return record
    stale = _stale_reason(record, device)
    if stale:
        log.warning("%s: %s was measured under other settings (%s); measuring again",
                    device.name, arch.id, stale)
    transport = transport or open_device_transport(device)
    with tempfile.TemporaryDirectory(prefix="anb-qc-", dir=workdir) as tmp_name:
        tmp = Path(tmp_name)
        dlc = convert_qualcomm(arch, device, store if store is not None else tmp / "host")
        with step("dlc-info"):
            encodings = host.dlc_info(dlc)
        inputs = host.write_raw_inputs(synthetic_batch(device.latency_inputs, device.resolution),
                                       tmp / "inputs")
        with step("device"):
            stages = DeviceStages(device, transport, tag=arch.id)
        ips, latency_us = [], []
        peaks: dict[str, list[int | None]] = {"throughput": [], "latency": []}
        try:
            with step("prepare"):
                model, input_list, raws = stages.prepare(dlc, inputs)
            with step("throughput"):
                for _ in range(device.repeats):
                    ips.append(stages.throughput(model, raws[0], device.run_seconds)[0])
                    peaks["throughput"].append(stages.peak_rss.get("throughput"))
            for run in range(device.repeats):
                with step("net-run"):
                    stages.net_run(model, input_list)
                    peaks["latency"].append(stages.peak_rss.get("latency"))
                with step("diagview"):
                    totals, layers = stages.layer_times(tmp / "pulled" / str(run))
                if "Avg Total Inference Time" not in totals:
                    err = RuntimeError(f"{device.name}: the diagnostic log has no 'Avg Total "
                                       f"Inference Time' (got {sorted(totals)})")
                    setattr(err, "step", "diagview")  # noqa: B010 - the tag step() puts on errors
                    raise err
                latency_us.append(totals["Avg Total Inference Time"])
        finally:
            stages.cleanup()
    layers = layers.merge(encodings[["layer", "bitwidth", "min", "max", "scale", "offset"]],
                          on="layer", how="left")
    out_dir.mkdir(parents=True, exist_ok=True)
    layers_path = atomic_write(out_dir / f"{arch.id}.layers.csv",
                               lambda t: layers.to_csv(t, index=False))
    extra = {"layers_file": layers_path.name, "diag_totals_us": totals}
    keys = keys_of(device)
    rss = {kind: max((p for p in values if p), default=None) for kind, values in peaks.items()}
    record["platform_perf"][keys["throughput"]] = _entry(
        "throughput", ips, device, {"duration_s": device.duration, **extra,
                                    "peak_rss_bytes": rss["throughput"]})
    record["platform_perf"][keys["latency"]] = _entry(
        "latency", [us / 1e3 for us in latency_us], device,
        {"inputs": device.latency_inputs, **extra, "peak_rss_bytes": rss["latency"]})
    atomic_write_json(record_path, record)
    return record


def step_error(device: QualcommDevice, err: BaseException) -> BaseException:
    """``err`` as the queue worker reports it: an SDK error (tool missing, tool failed, output
    not in the documented format) becomes a :class:`TransportError` naming the device and the
    step, not transient (a retry cannot help); transport errors (no device: transient) and
    anything else are returned as they are."""
    from anb.collect_throughput.targets.qualcomm.parse import ParseError
    from anb.collect_throughput.targets.qualcomm.tools import ToolFailed, ToolMissing

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
        self.keys = tuple(keys_of(device).values())
        self.transport = transport  # None: the config's, opened per call

    def _transport(self) -> Transport:
        return self.transport or open_device_transport(self.config)

    def measure(self, archs: Iterable[Arch], out: str | Path,
                run: RunSettings) -> MeasureSummary:
        """Each architecture in turn with :func:`measure_qualcomm` (DLCs are built in scratch
        folders, ``run.keep_work`` keeps them in ``run.workdir``); a failure is logged in the
        summary with ``run.keep_going``, raised (naming device and step) otherwise."""
        workdir = run.workdir
        summary = MeasureSummary()
        transport = None
        for arch in (as_arch(a, ANB_SPACE) for a in archs):
            path = Path(out) / self.name / f"{arch.id}.json"
            if is_current(json.loads(path.read_text()) if path.exists() else None,
                          self.config):
                summary.skipped.append(arch.id)
                continue
            try:
                transport = transport or self._transport()
                if workdir is not None:
                    Path(workdir).mkdir(parents=True, exist_ok=True)
                measure_qualcomm(arch, self.config, out, transport, workdir,
                                 store=workdir if run.keep_work else None)
            except Exception as err:  # reported per architecture with keep_going
                named = step_error(self.config, err)
                if not run.keep_going:
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

    def prepare_job(self, arch: Arch, workdir: Path) -> dict:
        """The host stages into ``workdir`` (the queue's store; no board needed), where
        :meth:`measure_job` finds the DLC."""
        try:
            dlc = convert_qualcomm(arch, self.config, workdir)
        except Exception as err:  # re-raised naming device and step
            named = step_error(self.config, err)
            if named is err:
                raise
            raise named from err
        return {"models": {key: {"model": str(dlc), "precision": self.config.precision}
                           for key in self.keys}}

    def measure_job(self, arch: Arch, workdir: Path) -> dict:
        """:func:`measure_qualcomm` into a scratch folder under ``workdir`` (the DLC from, or
        into, ``workdir``: see :meth:`prepare_job`); the per-layer table is kept in
        ``workdir`` as ``<arch_id>.layers.csv`` and listed in ``files``."""
        arch = as_arch(arch, ANB_SPACE)
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f"{arch.id[:12]}-", dir=workdir) as tmp:
            try:
                record = measure_qualcomm(arch, self.config, tmp, self._transport(), tmp,
                                          store=workdir)
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
