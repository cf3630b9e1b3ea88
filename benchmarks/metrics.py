"""Metrics: a ``/metrics`` scrape (read afresh and rendered) with 1,000,000 tasks in the table
on PostgreSQL.

The same as ``agentqueue bench metrics``, with the same options (``--help`` lists them)::

    .venv/bin/python benchmarks/metrics.py [--smoke] [--pg URL] [--out DIR]
"""

import sys

from agentqueue.bench.cli import bench

if __name__ == "__main__":
    bench.main(["metrics", *sys.argv[1:]], prog_name="benchmarks/metrics.py")
