"""onnxruntime static int8 quantization (QDQ format, MinMax calibration on real images) under
one of three schemes (:data:`SCHEMES`):

- ``u8s8``: what onnxruntime's x86 int8 kernels run fast (the ``cpu-int8`` device's scheme):
  uint8 activations (asymmetric, one float scale and zero point per tensor) times symmetric
  int8 weights (one float scale per output channel) on 7 bits (``reduce_range``: x86 CPUs
  without VNNI add uint8 x int8 products pairwise in saturating int16, which corrupts full
  8-bit weights; onnxruntime's quantization guide, "When and why do I need to try U8U8?"; the
  int8 top-1 then moved 0 to 12 points with the CPU). onnxruntime fuses every QDQ group of this
  graph (Conv+Relu, Add, SE Mul, pooling) into QLinear kernels;
- ``per-channel``: as ``u8s8`` but with symmetric int8 activations (S8S8). On x86 onnxruntime
  fuses less of it: Relu, the residual Adds, the SE Muls and the convolutions next to the Adds
  run in float between QuantizeLinear/DequantizeLinear pairs, and the network runs slower than
  fp32 (the scheme ``cpu-int8`` ran before; README, ``cpu-int8``);
- ``dpu``: what Xilinx DPUs run (Vitis AI ``fix_point``): symmetric int8, one scale per tensor
  for weights and activations alike, every scale a power of two (``2**-fix_point``). The
  calibrated per-tensor scale is rounded *up* to the next power of two (no new saturation) and
  constant tensors (weights, biases) are re-quantized to it.

:func:`quantize_int8` is the one entry point: ``quantize_int8(float_onnx, out, images,
scheme="dpu")``.
"""
from __future__ import annotations

import functools
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from anb.io import atomic_write, atomic_write_bytes


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
    """Shape inference + graph optimisation (BN folding) before quantization.

    A process pre-processes each float model once (:func:`_preprocessed`): a report writes the
    pre-processed model it compares against and quantizes the same export, a mixed-precision
    sweep quantizes it once per K, and onnxruntime's symbolic shape inference takes seconds."""
    model = Path(float_path).read_bytes()
    if _external_data(model):  # its bytes do not hold the whole model: nothing to key on
        from onnxruntime.quantization.shape_inference import quant_pre_process

        return atomic_write(out_path, lambda tmp: quant_pre_process(str(float_path), str(tmp)))
    return atomic_write_bytes(out_path, _preprocessed(model))


def _external_data(model: bytes) -> bool:
    """Whether the serialised ONNX ``model`` keeps weights in files beside it."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    return any(map(uses_external_data, onnx.load_from_string(model).graph.initializer))


@functools.lru_cache(maxsize=8)
def _preprocessed(model: bytes) -> bytes:
    """The pre-processed bytes of the serialised ONNX ``model`` (deterministic, so cached: the
    node names quantization reports stay those of one pre-processing)."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with tempfile.TemporaryDirectory(prefix="anb-prep-") as tmp:
        source, target = Path(tmp) / "float.onnx", Path(tmp) / "prep.onnx"
        source.write_bytes(model)
        quant_pre_process(str(source), str(target))
        return target.read_bytes()


SCHEMES = {
    "u8s8": {"format": "QDQ",
             "weights": "int8 symmetric per-channel on 7 bits (reduce_range), float scales",
             "activations": "uint8 asymmetric per-tensor, float scales and zero points",
             "calibration": "MinMax"},
    "per-channel": {"format": "QDQ", "weights": "int8 symmetric per-channel, float scales",
                    "activations": "int8 symmetric per-tensor, float scales",
                    "calibration": "MinMax"},
    "dpu": {"format": "QDQ", "weights": "int8 symmetric per-tensor, power-of-two scales",
            "activations": "int8 symmetric per-tensor, power-of-two scales",
            "calibration": "MinMax, scales rounded up to 2**-fix_point"},
}
_OPTIONS = {  # scheme -> (per-channel weights, uint8 asymmetric activations)
    "u8s8": (True, True), "per-channel": (True, False), "dpu": (False, False)}


def power_of_two_scales(model) -> int:
    """Round every QDQ scale of ``model`` (an ``onnx.ModelProto``, edited in place) up to a
    power of two and re-quantize the constant tensors behind them; return how many scales."""
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    scale_names = {n.input[1] for n in model.graph.node
                   if n.op_type in ("QuantizeLinear", "DequantizeLinear")}
    old = {name: numpy_helper.to_array(inits[name]).astype(np.float64) for name in scale_names}
    new = {name: np.exp2(np.ceil(np.log2(v))) for name, v in old.items()}
    for node in model.graph.node:  # constants: int8 weights, int32 biases
        if node.op_type == "DequantizeLinear" and node.input[0] in inits:
            data = numpy_helper.to_array(inits[node.input[0]])
            info = np.iinfo(data.dtype)
            ratio = old[node.input[1]] / new[node.input[1]]
            requantized = np.clip(np.round(data * ratio), info.min, info.max).astype(data.dtype)
            inits[node.input[0]].CopyFrom(numpy_helper.from_array(requantized, node.input[0]))
    for name, value in new.items():
        dtype = numpy_helper.to_array(inits[name]).dtype
        inits[name].CopyFrom(numpy_helper.from_array(value.astype(dtype), name))
    return len(new)


def quantize_int8(float_path: str | Path, out_path: str | Path, calibration: np.ndarray,
                  scheme: str = "u8s8", exclude: Sequence[str] = ()) -> Path:
    """Write the static-int8 QDQ model of ``float_path`` (pre-processed first) to ``out_path``
    under ``scheme`` (see :data:`SCHEMES`); the nodes named in ``exclude`` (of the
    pre-processed graph) stay float (mixed precision)."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    if scheme not in SCHEMES:
        raise ValueError(f"scheme={scheme!r} is invalid; allowed: {sorted(SCHEMES)}")
    if len(calibration) == 0:
        raise ValueError("calibration needs at least one image")
    with tempfile.TemporaryDirectory(prefix="anb-quant-") as tmp:
        prepared = preprocess_float(float_path, Path(tmp) / "prep.onnx")
        names = {n.name for n in onnx.load(str(prepared)).graph.node}
        unknown = sorted(set(exclude) - names)
        if unknown:
            raise ValueError(f"exclude={unknown} names no node of {float_path}")
        staged = Path(tmp) / "int8.onnx"
        per_channel, unsigned = _OPTIONS[scheme]
        first = onnx.load(str(prepared), load_external_data=False).graph.input[0]
        fixed = first.type.tensor_type.shape.dim[0].dim_value == 1
        reader = ArrayReader(calibration, batch=1 if fixed else 16, input_name=first.name)
        quantize_static(
            str(prepared), str(staged), reader, quant_format=QuantFormat.QDQ,
            per_channel=per_channel, reduce_range=scheme == "u8s8",
            nodes_to_exclude=list(exclude),
            activation_type=QuantType.QUInt8 if unsigned else QuantType.QInt8,
            weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
            extra_options={"ActivationSymmetric": not unsigned, "WeightSymmetric": True})
        model = onnx.load(str(staged))
        if scheme == "dpu":
            power_of_two_scales(model)
        atomic_write(out_path, lambda target: onnx.save(model, str(target)))
    return Path(out_path)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / denom) if denom else float(np.array_equal(a, b))


def sqnr_db(reference: np.ndarray, other: np.ndarray) -> float:
    """10 log10(|reference|^2 / |reference - other|^2); inf when identical."""
    ref = np.ravel(reference).astype(np.float64)
    noise = np.sum((ref - np.ravel(other)) ** 2)
    return float("inf") if noise == 0 else float(10 * np.log10(np.sum(ref**2) / noise))


def run_model(path: str | Path, images: np.ndarray, batch: int = 64) -> np.ndarray:
    """The first output (logits) of an ONNX model over ``images`` (one thread; one image at a
    time when the model's batch is fixed)."""
    from anb.collect_throughput.backends.onnxruntime_backend import ort_session

    session = ort_session(Path(path), 1)
    first = session.get_inputs()[0]
    step = 1 if first.shape and first.shape[0] == 1 else batch
    return np.concatenate([session.run([session.get_outputs()[0].name], x)[0]
                           for x in ArrayReader(images, step, first.name)])
