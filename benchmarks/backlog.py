"""Backlog: claim latency with 1,000, 100,000 and 1,000,000 tasks queued on PostgreSQL.

The same as ``agentqueue bench backlog``, with the same options (``--help`` lists them)::

    .venv/bin/python benchmarks/backlog.py [--smoke] [--n N] [--pg URL] [--out DIR]
"""

import sys

from agentqueue.bench.cli import bench

if __name__ == "__main__":
    bench.main(["backlog", *sys.argv[1:]], prog_name="benchmarks/backlog.py")
