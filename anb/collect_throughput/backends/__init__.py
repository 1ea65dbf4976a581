"""Device back-ends, looked up by the protocol's ``backend`` name (imported lazily)."""
from __future__ import annotations

import importlib

from anb.collect_throughput.backends.base import Backend, Session

_REGISTRY = {
    "torch": ("anb.collect_throughput.backends.torch_backend", "TorchBackend"),
    "onnxruntime": ("anb.collect_throughput.backends.onnxruntime_backend", "OnnxRuntimeBackend"),
    "onnxruntime-int8": ("anb.collect_throughput.backends.int8_backend", "OnnxRuntimeInt8Backend"),
    "cuda": ("anb.collect_throughput.backends.cuda", "CudaBackend"),
    "xla": ("anb.collect_throughput.backends.xla", "XlaBackend"),
}


def get_backend(name: str) -> Backend:
    """Instantiate the back-end called ``name``."""
    if name not in _REGISTRY:
        raise ValueError(f"backend={name!r} is invalid; allowed: {sorted(_REGISTRY)} "
                         "(FPGA boards run fpga_code/board/run_dpu.py instead)")
    module, cls = _REGISTRY[name]
    return getattr(importlib.import_module(module), cls)()


__all__ = ["Backend", "Session", "get_backend"]
