"""Memory pre-check: one forward+backward at the largest batch and resolution.

On CUDA the figure is the allocator's peak; on CPU it is the bytes of the tensors autograd
saves for backward plus weights, gradients and momentum (the part that grows with the design).
"""
from __future__ import annotations

from anb.extras import missing

try:
    import torch
    from torch import nn
except ModuleNotFoundError as err:
    raise missing(err, "train", "anb.collect_accuracy.memcheck") from None

from anb.searchspace.arch import Arch
from anb.searchspace.model import build_model
from anb.searchspace.space import SearchSpace


def _storage_key(tensor: torch.Tensor) -> tuple:
    return (tensor.untyped_storage().data_ptr(), tensor.device)


def peak_bytes(model: nn.Module, batch: int, in_channels: int, size: int, dims: int,
               device: torch.device, amp: bool = True) -> int:
    """Peak training memory of one step of ``model`` on a ``batch`` of side ``size``."""
    model = model.to(device).train()
    shape = (batch, in_channels) + (size,) * dims
    x = torch.randn(shape, device=device)
    use_amp = amp and device.type == "cuda"
    if device.type == "cuda":
        if dims == 2:
            # torch's stubs lack Module.to(memory_format=), which torch documents
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
            x = x.to(memory_format=torch.channels_last)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        with torch.autocast("cuda", dtype=torch.float16, enabled=use_amp):
            loss = model(x).float().mean()
        loss.backward()
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device))
    saved: dict[tuple, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved[_storage_key(tensor)] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(x).mean()
    loss.backward()
    state = sum(p.numel() * p.element_size() for p in model.parameters()) * 3
    return sum(saved.values()) + state + x.numel() * x.element_size()


def check(arch: Arch, space: SearchSpace, num_classes: int, in_channels: int, batch: int,
          size: int, budget_gb: float, device: torch.device, amp: bool = True,
          activation: str = "relu") -> tuple[bool, float]:
    """``(fits, peak_gb)`` for ``arch``; a budget of 0 disables the check."""
    if budget_gb <= 0:
        return True, 0.0
    model = build_model(arch, num_classes=num_classes, activation=activation,
                        in_channels=in_channels, space=space)
    try:
        peak = peak_bytes(model, batch, in_channels, size, space.dims, device, amp) / 1e9
    except torch.OutOfMemoryError:
        peak = float("inf")
    finally:
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return peak <= budget_gb, peak
