"""The board runner's other runtimes: OpenVINO and Apache TVM on the board (see :mod:`.remote`).

``openvino`` takes the back-ends ``openvino`` and ``openvino-int8`` and pushes the same ONNX
files their host back-ends run, compiled on the board by OpenVINO's CPU plug-in with the host
back-end's settings (:func:`~anb.collect_throughput.backends.openvino_backend.cpu_config`). ``tvm``
takes the back-end ``tvm``: the host compiles the library
(:func:`~anb.collect_throughput.backends.tvm_backend.compiled_library`) for the board's LLVM target
(``[remote] tvm_target``, default this host's CPU) and links it with ``tvm_cc`` (default this host's
compiler); the board loads it with the TVM runtime into the Relax virtual machine.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from anb.collect_throughput.targets.remote import OnnxRuntimeBoard
from anb.collect_throughput.timing.protocol import Protocol


class OpenVinoBoard(OnnxRuntimeBoard):
    """OpenVINO's CPU plug-in on the board (the runner's ``openvino`` runtime)."""

    name = RUNNER_RUNTIME = "openvino"
    BACKENDS = ("openvino", "openvino-int8")

    def job_fields(self, protocol: Protocol) -> dict[str, Any]:
        from anb.collect_throughput.backends.openvino_backend import cpu_config

        return {"openvino_config": cpu_config(protocol.threads)}


class TvmBoard(OnnxRuntimeBoard):
    """A TVM library compiled on the host, run by the TVM runtime on the board."""

    name = RUNNER_RUNTIME = "tvm"
    BACKENDS = ("tvm",)

    def model(self, arch: Any, protocol: Protocol, workdir: Path) -> tuple[Path, dict]:
        from anb.collect_throughput.backends.onnxruntime_backend import float_onnx
        from anb.collect_throughput.timing.inputs import make_inputs
        from anb.collect_throughput.timing.network import protocol_space

        self.check(protocol)
        onnx_path = float_onnx(arch, Path(workdir), protocol.resolution,
                               space=protocol_space(protocol))
        return self._compile(onnx_path, protocol, tuple(make_inputs(protocol, arch)[0].shape))

    def board_model(self, model: Path, protocol: Protocol, shape: tuple[int, ...]) -> Path:
        return self._compile(model, protocol, shape)[0]

    def _compile(self, onnx_path: Path, protocol: Protocol, shape: tuple[int, ...],
                 ) -> tuple[Path, dict]:
        """The library for ``onnx_path`` at ``shape``, cached beside it."""
        from anb.collect_throughput.backends.tvm_backend import compiled_library

        spec = self.spec
        return compiled_library(onnx_path, shape, protocol.threads, onnx_path.parent,
                                target=spec.tvm_target if spec else None,
                                cc=spec.tvm_cc if spec else None)
