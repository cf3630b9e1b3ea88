"""Task rows decoded the cheap way give what the plain way gives: tuples with the column names
read once (claims and every task read) against name-keyed rows, on each backend; and
PostgreSQL's JSON loader against psycopg's own, on the values the server sends."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from agentqueue import AsyncQueue, ManualClock
from agentqueue.store.postgres.dialect import ADAPTERS
from agentqueue.store.rows import task_from_row, tasks_from_table

JSON_TEXTS = [
    "[]", "{}", "null", "0", "-12", "12345678901234567890", "2.5", "1e300", '""',
    '"é\\u00e9 \\ud83d\\ude00"', "true", "false", '[1, 2.0, "x", null, [], {}]',
    '{"": [], "a": {"b": [{}]}, "ü": "\\n\\t\\\\"}',
    '{"a": 1, "a": 2}', " [ ] ", '{"x":{}}',
]  # fmt: skip


async def test_a_claims_rows_share_their_times_and_keep_their_own(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    """The rows of one claim decode each of their times right when some are the same and some
    differ between rows (SQLite decodes each distinct time once per statement)."""
    submitted = []
    for i in range(4):
        submitted.append((await queue.submit(title=f"t{i}", task_type="bugfix", priority=2)).task)
        clock.advance(1 + i)
    await queue.admit(10)
    claim_time = clock.advance(0.25)
    claimed = await queue.claim(10, "w1")
    assert [t.id for t in claimed] == [t.id for t in submitted]
    for task, before in zip(claimed, submitted, strict=True):
        assert task.created_at == before.created_at and task.eligible_at == before.eligible_at
        assert task.started_at == task.locked_at == task.updated_at == claim_time
    assert len({t.created_at for t in claimed}) == 4
    store = queue.store
    params = store.codec.params(ids=[t.id for t in claimed], tenant=None)
    async with store._d.read() as s:  # type: ignore[attr-defined]
        names, table = await s.fetch_table("get_tasks", params)
        rows = await s.fetch("get_tasks", params)
    by_table = sorted(tasks_from_table(names, table, store.codec), key=lambda t: t.title)
    by_row = sorted((task_from_row(r, store.codec) for r in rows), key=lambda t: t.title)
    assert [vars(t) for t in by_table] == [vars(t) for t in by_row]


async def test_tasks_from_table_are_the_tasks_task_from_row_gives(queue: AsyncQueue) -> None:
    await queue.submit(title="plain", task_type="bugfix")
    await queue.submit(
        title="full",
        task_type="docs",
        payload={"nested": {"list": [1, 2.5, "é", None, {}], "empty": []}},
        labels=["a", "b"],
        priority=2,
        source="issue",
        source_id="o/r#1",
        idempotency_key="k1",
        callback_url="https://example.test/cb",
    )
    await queue.admit(10)
    claimed = await queue.claim(1, "w1")
    assert len(claimed) == 1
    await queue.complete(claimed[0].id, claimed[0].lock_token, result={"ok": [1, {}]})
    page = await queue.list(limit=10)
    ids = [t.id for t in page.items]
    store = queue.store
    params = store.codec.params(ids=ids, tenant=None)
    async with store._d.read() as s:  # type: ignore[attr-defined]
        names, table = await s.fetch_table("get_tasks", params)
        rows = await s.fetch("get_tasks", params)
    by_table = {t.id: t for t in tasks_from_table(names, table, store.codec)}
    by_row = {t.id: t for t in (task_from_row(r, store.codec) for r in rows)}
    assert len(by_table) == 2
    assert by_table == by_row
    for task_id, task in by_table.items():
        assert vars(task) == vars(by_row[task_id])
        assert [type(v) for v in vars(task).values()] == [
            type(v) for v in vars(by_row[task_id]).values()
        ]
    # The claim's rows too: the task claimed is the one read back, but for the completion.
    done = by_table[claimed[0].id]
    assert done.payload == claimed[0].payload and done.labels == claimed[0].labels
    assert done.result == {"ok": [1, {}]}


@pytest.mark.postgres
@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
@pytest.mark.parametrize("column_type", ["json", "jsonb"])
def test_postgres_json_loader_gives_what_psycopg_gives(
    pg_url: str, column_type: str, binary: bool
) -> None:
    """In both formats: the store asks for binary answers (dialect.BINARY)."""
    query = f"SELECT v::{column_type} FROM unnest(%s::text[]) WITH ORDINALITY AS t(v, i) ORDER BY i"
    with psycopg.connect(pg_url, autocommit=True) as plain:
        expected: list[Any] = [r[0] for r in plain.execute(query, (JSON_TEXTS,), binary=binary)]
    with psycopg.connect(pg_url, autocommit=True, context=ADAPTERS) as ours:
        got: list[Any] = [r[0] for r in ours.execute(query, (JSON_TEXTS,), binary=binary)]
    assert got == expected
    assert [type(v) for v in got] == [type(v) for v in expected]
    # Each empty array or object is a value of its own, never one shared by every row.
    assert got[0] == [] and got[1] == {}
    with psycopg.connect(pg_url, autocommit=True, context=ADAPTERS) as ours:
        first, second = ours.execute(  # type: ignore[misc]
            f"SELECT '[]'::{column_type}, '[]'::{column_type}", binary=binary
        ).fetchone()
    assert first == [] and second == [] and first is not second


def test_our_json_loaders_serve_both_formats_and_refuse_an_unknown_jsonb_version() -> None:
    from psycopg.pq import Format

    from agentqueue.store.postgres.dialect import (
        JsonbBinaryLoader,
        JsonBinaryLoader,
        JsonLoader,
    )

    oids = {name: psycopg.adapters.types[name].oid for name in ("json", "jsonb")}
    for name, oid in oids.items():
        assert ADAPTERS.get_loader(oid, Format.TEXT) is JsonLoader, name
    assert ADAPTERS.get_loader(oids["json"], Format.BINARY) is JsonBinaryLoader
    assert ADAPTERS.get_loader(oids["jsonb"], Format.BINARY) is JsonbBinaryLoader
    loader = JsonbBinaryLoader(oids["jsonb"])
    assert loader.load(b'\x01{"a": []}') == {"a": []}
    with pytest.raises(psycopg.DataError, match="unknown version"):
        loader.load(b'\x02{"a": []}')


def test_json_text_loads_as_json_loads_does_each_empty_value_its_own() -> None:
    """Both dialects read JSON columns through load_json_text: the same values as json.loads,
    and an empty array or object never shared between rows."""
    import json

    from agentqueue.store.rows import load_json_text

    for text in JSON_TEXTS:
        value = load_json_text(text)
        assert value == json.loads(text) and type(value) is type(json.loads(text))
    first, second = load_json_text("[]"), load_json_text("[]")
    assert first == [] and first is not second
    assert load_json_text("{}") is not load_json_text("{}")
