"""Deliveries from the outbox: each is stored in the transaction of the change that calls for
it, then sent and retried with backoff until it is delivered or given up: dead-letter alerts
(R8), callbacks (R17) and replies on the GitHub issue a task came from. One deliverer
(:mod:`.outbox`) sends every kind, each through its channel."""

from __future__ import annotations

from ..service.runtime import Runtime
from .alerts import AlertChannel
from .callbacks import CallbackChannel, Resolver, resolve
from .github import GitHubReplyChannel
from .outbox import Channel, Deliverer


def channels(rt: Runtime, resolver: Resolver = resolve) -> list[Channel]:
    """Every kind of delivery."""
    return [AlertChannel(rt), CallbackChannel(rt, resolver), GitHubReplyChannel(rt)]


def deliverer(rt: Runtime) -> Deliverer:
    """A deliverer of every kind."""
    return Deliverer(rt, channels(rt))


__all__ = ["Deliverer", "channels", "deliverer"]
