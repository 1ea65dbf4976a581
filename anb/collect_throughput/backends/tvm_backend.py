"""Apache TVM CPU back-end: the exported ONNX model imported into Relax and compiled with LLVM.

The model is compiled once per (architecture, batch, resolution, TVM version, target) for the
static input shape the protocol measures and cached in ``workdir`` as a shared library; the
Relax virtual machine runs it on ``threads`` threads of TVM's pool. No auto-tuning (a tuned
schedule takes hours per network): the figures are TVM's default lowering, recorded as such.
TVM's Relax ONNX importer has no int8 lowering of quantized (QDQ) graphs in the pinned
version, so the back-end is fp32 only.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from anb.collect_throughput.backends.base import Session, cycling
from anb.collect_throughput.backends.onnxruntime_backend import OnnxRuntimeBackend, float_onnx
from anb.collect_throughput.timing.environment import host_environment
from anb.collect_throughput.timing.inputs import make_inputs
from anb.collect_throughput.timing.loop import CpuClock
from anb.collect_throughput.timing.network import measured_arch, measured_resolution, protocol_space
from anb.collect_throughput.timing.protocol import Protocol


def target_dict(threads: int) -> dict[str, Any]:
    """The LLVM target for this host's CPU (``mcpu`` as LLVM names it)."""
    from tvm.target import codegen

    return {"kind": "llvm", "num-cores": threads, "mcpu": str(codegen.llvm_get_system_cpu())}


def compiled_library(onnx_path: Path, shape: tuple[int, ...], threads: int,
                     workdir: Path, target: dict[str, Any] | None = None,
                     cc: str | None = None) -> tuple[Path, dict[str, Any]]:
    """The compiled library for ``onnx_path`` at input ``shape``, cached in ``workdir``:
    for ``target`` (an LLVM target as a dict; default this host's CPU) linked with ``cc``
    (a C++ compiler, e.g. a cross compiler for a board; default the host's)."""
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    from tvm.support import cc as tvm_cc

    target = {"num-cores": threads, **target} if target else target_dict(threads)
    key = hashlib.sha256(json.dumps([onnx_path.name, shape, tvm.__version__, target]
                                    + ([cc] if cc else []))
                         .encode()).hexdigest()[:16]
    path = Path(workdir) / f"{onnx_path.stem}_tvm_{key}.so"
    if not path.exists():
        module = from_onnx(onnx.load(str(onnx_path)), shape_dict={"input": list(shape)},
                           keep_params_in_input=False)
        module = relax.transform.DecomposeOpsForInference()(module)
        executable = tvm.compile(module, target=tvm.target.Target(target))
        tmp = path.with_suffix(".tmp.so")
        executable.export_library(str(tmp), **(
            {"fcompile": tvm_cc.cross_compiler(cc)} if cc else {}))
        tmp.replace(path)
    facts = {"tvm_version": tvm.__version__, "tvm_target": target, "tvm_tuning": "none"}
    return path, {**facts, "tvm_cc": cc} if cc else facts


class TvmBackend(OnnxRuntimeBackend):
    """Apache TVM (Relax, LLVM) on the CPU, fp32, NCHW: compiled from the ONNX export."""

    name = "tvm"
    precision = "fp32"
    own_threads = "TVM's thread pool"

    def prepare(self, arch: Any, protocol: Protocol, workdir: Path) -> Session:
        import tvm
        from tvm import relax

        self.check(protocol)
        space = protocol_space(protocol)
        arch = measured_arch(protocol, arch)
        batches = [np.ascontiguousarray(x) for x in make_inputs(protocol, arch)]
        onnx_path = float_onnx(arch, workdir, protocol.resolution, space=space)
        library, facts = compiled_library(onnx_path, tuple(batches[0].shape), protocol.threads,
                                          Path(workdir))
        tvm.get_global_func("runtime.config_threadpool")(1, protocol.threads)
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(library)), tvm.cpu())
        run = vm["main"]
        device_inputs = [tvm.runtime.tensor(b) for b in batches]
        env: dict[str, Any] = {**host_environment(), "device_name": "cpu", **facts,
                               "resolution_compiled": measured_resolution(protocol, arch)}
        return Session(step=cycling(device_inputs, run), clock=CpuClock(kind=protocol.clock),
                       environment=env)
