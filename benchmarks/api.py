"""The HTTP API against the Python API on PostgreSQL: single submits from 16 connections, bulk
submits, and GET latency at a steady rate, against a real ``agentqueue api`` server process.

The same as ``agentqueue bench api``, with the same options (``--help`` lists them)::

    .venv/bin/python benchmarks/api.py [--smoke] [--n N] [--pg URL] [--out DIR]
"""

import sys

from agentqueue.bench.cli import bench

if __name__ == "__main__":
    bench.main(["api", *sys.argv[1:]], prog_name="benchmarks/api.py")
