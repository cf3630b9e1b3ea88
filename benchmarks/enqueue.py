"""Enqueue rate: one task at a time, and in bulk, on PostgreSQL and SQLite.

The same as ``agentqueue bench enqueue``, with the same options (``--help`` lists them)::

    .venv/bin/python benchmarks/enqueue.py [--smoke] [--n N] [--pg URL] [--out DIR]
"""

import sys

from agentqueue.bench.cli import bench

if __name__ == "__main__":
    bench.main(["enqueue", *sys.argv[1:]], prog_name="benchmarks/enqueue.py")
