"""PostgreSQL, migration 0020: the audit's hashes are computed inline, and are the same hashes.

aq_event_hash (the chain, R3) and aq_row_mac (the signed row, R24) used to end in a call of
aq_keyed_hex, a SQL function the planner would not inline (it names its costly argument twice),
so every hash in every write was a function call of its own. They now pass the message in
parts to aq_keyed_hex16, which inlines. Two things must hold: the hot statements' plans call no
hashing function any more, and every hash is byte for byte the hash the message form gave,
with and without an audit key (else every chain written before the migration stops verifying).
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from agentqueue import AsyncQueue
from agentqueue.bench.db import preload
from agentqueue.bench.floor import capture
from agentqueue.bench.names import NOOP
from agentqueue.store.sqlfile import load_queries

pytestmark = pytest.mark.postgres

HASHING = re.compile(r"\baq_(keyed_hex\w*|event_hash|row_mac)\(")


def _plan(url: str, sql: str, params: dict[str, Any]) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("EXPLAIN (VERBOSE) " + sql, params).fetchall()
    return "\n".join(str(r[0]) for r in rows)


async def test_the_claim_and_the_completion_hash_without_calling_a_function(pg_url: str) -> None:
    queue = AsyncQueue(pg_url, actor="test")
    try:
        await queue.open()
        await preload(queue, 20, NOOP)
    finally:
        await queue.close()
    # The parameters the store itself sends for one claim batch and its completion.
    claim, complete, taken = await capture(pg_url, 10)
    assert taken == 10
    queries = load_queries("postgres")
    for name, params in (("claim", claim), ("complete", complete)):
        plan = _plan(pg_url, queries[name], params)
        assert "sha256" in plan, name  # the hash is in the plan, inlined...
        assert not HASHING.search(plan), (name, HASHING.findall(plan))  # ...not called


# The message each hash covers, written out whole as the functions were before 0020.
EVENT_MESSAGE = """
    length(prev)::text || ':' || prev || '36:' || task_id::text
    || length(tenant)::text || ':' || tenant || length(seq::text)::text || ':' || seq::text
    || tail"""
ROW_MESSAGE = """
    length(prev)::text || ':' || prev || length(state)::text || ':' || state
    || length(priority::text)::text || ':' || priority::text
    || length(payload)::text || ':' || payload
    || CASE WHEN result IS NULL THEN '~' ELSE length(result)::text || ':' || result END
    || CASE WHEN assigned_to IS NULL THEN '~'
            ELSE length(assigned_to)::text || ':' || assigned_to END
    || CASE WHEN approved_by IS NULL THEN '~'
            ELSE length(approved_by)::text || ':' || approved_by END
    || length(seq::text)::text || ':' || seq::text"""
CASES = """
    SELECT md5(i::text) AS prev, gen_random_uuid() AS task_id,
        CASE WHEN i % 4 = 0 THEN 'default' ELSE 'tenänt-' || i END AS tenant,
        i * 997 AS seq, CASE WHEN i % 3 = 0 THEN '' ELSE 'tail:' || i END AS tail,
        (ARRAY['pending', 'queued', 'executing', 'completed'])[1 + i % 4] AS state,
        i % 10 AS priority, '{"n": ' || i || ', "s": "ünï"}' AS payload,
        CASE WHEN i % 2 = 0 THEN NULL ELSE '{"ok": ' || i || '}' END AS result,
        CASE WHEN i % 3 = 0 THEN NULL ELSE 'worker-' || i END AS assigned_to,
        CASE WHEN i % 5 = 0 THEN NULL ELSE 'approver' END AS approved_by
    FROM generate_series(1, 500) AS i"""


@pytest.mark.parametrize("key", [None, "k1:00112233aabb:44556677ccdd"])
async def test_every_hash_is_the_one_the_whole_message_gave(pg_url: str, key: str | None) -> None:
    queue = AsyncQueue(pg_url)  # migrated to the latest version as it opens
    await queue.open()
    await queue.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        if key is not None:
            conn.execute("SELECT set_config('agentqueue.audit_key', %s, false)", (key,))
        row = conn.execute(
            f"""SELECT count(*) AS n,
                count(*) FILTER (WHERE aq_event_hash(prev, task_id, tenant, seq, tail)
                    IS DISTINCT FROM aq_keyed_hex(convert_to({EVENT_MESSAGE}, 'UTF8'))) AS events,
                count(*) FILTER (WHERE aq_row_mac(prev, state, priority, payload, result,
                                                  assigned_to, approved_by, seq)
                    IS DISTINCT FROM aq_keyed_hex(convert_to({ROW_MESSAGE}, 'UTF8'))) AS rows,
                min(aq_event_hash(prev, task_id, tenant, seq, tail)) AS sample
            FROM ({CASES}) AS c"""
        ).fetchone()
    assert row is not None
    n, events, rows, sample = row
    # Keyed hashes name their key ("id:hex"); unkeyed ones are bare SHA-256 hex.
    assert n == 500 and (":" in sample) == (key is not None)
    assert (events, rows) == (0, 0)
