"""SIGINT and SIGTERM held for a step that must not be cut in two."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM for a short step that must not be cut in two (a switch and its cleanup,
    a thread's start), then deliver them. In the main thread only: elsewhere Python runs no handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    wanted = (signal.SIGINT, signal.SIGTERM)
    try:
        old = {s: signal.signal(s, lambda signum, frame: pending.append(signum)) for s in wanted}
    except (ValueError, OSError):  # no signals here (an embedded interpreter)
        yield
        return
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        for signum in dict.fromkeys(pending):
            signal.raise_signal(signum)
