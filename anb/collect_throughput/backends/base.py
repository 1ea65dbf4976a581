"""The back-end interface: prepare a model for a protocol, then step it under a clock."""
from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anb.collect_throughput.timing.loop import Clock
from anb.collect_throughput.timing.protocol import Protocol


@dataclass
class Session:
    """A prepared model: ``step()`` runs one forward pass on the next input batch."""

    step: Callable[[], None]
    clock: Clock
    environment: dict[str, Any]
    compile_count: Callable[[], int] | None = None
    sync: Callable[[], None] | None = None
    """Waits until the device has finished every step enqueued so far (None: steps are
    synchronous). Latency protocols call it after every request."""
    finish: Callable[[], dict[str, Any]] = lambda: {}
    """Called after timing; returns extra result fields (e.g. fallback ops)."""
    extra: dict[str, Any] = field(default_factory=dict)


def cycling(batches: Sequence[Any], run: Callable[[Any], Any]) -> Callable[[], None]:
    """A step function feeding ``batches`` to ``run`` round-robin (one batch: no indexing)."""
    if len(batches) == 1:
        only = batches[0]
        return lambda: run(only)
    feed = itertools.cycle(batches)
    return lambda: run(next(feed))


class Backend(ABC):
    """Turns (architecture, protocol) into a :class:`Session`."""

    name: str = ""

    def check(self, protocol: Protocol) -> None:
        """Reject protocols this back-end cannot run (clear error naming the field)."""
        if protocol.backend != self.name:
            raise ValueError(f"backend={protocol.backend!r} given to the {self.name!r} back-end")

    @abstractmethod
    def prepare(self, arch: Any, protocol: Protocol, workdir: Path) -> Session:
        """Build the model of ``arch`` (an architecture of the protocol's space) and its inputs
        for ``protocol`` (files may be cached in ``workdir``)."""
