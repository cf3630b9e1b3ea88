"""The ``agentqueue`` command's start: the cyclic collector off while its modules load.

A command imports a few hundred modules as it starts (the worker about five hundred: click,
pydantic, psycopg, its own), and everything they build lives as long as the process. Python's
collector ran some dozens of times over that growing heap meanwhile and freed nothing of it:
about a tenth of a worker's time from its process start to its first claim
(``benchmarks/startup_gc.py``, benchmarks/HISTORY.md). So the command starts with the collector
off, and it is on again when the process has started: a serving process (worker, serve, api)
turns it on as it freezes its startup heap (``heap.freeze_startup_heap``), and
:data:`STARTUP_SECS` after the start it is turned on whatever the command, so that no process
runs long without it. Objects still die by reference counting meanwhile; only cycles wait.

As the command ends, its heap is frozen too (``gc.freeze``). At exit the interpreter collects
cycles once more as it tears the modules down, and that walk visited every object the modules
built: ``agentqueue list`` took 0.91x the time without it, 202 against 221 ms, and ``--help``
0.91x (``benchmarks/startup_ab.py``, benchmarks/HISTORY.md). The modules are still torn down and
what they held is freed by reference counting; only cycles among those objects are left for the
process's end to reclaim, as Python leaves the finalizers of objects alive at exit unpromised
anyway. Output is not at stake: the standard streams are flushed at exit and the logging
handlers closed (``atexit``) whatever the collector does.

The library never does this: only the command's own process, started here.
"""

from __future__ import annotations

import gc
import threading

STARTUP_SECS = 2.0
"""When the collector is turned on again at the latest, counted from the command's start."""


def collector_off_while_starting() -> None:
    """Turn the cyclic collector off now, and on again after :data:`STARTUP_SECS`."""
    gc.disable()
    timer = threading.Timer(STARTUP_SECS, gc.enable)
    timer.daemon = True  # never holds the process open at its exit
    timer.name = "agentqueue-collector-on"
    timer.start()


def main() -> None:
    """The ``agentqueue`` command."""
    collector_off_while_starting()
    try:
        from .cli import main as command

        command()
    finally:
        # The process ends (click ends it with SystemExit, whatever the outcome): the heap out
        # of the collector's reach, so that the last collections at exit do not walk it.
        gc.freeze()
