"""onnxruntime static int8 quantization: QDQ format, per-channel weights, symmetric int8
activations and weights (the DPU's scheme), calibrated by MinMax on real images."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np

from anb.io import atomic_write


class ArrayReader:
    """A ``CalibrationDataReader`` over an NCHW array, ``batch`` images at a time (re-iterable)."""

    def __init__(self, images: np.ndarray, batch: int = 16, input_name: str = "input"):
        self.images = np.ascontiguousarray(images, dtype=np.float32)
        self.batch = batch
        self.input_name = input_name
        self._it: Iterator[dict] | None = None

    def __iter__(self) -> Iterator[dict]:
        for start in range(0, len(self.images), self.batch):
            yield {self.input_name: self.images[start:start + self.batch]}

    def get_next(self) -> dict | None:
        if self._it is None:
            self._it = iter(self)
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = None


def preprocess_float(float_path: str | Path, out_path: str | Path) -> Path:
    """Shape inference + graph optimisation (BN folding) before quantization."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    return atomic_write(out_path, lambda tmp: quant_pre_process(str(float_path), str(tmp)))


def quantize_int8(float_path: str | Path, out_path: str | Path, calibration: np.ndarray,
                  per_channel: bool = True) -> Path:
    """Write the static-int8 QDQ model of ``float_path`` (pre-processed first) to ``out_path``."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    if len(calibration) == 0:
        raise ValueError("calibration needs at least one image")
    with tempfile.TemporaryDirectory(prefix="anb-quant-") as tmp:
        prepared = preprocess_float(float_path, Path(tmp) / "prep.onnx")
        atomic_write(out_path, lambda target: quantize_static(
            str(prepared), str(target), ArrayReader(calibration), quant_format=QuantFormat.QDQ,
            per_channel=per_channel, activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
            extra_options={"ActivationSymmetric": True, "WeightSymmetric": True}))
    return Path(out_path)


def run_model(path: str | Path, images: np.ndarray, batch: int = 64) -> np.ndarray:
    """Logits of an ONNX model over ``images`` (one thread)."""
    from anb.collect_throughput.backends.onnxruntime_backend import ort_session

    session = ort_session(Path(path), 1)
    return np.concatenate([session.run(["logits"], x)[0] for x in ArrayReader(images, batch)])
