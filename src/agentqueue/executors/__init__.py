"""Executors run one attempt of a task: Python handlers in-process, command agents sandboxed."""
