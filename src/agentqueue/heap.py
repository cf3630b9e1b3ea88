"""The startup heap of a long-running process, put out of the cyclic collector's reach.

A process that serves (the API, a worker) keeps what it built at start for its whole life: the
modules, the app and its routes and schemas, the settings, the executors. Every collection of
the oldest generation walked all of it again: about 5% of the API's CPU on a bulk submit, and
about a tenth of a draining worker's samples (the collector run from inside row decoding and
task creation, by profile). ``gc.freeze`` moves every object alive now to a generation the
collector never visits; objects that die later are still freed by reference counting, and a
cycle among those frozen is left to the process's end.

From then on the youngest generation is collected every 20,000 net allocations instead of
Python's 700 (:data:`SERVING_THRESHOLD`). A draining worker allocates a few dozen objects per
task that live until its outcome is written, so at 700 the collector ran every few tasks, and
every tenth and hundredth run walked the older generations, where a thousand attempts in flight
and their claimed rows lie: 15 to 20 us of a worker's CPU per task. At 20,000 a drain of 20,000
tasks runs no collection of the older generations. Cyclic garbage waits a little longer for
its collection: at most 20,000 objects.

Only the commands that start such a process call it (``agentqueue api``, ``worker``,
``serve``), never the library: a program that runs a worker in-process keeps its collector as it
set it.
"""

from __future__ import annotations

import gc

SERVING_THRESHOLD = (20_000, 20, 20)
"""The collector's thresholds in a serving process once its startup heap is frozen (Python's
default: 700, 10, 10)."""


def freeze_startup_heap() -> None:
    """Freeze what is alive now, and collect less often from now on (the collector on, if the
    command started with it off: ``launch``).

    Nothing is collected first. The command started with the collector off, so a collection
    now would walk every object the start built, for little: the garbage the imports left (in a
    worker about 500 objects, such as the pure-Python ``datetime`` classes its C module
    replaces, and no file or socket) is frozen with the rest, never to be collected. That
    collection held a worker's loop 28 to 41 ms just after its first claim
    (``benchmarks/freeze_hold.py``). Nor is what was frozen counted here: ``gc.get_freeze_count``
    walks it all (about 6 ms in a worker)."""
    gc.freeze()
    gc.set_threshold(*SERVING_THRESHOLD)
    gc.enable()
