"""Floor: the store's claim and complete statements alone (the physical limit of a drain), and
the drain as a fraction of it, in one run.

The same as ``agentqueue bench floor``, with the same options (``--help`` lists them)::

    .venv/bin/python benchmarks/floor.py [--smoke] [--n N] [--pg URL] [--out DIR]
"""

import sys

from agentqueue.bench.cli import bench

if __name__ == "__main__":
    bench.main(["floor", *sys.argv[1:]], prog_name="benchmarks/floor.py")
