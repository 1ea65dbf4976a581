"""Ctrl-C held off native model fits: XGBoost and LightGBM must not see a KeyboardInterrupt
raised inside their training (a Python callback between boosting rounds), which leaves their
native state corrupted and can abort the process. The interrupt is kept and raised as soon as
the fit returns, at a safe point between members."""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator


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
