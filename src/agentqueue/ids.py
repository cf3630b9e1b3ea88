"""Identifiers: time-ordered UUIDs (version 7) for tasks, random ones for lock tokens."""

from __future__ import annotations

import os
import time
import uuid

from .domain.errors import InvalidInput


def new_task_id() -> uuid.UUID:
    """A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then randomness.

    Time-ordered ids keep the primary-key index append-mostly, which keeps bulk inserts fast.
    """
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (millis & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version
    value |= ((rand >> 62) & 0xFFF) << 64  # rand_a, 12 bits
    value |= 0b10 << 62  # variant
    value |= rand & ((1 << 62) - 1)  # rand_b
    return uuid.UUID(int=value)


def new_lock_token() -> uuid.UUID:
    """A fresh, unguessable lease token."""
    return uuid.uuid4()


def parse_task_id(value: object, field: str = "id") -> uuid.UUID:
    """Parse a task id, raising InvalidInput naming ``field`` when it is not a UUID."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value.strip())
        except ValueError:
            pass
    raise InvalidInput(f"not a task id (a UUID): {str(value)[:80]!r}", field)
