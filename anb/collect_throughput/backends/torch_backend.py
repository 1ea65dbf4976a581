"""PyTorch eager back-end (CPU here; :mod:`.cuda` reuses it on a GPU).

eval + inference mode, optional channels_last, fp16/bf16 autocast and ``torch.compile``;
threads pinned with ``torch.set_num_threads``.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from anb.extras import missing

try:
    import torch
except ModuleNotFoundError as err:
    raise missing(err, "measure", "the PyTorch measurement back-end") from None

from anb.collect_throughput.backends.base import Backend, Session, cycling
from anb.collect_throughput.timing.environment import host_environment
from anb.collect_throughput.timing.inputs import make_inputs
from anb.collect_throughput.timing.loop import Clock, CpuClock
from anb.collect_throughput.timing.network import build_network, protocol_space
from anb.collect_throughput.timing.protocol import Protocol

AUTOCAST = {"fp16": torch.float16, "bf16": torch.bfloat16}


def memory_format(protocol: Protocol) -> torch.memory_format:
    return torch.channels_last if protocol.layout == "channels_last" else torch.contiguous_format


def input_tensors(protocol: Protocol, arch: Any, device: str = "cpu",
                  dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    """The protocol's batches for ``arch`` (``(batch, 3, resolution, resolution)`` for an
    image space) as tensors on ``device`` in ``dtype`` and the protocol's memory layout, built
    before timing starts."""
    return [torch.from_numpy(x).to(device=device, dtype=dtype).contiguous(
        memory_format=memory_format(protocol)) for x in make_inputs(protocol, arch)]


class TorchBackend(Backend):
    """Eager PyTorch on ``device`` (``cpu``)."""

    name = "torch"
    device = "cpu"

    def check(self, protocol: Protocol) -> None:
        super().check(protocol)
        if protocol.precision not in ("fp32", "fp16", "bf16"):
            raise ValueError(f"precision={protocol.precision!r} is not run by the {self.name!r} "
                             "back-end; allowed: ['fp32', 'fp16', 'bf16']")
        dims = protocol_space(protocol).task.dims
        if protocol.layout == "channels_last" and dims != 2:
            raise ValueError(f"layout='channels_last' needs 2-D inputs; search space "
                             f"{protocol.space!r} takes {dims}-D inputs; allowed: ['nchw']")

    def clock(self, protocol: Protocol) -> Clock:
        return CpuClock(kind=protocol.clock)

    def environment(self, protocol: Protocol) -> dict[str, Any]:
        return {**host_environment(), "device_name": "cpu",
                "torch_threads": torch.get_num_threads()}

    def setup(self, protocol: Protocol) -> None:
        torch.set_num_threads(protocol.threads)

    def sync(self):
        """Device synchronisation after a latency request (None: eager CPU is synchronous)."""
        return None

    def input_dtype(self, protocol: Protocol) -> torch.dtype:
        """float32 inputs, cast by autocast inside the network (the CUDA back-end feeds fp16)."""
        return torch.float32

    def forward(self, arch: Any, protocol: Protocol, autocast_cache: bool = True,
                ) -> tuple[Callable[[torch.Tensor], torch.Tensor], list[torch.Tensor]]:
        """The protocol's forward (eval, inference mode, layout, autocast, compile) and its
        input batches, on this back-end's device."""
        # torch's stubs lack Module.to(memory_format=), which torch documents
        model = build_network(protocol, arch).eval().to(  # type: ignore[call-overload]
            self.device, memory_format=memory_format(protocol))
        if protocol.compile:
            model = torch.compile(model)
        batches = input_tensors(protocol, arch, self.device, self.input_dtype(protocol))
        autocast = (torch.autocast(self.device, dtype=AUTOCAST[protocol.precision],
                                   cache_enabled=autocast_cache)
                    if protocol.precision in AUTOCAST else contextlib.nullcontext())

        def run(x: torch.Tensor) -> torch.Tensor:
            with torch.inference_mode(), autocast:
                return model(x)

        return run, batches

    def prepare(self, arch: Any, protocol: Protocol, workdir: Path) -> Session:
        self.check(protocol)
        self.setup(protocol)
        run, batches = self.forward(arch, protocol)
        return Session(step=cycling(batches, run), clock=self.clock(protocol),
                       environment=self.environment(protocol), sync=self.sync())
