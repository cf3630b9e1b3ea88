"""``python -m agentqueue.cli``: the ``agentqueue`` command."""

from . import main

main()
