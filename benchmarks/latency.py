"""Dispatch latency: tasks submitted one at a time at a steady rate to an idle worker; p50 and
p99 of created -> started.

The same as ``agentqueue bench latency``, with the same options (``--help`` lists them)::

    .venv/bin/python benchmarks/latency.py [--smoke] [--n N] [--pg URL] [--out DIR]
"""

import sys

from agentqueue.bench.cli import bench

if __name__ == "__main__":
    bench.main(["latency", *sys.argv[1:]], prog_name="benchmarks/latency.py")
