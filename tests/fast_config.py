"""The configuration of the end-to-end tests whose workers must recover in seconds."""

from __future__ import annotations


def fast_config(lease_secs: float = 2, grace_secs: float | None = 5) -> str:
    """Short leases and fast retries, so crash recovery happens in seconds. It ends inside
    ``[worker]``: a test may add lines of that table, then tables of its own. Without
    ``grace_secs`` the worker's default grace applies."""
    grace = "" if grace_secs is None else f"grace_secs = {grace_secs:g}\n"
    return f"""
[queue]
lease_ttl_secs = {lease_secs:g}

[retry]
base = 1.0
cap_secs = 0.2
jitter = 0.0

[worker]
poll_secs = 0.2
{grace}"""
