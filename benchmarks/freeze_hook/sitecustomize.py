"""Loaded by ``benchmarks/freeze_hold.py`` into the worker it starts (this directory is on its
PYTHONPATH): times ``agentqueue.heap.freeze_startup_heap``, the call that holds the worker's
event loop as it freezes its startup heap, and appends the milliseconds to the file that
``AQ_FREEZE_HOLD_OUT`` names. Without that variable it does nothing."""

from __future__ import annotations

import os
import time

_OUT = os.environ.get("AQ_FREEZE_HOLD_OUT")

if _OUT:
    import agentqueue.heap as _heap

    _inner = _heap.freeze_startup_heap

    def _timed() -> int:
        start = time.perf_counter()
        try:
            return _inner()
        finally:
            held = (time.perf_counter() - start) * 1000
            with open(_OUT, "a") as out:
                out.write(f"{held:.3f}\n")

    _heap.freeze_startup_heap = _timed
