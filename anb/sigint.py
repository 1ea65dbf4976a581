"""Ctrl-C held off code that must not be interrupted: XGBoost and LightGBM must not see a
KeyboardInterrupt raised inside their training (a Python callback between boosting rounds),
which leaves their native state corrupted and aborts the process; a measured search waits for
its measuring thread's current block. The interrupt is kept and raised when the block ends."""
from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def deferred_sigint() -> Iterator[None]:
    """Hold SIGINT while the block runs; re-deliver it (to the previous handler: by default a
    KeyboardInterrupt) when the block ends. Only the main thread handles signals: elsewhere
    this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            signal.raise_signal(signal.SIGINT)
