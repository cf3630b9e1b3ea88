"""Scaling: 1, 2 and 4 worker processes on PostgreSQL, tasks that wait 20 ms on I/O.

The same as ``agentqueue bench scaling``, with the same options (``--help`` lists them)::

    .venv/bin/python benchmarks/scaling.py [--smoke] [--n N] [--pg URL] [--out DIR]
"""

import sys

from agentqueue.bench.cli import bench

if __name__ == "__main__":
    bench.main(["scaling", *sys.argv[1:]], prog_name="benchmarks/scaling.py")
