"""onnxruntime static int8 on the CPU: the runnable stand-in for an edge int8 target (a DPU).

The fp32 export is quantized (see :mod:`..quantize`) under the protocol's ``quantization``
scheme (``u8s8``, ``per-channel``, or ``dpu``: per-tensor power-of-two scales) with
``calibration_images`` digits images. The network has random weights, so the result records
the scheme and the logits' SQNR of int8 against fp32 (the graph runs and the scales are sane),
not an accuracy or agreement figure: that needs trained weights (``anb quant-report``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from anb.collect_throughput.backends.int8_quantize import SCHEMES, quantize_int8, run_model, sqnr_db
from anb.collect_throughput.backends.onnxruntime_backend import OnnxRuntimeBackend
from anb.collect_throughput.timing.digits import digits_images
from anb.collect_throughput.timing.network import measured_arch, measured_resolution, require_images
from anb.collect_throughput.timing.protocol import Protocol


class OnnxRuntimeInt8Backend(OnnxRuntimeBackend):
    """onnxruntime on the CPU, static int8 (QDQ)."""

    name = "onnxruntime-int8"
    precision = "int8"

    def model_path(self, arch: Any, protocol: Protocol, workdir: Path) -> tuple[Path, dict]:
        require_images(protocol, "int8 calibration on the digits images")
        arch = measured_arch(protocol, arch)
        resolution = measured_resolution(protocol, arch)
        float_path, _ = super().model_path(arch, protocol, workdir)
        path = Path(workdir) / (f"{arch.id}_int8_{protocol.quantization}_r{resolution}"
                                f"_c{protocol.calibration_images}.onnx")
        if not path.exists():
            calibration, _ = digits_images(resolution, "train")
            quantize_int8(float_path, path, calibration[: protocol.calibration_images],
                          protocol.quantization)
        images, _ = digits_images(resolution, "test")
        images = images[:64]
        sqnr = sqnr_db(run_model(float_path, images), run_model(path, images))
        return path, {"quantization": {
            "scheme": protocol.quantization, **SCHEMES[protocol.quantization],
            "calibration_images": protocol.calibration_images, "weights": "random initialisation",
            "logits_sqnr_db_vs_fp32": sqnr, "sqnr_images": len(images)}}
