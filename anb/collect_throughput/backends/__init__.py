"""Device back-ends, looked up by the protocol's ``backend`` name in
:data:`~anb.collect_throughput.registries.BACKENDS` (built-in or an ``anb.backends`` entry point;
imported when first asked for)."""
from __future__ import annotations

from anb.collect_throughput.backends.base import Backend, Session
from anb.collect_throughput.registries import BACKENDS


def get_backend(name: str) -> Backend:
    """Instantiate the back-end called ``name``."""
    cls = BACKENDS.load(name)
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise ValueError(f"{BACKENDS.where(name)} names {cls!r}, not an anb Backend subclass")
    backend = cls()
    if not backend.name:
        backend.name = name
    return backend


__all__ = ["Backend", "Session", "get_backend"]
