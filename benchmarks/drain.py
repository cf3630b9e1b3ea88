"""Drain: preload N no-op tasks, one worker process drains them (agentqueue on PostgreSQL and
SQLite, pgqueuer, procrastinate, Celery with Redis).

The same as ``agentqueue bench drain``, with the same options (``--help`` lists them)::

    .venv/bin/python benchmarks/drain.py [--smoke] [--n N] [--pg URL] [--out DIR]
"""

import sys

from agentqueue.bench.cli import bench

if __name__ == "__main__":
    bench.main(["drain", *sys.argv[1:]], prog_name="benchmarks/drain.py")
