"""One architecture on a Qualcomm device, end to end: export -> convert -> calibrate ->
quantize -> encodings (host), push -> throughput -> timed net-run -> per-layer times (device).

Results: ``<out>/<device>/<arch_id>.json`` (the usual per-architecture record with
``throughput_<device>`` in images/s and ``latency_<device>`` in ms) and beside it
``<arch_id>.layers.csv`` (per-layer times from the diagnostic log, joined with the DLC's
output encodings). An architecture whose record already has both keys is skipped (resumable).
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from anb.collect_throughput.inputs import synthetic_batch
from anb.collect_throughput.qualcomm import host
from anb.collect_throughput.qualcomm.config import QualcommDevice
from anb.collect_throughput.qualcomm.device import DeviceStages, Transport, open_device_transport
from anb.collect_throughput.result import arch_record
from anb.io import atomic_write, atomic_write_json
from anb.searchspace.arch import Arch, as_arch


def build_dlc(arch: Arch, device: QualcommDevice, folder: Path,
              calibration: np.ndarray | None = None, model: Any = None) -> tuple[Path, Path]:
    """Host stages: the (quantized when configured) DLC and the static float ONNX it came from
    (``model``: a built network of ``arch``; default: freshly initialised)."""
    from anb.searchspace.model import build_model
    from anb.searchspace.onnx_export import export_onnx

    folder.mkdir(parents=True, exist_ok=True)
    onnx_path = export_onnx(model if model is not None else build_model(arch),
                            folder / "model.onnx", resolution=device.resolution, dynamic=False)
    dlc = host.convert(onnx_path, folder / "model_float.dlc")
    q = device.quantization
    if q is None:
        return dlc, onnx_path
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
    with tempfile.TemporaryDirectory(prefix="anb-qc-", dir=workdir) as tmp:
        tmp = Path(tmp)
        dlc, _ = build_dlc(arch, device, tmp / "host")
        encodings = host.dlc_info(dlc)
        inputs = host.write_raw_inputs(synthetic_batch(device.latency_inputs, device.resolution),
                                       tmp / "inputs")
        stages = DeviceStages(device, transport, tag=arch.id)
        try:
            model, input_list, raws = stages.prepare(dlc, inputs)
            ips, _ = stages.throughput(model, raws[0])
            stages.net_run(model, input_list)
            totals, layers = stages.layer_times(tmp / "pulled")
        finally:
            stages.cleanup()
    avg = totals.get("Avg Total Inference Time")
    if avg is None:
        raise RuntimeError(f"{device.name}: the diagnostic log has no 'Avg Total Inference "
                           f"Time' (got {sorted(totals)})")
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
