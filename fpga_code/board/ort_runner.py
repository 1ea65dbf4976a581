"""A stand-in for ``vart.Runner`` backed by an int8 (QDQ) onnxruntime model.

Used where no DPU exists (tests, host emulation): same ``get_input_tensors`` /
``get_output_tensors`` / ``execute_async`` / ``wait`` interface, NHWC int8 buffers with
power-of-two ``fix_point`` scales taken from the model's own input/output quantization, and
jobs executed asynchronously on a worker thread, so ``dpu_timing`` runs unchanged.
"""
from __future__ import annotations

import math
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class StandInTensor:
    name: str
    dims: tuple[int, ...]
    fix: int

    def get_attr(self, key: str) -> int:
        if key != "fix_point":
            raise KeyError(key)
        return self.fix


def _scale_of(model, tensor: str, op: str, position: int) -> float | None:
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        names = node.input if position == 0 else node.output
        if node.op_type == op and tensor in names and node.input[1] in inits:
            return float(numpy_helper.to_array(inits[node.input[1]]).ravel()[0])
    return None


class OrtStandInRunner:
    """Runs ``int8_model`` (NCHW float in, ``logits`` out) behind a DPU-like int8 NHWC interface."""

    def __init__(self, int8_model: str | Path, batch: int, resolution: int, classes: int = 1000):
        import onnx
        import onnxruntime as ort

        model = onnx.load(str(int8_model))
        in_scale = _scale_of(model, "input", "QuantizeLinear", 0) or 2.0 ** -5
        out_scale = _scale_of(model, "logits", "DequantizeLinear", 1) or 2.0 ** -2
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(int8_model), options,
                                            providers=["CPUExecutionProvider"])
        self.inputs = [StandInTensor("input", (batch, resolution, resolution, 3),
                                     round(-math.log2(in_scale)))]
        self.outputs = [StandInTensor("logits", (batch, classes), round(-math.log2(out_scale)))]
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.jobs: dict[int, Future] = {}
        self.next_id = 0
        self.max_queued = 0  # most jobs submitted and not yet waited for

    def get_input_tensors(self) -> list[StandInTensor]:
        return self.inputs

    def get_output_tensors(self) -> list[StandInTensor]:
        return self.outputs

    def _run(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> int:
        x = inputs[0].astype(np.float32) * 2.0 ** -self.inputs[0].fix
        feed = {"input": np.ascontiguousarray(x.transpose(0, 3, 1, 2))}
        y = self.session.run(["logits"], feed)[0]
        outputs[0][...] = np.clip(np.round(y * 2.0 ** self.outputs[0].fix), -128, 127)
        return 0

    def execute_async(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> tuple[int, int]:
        job = self.next_id
        self.next_id += 1
        self.jobs[job] = self.pool.submit(self._run, inputs, outputs)
        self.max_queued = max(self.max_queued, len(self.jobs))
        return job, 0

    def wait(self, job: tuple[int, int]) -> int:
        return self.jobs.pop(job[0]).result()
