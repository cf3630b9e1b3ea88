"""Cost: CPU and peak RSS of an idle worker process and of a busy one.

The same as ``agentqueue bench cost``, with the same options (``--help`` lists them)::

    .venv/bin/python benchmarks/cost.py [--smoke] [--n N] [--pg URL] [--out DIR]
"""

import sys

from agentqueue.bench.cli import bench

if __name__ == "__main__":
    bench.main(["cost", *sys.argv[1:]], prog_name="benchmarks/cost.py")
