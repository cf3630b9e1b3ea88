"""Routed: the drain and the dispatch latency with six command agents configured (every task
through the routing planner) and with a global cap, against the same with neither, in one run.

The same as ``agentqueue bench routed``, with the same options (``--help`` lists them)::

    .venv/bin/python benchmarks/routed.py [--smoke] [--n N] [--pg URL] [--out DIR]
"""

import sys

from agentqueue.bench.cli import bench

if __name__ == "__main__":
    bench.main(["routed", *sys.argv[1:]], prog_name="benchmarks/routed.py")
