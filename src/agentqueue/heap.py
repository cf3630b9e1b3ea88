"""The startup heap of a long-running process, put out of the cyclic collector's reach.

A process that serves (the API, a worker) keeps what it built at start for its whole life: the
modules, the app and its routes and schemas, the settings, the executors. Every collection of
the oldest generation walked all of it again: about 5% of the API's CPU on a bulk submit, and
about a tenth of a draining worker's samples (the collector run from inside row decoding and
task creation, by profile). ``gc.freeze`` moves every object alive now to a generation the
collector never visits; objects that die later are still freed by reference counting, and a
cycle among those frozen is left to the process's end.

Only the commands that start such a process call it (``agentqueue api``, ``worker``,
``serve``), never the library: a program that runs a worker in-process keeps its collector as it
set it.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect what is garbage now, then freeze the rest; how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
