"""Shared helpers of the SNPE stand-in executables (tests only).

STAND-IN, not the SDK: a stand-in "DLC" is the ONNX model itself (quantized models are
onnxruntime QDQ models), run with onnxruntime, so the files, flags and printed formats of the
real tools are exercised with real numbers. ``ANB_STANDIN_SNPE_RUNTIMES`` (default
``cpu,gpu_fp16,dsp``) lists the runtimes the pretend board has; ``ANB_STANDIN_SNPE_SECOND``
how long a second of ``snpe-throughput-net-run --duration`` lasts. NumPy and onnx are imported
where used: ``snpe-diagview`` starts without them.
"""
import json
import sys


def fail(tool, message, code=1):
    sys.stderr.write(f"[ERROR] {tool}: {message}\n")
    sys.exit(code)


def load(tool, path):
    import onnx

    try:
        return onnx.load(path)
    except Exception as err:  # noqa: BLE001 - the tool's own error message
        fail(tool, f"could not read container {path}: {err}")


def input_shape(model):
    dims = model.graph.input[0].type.tensor_type.shape.dim
    return [d.dim_value for d in dims]


def is_quantized(model):
    return any(n.op_type == "QuantizeLinear" for n in model.graph.node)


def read_nhwc(tool, path, shape):
    """A native raw file of the NCHW ``shape`` model input, stored NHWC -> NCHW array."""
    import numpy as np

    n, c, h, w = shape
    data = np.fromfile(path, dtype=np.float32)
    if data.size != n * c * h * w:
        fail(tool, f"input {path} has {data.size} floats, the network takes {[n, h, w, c]} (NHWC)")
    return data.reshape(n, h, w, c).transpose(0, 3, 1, 2).copy()


def read_list(tool, path):
    try:
        lines = [ln.strip() for ln in open(path) if ln.strip() and not ln.startswith("#")]
    except OSError as err:
        fail(tool, f"cannot read input list: {err}")
    if not lines:
        fail(tool, f"input list {path} is empty")
    return [ln.split(":=")[-1] for ln in lines]


def runtime_of(tool, args):
    chosen = [r for r in ("dsp", "gpu_fp16", "cpu") if getattr(args, "use_" + r)]
    runtime = chosen[0] if chosen else "cpu"
    import os

    have = os.environ.get("ANB_STANDIN_SNPE_RUNTIMES", "cpu,gpu_fp16,dsp").split(",")
    if runtime not in have:
        fail(tool, f"error_code=201; error_message=Runtime {runtime.upper()} is not available "
             "on this device")
    return runtime


def add_runtime_flags(parser):
    for r in ("dsp", "gpu_fp16", "cpu"):
        parser.add_argument("--use_" + r, action="store_true")
    parser.add_argument("--perf_profile", default="default")


def dump_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)
