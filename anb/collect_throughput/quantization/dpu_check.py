"""Host-side check that a built architecture runs entirely on a Xilinx DPU (one DPU subgraph).

Two views, both must pass: the PyTorch modules of the network (what ``pytorch_nndct`` sees) and
the ONNX graph of its export (the operator-level graph a compiler partitions). DPUCZDX8G and
DPUCVDX8G run convolutions (incl. depthwise), folded BatchNorm, ReLU/ReLU6, hard-sigmoid,
element-wise add/multiply, global average pooling and fully connected layers; sigmoid, SiLU
(Swish) and softmax fall back to the CPU and split the graph.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from anb.extras import missing

try:
    from torch import nn
except ModuleNotFoundError as err:
    raise missing(err, "measure", "anb.collect_throughput.quantization.dpu_check") from None

DPU_MODULES: tuple[type[nn.Module], ...] = (
    nn.Conv2d, nn.BatchNorm2d, nn.ReLU, nn.ReLU6, nn.Hardsigmoid, nn.AdaptiveAvgPool2d,
    nn.Linear, nn.Dropout, nn.Identity, nn.Sequential, nn.ModuleList,
)
DPU_ONNX_OPS = frozenset({
    "Conv", "BatchNormalization", "Relu", "Clip", "HardSigmoid", "Add", "Mul",
    "GlobalAveragePool", "Flatten", "Reshape", "Gemm", "MatMul", "Identity", "Constant",
})


def unsupported_modules(model: nn.Module) -> list[str]:
    """``name: Type`` of every leaf module the DPU does not run (containers are skipped)."""
    bad = []
    for name, module in model.named_modules():
        leaf = not any(True for _ in module.children())
        if leaf and not isinstance(module, DPU_MODULES) and type(module).__name__ != "DropPath":
            bad.append(f"{name}: {type(module).__name__}")
    return bad


def unsupported_onnx_ops(path: str | Path) -> list[str]:
    """``node: OpType`` of every ONNX node outside :data:`DPU_ONNX_OPS`."""
    import onnx

    return [f"{n.name or n.output[0]}: {n.op_type}" for n in onnx.load(str(path)).graph.node
            if n.op_type not in DPU_ONNX_OPS]


def dpu_violations(model: nn.Module, resolution: int = 64) -> list[str]:
    """Every module and exported operator the DPU would not run (empty: FPGA-safe)."""
    from anb.searchspace.onnx_export import export_onnx

    found = unsupported_modules(model)
    with tempfile.TemporaryDirectory(prefix="anb-dpu-") as tmp:
        path = export_onnx(model, Path(tmp) / "model.onnx", resolution=resolution, dynamic=False)
        found += [f"onnx {v}" for v in unsupported_onnx_ops(path)]
    return found


def assert_dpu_safe(model: nn.Module, resolution: int = 64) -> None:
    """Raise ``ValueError`` listing what would leave the DPU."""
    found = dpu_violations(model, resolution)
    if found:
        shown = ", ".join(found[:6]) + (f" (+{len(found) - 6} more)" if len(found) > 6 else "")
        raise ValueError(f"not DPU-safe: {len(found)} op(s) outside the DPU set: {shown}")
