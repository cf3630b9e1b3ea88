"""Admission: the drain and the dispatch latency with admission limits on
(``admission.max_active = 1000``: the scheduler admits every task), against the same figures with
them off, in one run.

The same as ``agentqueue bench admission``, with the same options (``--help`` lists them)::

    .venv/bin/python benchmarks/admission.py [--smoke] [--n N] [--pg URL] [--out DIR]
"""

import sys

from agentqueue.bench.cli import bench

if __name__ == "__main__":
    bench.main(["admission", *sys.argv[1:]], prog_name="benchmarks/admission.py")
