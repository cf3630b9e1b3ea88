"""The machine's busy CPU time so far, for the drain drivers: every process on every core
(user, nice, system, irq and softirq time from /proc/stat; idle, I/O wait and time stolen by
the hypervisor left out), in seconds. Its difference across a drain is the CPU that drain cost
the machine, the worker's and the database's alike, read the same way for every system
(agentqueue's bench reads it with agentqueue.bench.procs.machine_busy_secs)."""

from __future__ import annotations

import os


def busy_secs() -> float:
    """Busy CPU seconds of the whole machine since boot."""
    with open("/proc/stat") as stat:
        fields = stat.readline().split()[1:8]
    user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields)
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")
