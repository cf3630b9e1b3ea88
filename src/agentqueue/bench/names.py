"""The task types of the benchmarks' tasks, apart from the rest of the benchmarks: the drain's
app (``noop_app``) imports them and nothing else of this package, as a user's app would."""

from __future__ import annotations

NOOP = "bench_noop"
"""Task type of the no-op tasks."""
IO_STEP = "bench_io_step"
"""Task type of the scaling tasks (an agent step that waits on I/O)."""
