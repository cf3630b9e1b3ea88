"""The names of the outbox's kinds and states, apart from the rules of ``deliveries`` and
``alerts``: the command line's options list them, and ``agentqueue --help`` should not load
those rules (start-up time)."""

from __future__ import annotations

ALERT_KIND = "alert"
"""The outbox kind of a dead-letter alert."""
CALLBACK_KIND = "callback"
"""The outbox kind of a task end POSTed to the task's callback_url (R17)."""
GITHUB_REPLY_KIND = "github_reply"
"""The outbox kind of a comment on the GitHub issue or PR a task came from."""
KINDS = (ALERT_KIND, CALLBACK_KIND, GITHUB_REPLY_KIND)

DELIVERY_STATES = ("pending", "delivered", "given_up")
