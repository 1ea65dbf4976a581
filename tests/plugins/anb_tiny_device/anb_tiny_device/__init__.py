"""A third-party device package for anb (test fixture), found only through entry points:

- ``tiny-ort`` (``anb.backends``): onnxruntime with graph optimisations off, a back-end of its
  own (it records ``graph_optimization: "disabled"`` in each result's environment);
- ``tiny-board`` (``anb.runtimes``): the onnxruntime board runner, recording its own name;
- ``tiny://`` (``anb.transports``): this machine as the board, counting its commands in a file;
- the device configs ``tiny-cpu`` (a table) and ``tiny-board`` (a TOML file) (``anb.devices``).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from anb.collect_throughput.backends.base import Session
from anb.collect_throughput.backends.onnxruntime_backend import OnnxRuntimeBackend
from anb.collect_throughput.targets.remote import OnnxRuntimeBoard
from anb.collect_throughput.timing.protocol import Protocol
from anb.collect_throughput.transports.local import LocalTransport

FAST = {"warmup": {"min_steps": 2, "window": 2, "tolerance": 0.5, "max_steps": 10,
                   "max_seconds": 1.0},
        "stopping": {"min_reps": 3, "max_reps": 20, "rel_ci": 0.5, "budget_seconds": 0.3,
                     "min_rep_seconds": 0.01}}
DEVICE = {"kind": "local", "name": "tiny-cpu", "backend": "tiny-ort", "precision": "fp32",
          "threads": 1, "resolution": 32, "latency": {"batch": 1}, "throughput": {"batch": 2},
          **FAST}
BOARD_CONFIG = str(Path(__file__).parent / "tiny-board.toml")


class UnoptimisedOrtBackend(OnnxRuntimeBackend):
    """onnxruntime on the CPU with every graph optimisation off."""

    name = "tiny-ort"

    def prepare(self, arch: Any, protocol: Protocol, workdir: Path) -> Session:
        import onnxruntime as ort

        from anb.collect_throughput.backends.base import cycling
        from anb.collect_throughput.timing.inputs import make_inputs
        from anb.collect_throughput.timing.loop import CpuClock

        self.check(protocol)
        path, extra = self.model_path(arch, protocol, workdir)
        options = ort.SessionOptions()
        options.intra_op_num_threads = protocol.threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        batches = list(make_inputs(protocol, arch))
        return Session(step=cycling(batches, lambda x: session.run(None, {"input": x})),
                       clock=CpuClock(kind=protocol.clock),
                       environment={"device_name": "cpu", "graph_optimization": "disabled"},
                       extra=extra)


class TinyBoardRuntime(OnnxRuntimeBoard):
    name = "tiny-board"


class TinyTransport(LocalTransport):
    """``tiny://``: this machine; every command is appended to ``$ANB_TINY_LOG``."""

    scheme = "tiny"

    def run(self, argv, step, timeout, check=True):
        log = os.environ.get("ANB_TINY_LOG")
        if log:
            with open(log, "a") as handle:
                handle.write(step + "\n")
        return super().run(argv, step, timeout, check)
