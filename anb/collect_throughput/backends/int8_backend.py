"""onnxruntime static int8 on the CPU: the runnable stand-in for an edge int8 target (a DPU).

The fp32 export is quantized (see :mod:`..quantize`) with ``calibration_images`` digits
images; the result records the scheme and the top-1 agreement of the int8 and fp32 networks
on the digits test images. (The accuracy change of a fitted network is ``anb quant-report``.)
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from anb.collect_throughput.backends.onnxruntime_backend import OnnxRuntimeBackend, float_onnx
from anb.collect_throughput.digits import digits_images
from anb.collect_throughput.protocol import Protocol
from anb.collect_throughput.quantize import quantize_int8, run_model
from anb.searchspace.arch import Arch

SCHEME = {"format": "QDQ", "weights": "int8 symmetric per-channel",
          "activations": "int8 symmetric per-tensor", "calibration": "MinMax"}


class OnnxRuntimeInt8Backend(OnnxRuntimeBackend):
    """onnxruntime on the CPU, static int8 (QDQ)."""

    name = "onnxruntime-int8"
    precision = "int8"

    def model_path(self, arch: Arch, protocol: Protocol, workdir: Path) -> tuple[Path, dict]:
        float_path = float_onnx(arch, workdir, protocol.resolution)
        path = Path(workdir) / f"{arch.id}_int8_r{protocol.resolution}_c{protocol.calibration_images}.onnx"
        if not path.exists():
            calibration, _ = digits_images(protocol.resolution, "train")
            quantize_int8(float_path, path, calibration[: protocol.calibration_images])
        images, _ = digits_images(protocol.resolution, "test")
        images = images[:64]
        agree = float(np.mean(run_model(float_path, images).argmax(1)
                              == run_model(path, images).argmax(1)))
        return path, {"quantization": {**SCHEME, "calibration_images": protocol.calibration_images,
                                       "top1_agreement_vs_fp32": agree,
                                       "agreement_images": len(images)}}
