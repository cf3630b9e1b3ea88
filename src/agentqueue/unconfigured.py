"""Whether a process runs on the default settings, told from names alone.

A process is unconfigured when no configuration file is named and no ``AGENTQUEUE_`` variable
sets a setting other than ``db`` (text, of which every value is valid). Its settings are then the
defaults with that text, and a command that never reads them (``list``, ``stats``, ``events``)
need not load their models, nor pydantic, which was about a third of ``list``'s start. This module
imports nothing of the configuration; a test holds its names to the models of
:mod:`agentqueue.config` and its answer to what :func:`agentqueue.config.environment` reads.
"""

from __future__ import annotations

from collections.abc import Mapping

PREFIX = "AGENTQUEUE_"
"""The variables' prefix (``config.ENV_PREFIX``), matched without regard to case, as
agentqueue.envsettings matches it."""

NESTING = "__"
"""What descends a level (``envsettings.NESTING``; the property test holds the two to one
answer)."""

FIELDS = frozenset(
    {
        "admission",
        "agents",
        "alerts",
        "api",
        "approval",
        "audit",
        "callbacks",
        "db",
        "github",
        "guardrails",
        "intake",
        "logging",
        "metrics",
        "pipelines",
        "preemption",
        "prompts",
        "queue",
        "rate_limits",
        "retention",
        "retry",
        "scheduler",
        "task_types",
        "tools",
        "worker",
    }
)
"""The top-level fields of ``config.Settings``: a variable naming one (alone, or with ``__`` and
a key below it) sets a setting."""

WHOLE_EXCLUDED = frozenset({"api"})
"""Fields not read from their own variable: ``AGENTQUEUE_API`` is the URL of a server for the
command line, which would otherwise be read as the whole ``[api]`` section in JSON and refused
(its keys are still read: ``AGENTQUEUE_API__PORT``). ``config`` reads the environment with it."""

TEXT_FIELD = "db"
"""The one field any variable's text is a valid value of (``config.TEXT_FIELDS``)."""


def default_db(environ: Mapping[str, str]) -> tuple[bool, str | None]:
    """``(True, db)`` when the ``AGENTQUEUE_`` variables of ``environ`` set no setting but
    ``db`` (``db`` is that variable's text, or None when none is set); ``(False, None)`` when
    they set anything else, or name ``db`` twice (in two cases), which validation decides."""
    db: str | None = None
    seen = False
    for name, value in environ.items():
        lower = name.lower()
        if not lower.startswith(PREFIX.lower()):
            continue
        key = lower[len(PREFIX) :]
        head = key.partition(NESTING)[0]
        if head not in FIELDS or (key == head and key in WHOLE_EXCLUDED):
            continue  # read by whoever reads it (AGENTQUEUE_CONFIG), or not at all
        if key != TEXT_FIELD or seen:
            return False, None
        seen = True
        db = value
    return True, db
