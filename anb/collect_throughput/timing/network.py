"""What a protocol measures: its search space's network and the input that network takes.

A protocol names its space (``Protocol.space``); the measured network is ``space.build(arch)``
(the task's classes and input channels) and its input is the space's task input
(``Task.input_shape``) at the measured resolution: the protocol's ``resolution`` when set, else
the architecture's own (:meth:`~anb.searchspace.base.Space.resolutions`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from anb.collect_throughput.timing.protocol import Protocol
from anb.searchspace.base import Space
from anb.searchspace.registry import get_space

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn


def protocol_space(protocol: Protocol) -> Space:
    return get_space(protocol.space)


def measured_arch(protocol: Protocol, arch: Any) -> Any:
    """``arch`` (an object or string) as an architecture of the protocol's space; an
    architecture of another space is refused naming both."""
    return protocol_space(protocol).arch(arch)


def measured_resolution(protocol: Protocol, arch: Any) -> int:
    """The input size ``arch`` is measured at under ``protocol``."""
    if protocol.resolution is not None:
        return protocol.resolution
    space = protocol_space(protocol)
    return int(space.resolutions(space.to_choices([arch]))[0])


def input_shape(protocol: Protocol, arch: Any, batch: int | None = None) -> tuple[int, ...]:
    """The measured input's shape ``(batch, channels, *size)`` (the protocol's batch)."""
    task = protocol_space(protocol).task
    return task.input_shape(protocol.batch if batch is None else batch,
                            measured_resolution(protocol, arch))


def build_network(protocol: Protocol, arch: Any) -> nn.Module:
    """The measured network of ``arch`` (the space's builder, its task's defaults)."""
    return protocol_space(protocol).build(arch)


def require_images(protocol: Protocol, what: str) -> None:
    """Refuse ``what`` (which feeds RGB images) for a space whose input is not RGB images."""
    task = protocol_space(protocol).task
    if (task.in_channels, task.dims) != (3, 2):
        raise ValueError(f"device {protocol.device!r}: {what} feeds 3-channel 2-D images, but "
                         f"search space {protocol.space!r} takes {task.in_channels}-channel "
                         f"{task.dims}-D {task.dataset} inputs")
