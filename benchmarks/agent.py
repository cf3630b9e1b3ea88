"""Agent: a command agent (``true``) end to end, agent tasks per second, and the overhead of an
attempt over a bare fork+exec of the same command, unsandboxed and under the default isolation.

The same as ``agentqueue bench agent``, with the same options (``--help`` lists them)::

    .venv/bin/python benchmarks/agent.py [--smoke] [--n N] [--pg URL] [--out DIR]
"""

import sys

from agentqueue.bench.cli import bench

if __name__ == "__main__":
    bench.main(["agent", *sys.argv[1:]], prog_name="benchmarks/agent.py")
