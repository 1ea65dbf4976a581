"""Export a built network to ONNX (batch and spatial size dynamic) and run it with onnxruntime."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from anb.extras import missing, require

try:
    import torch
    from torch import nn
except ModuleNotFoundError as err:
    raise missing(err, "measure", "ONNX export (anb.searchspace.onnx_export)") from None

from anb.io import atomic_write

OPSET = 17


def export_onnx(model: nn.Module, path: str | Path, resolution: int = 224, batch: int = 1,
                dynamic: bool = True, opset: int = OPSET,
                input_shape: tuple[int, ...] | None = None) -> Path:
    """Write ``model`` (put in eval mode) to ``path`` atomically; return the path.

    The input is named ``input`` with layout ``(N, C, *spatial)``; the output ``logits``. The
    example input has ``input_shape`` (a space's ``task.input_shape``), by default ``batch``
    x the first convolution's channels x ``resolution`` in each of its dimensions.
    """
    model = model.eval()
    if input_shape is None:
        first_conv = next(m for m in model.modules() if isinstance(m, (nn.Conv1d, nn.Conv2d)))
        input_shape = (batch, first_conv.in_channels,
                       *(resolution,) * (first_conv.weight.ndim - 2))
    example = torch.randn(*input_shape)
    axes = {0: "batch", **{2 + i: f"size{i}" for i in range(len(input_shape) - 2)}}

    def write(tmp: Path) -> None:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model, (example,), str(tmp), input_names=["input"], output_names=["logits"],
                dynamic_axes={"input": axes, "logits": {0: "batch"}} if dynamic else None,
                opset_version=opset, dynamo=False,
            )

    return atomic_write(path, write)


def onnx_session(path: str | Path, threads: int = 1):
    """An onnxruntime CPU session with ``threads`` intra-op threads."""
    ort = require("onnxruntime", "measure", "an ONNX Runtime session")

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run_onnx(path: str | Path, inputs: np.ndarray, threads: int = 1) -> np.ndarray:
    """Run an exported model on a float32 batch and return its logits."""
    session = onnx_session(path, threads)
    return session.run(["logits"], {"input": np.ascontiguousarray(inputs, dtype=np.float32)})[0]
