"""``python -m agentqueue.cli``: the ``agentqueue`` command."""

from ..launch import main

main()
