"""Every benchmark in one run: the same as ``agentqueue bench``, with the same options::

    .venv/bin/python benchmarks/run_all.py [--smoke] [--n N] [--pg URL] [--out DIR] [--no-peers]
    .venv/bin/python benchmarks/run_all.py --setup-peers    # create .peers/ first, once

Prints a markdown table; writes results.json, results.md and drain.png to benchmarks/results/.
"""

import sys

from agentqueue.bench.cli import bench

if __name__ == "__main__":
    bench.main(sys.argv[1:], prog_name="benchmarks/run_all.py")
