"""How SQLite gives events their global numbers (``gseq``): numbered as written (each insert
takes ``max(gseq) + 1, + 2, ...``, as the event inserts of ``store/sqlite/queries`` do) against
numbered by the anchoring step, as before schema version 17 (the events written without a
number, then the anchoring step reads those waiting and numbers them in one UPDATE). N events
written in transactions of B rows each, then numbered (the old way) or anchored (the new way),
each way on a fresh file (version 16 for the old way), alternating; prints each way's time and
the ratio::

    .venv/bin/python benchmarks/audit_numbering.py [--n 60000] [--batch 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from agentqueue import AsyncQueue, Settings
from agentqueue.store.migrate import available
from agentqueue.store.sqlite.dialect import SQLiteDialect

COLUMNS = "task_id, seq, tenant, at, from_state, to_state, action, actor, reason, data, hash"
ROW = "(?, 1, 'default', ?, NULL, 'pending', 'submit', 'bench', '', '{}', ?)"


def _rows(batch: int, start: int) -> list[object]:
    params: list[object] = []
    for i in range(batch):
        params += [str(uuid.uuid4()), start + i, f"{start + i:064x}"]
    return params


def write(path: Path, n: int, batch: int, numbered: bool) -> float:
    """Seconds to write ``n`` events in transactions of ``batch`` rows."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    values = ", ".join([ROW] * batch)
    if numbered:
        # Each row the next number after the highest so far (the unique index answers max).
        sql = (
            f"INSERT INTO aq_events ({COLUMNS}, gseq) "
            f"SELECT v.*, (SELECT coalesce(max(gseq), 0) FROM aq_events WHERE gseq IS NOT NULL)"
            f" + row_number() OVER () FROM (VALUES {values}) AS v"
        )
    else:
        sql = f"INSERT INTO aq_events ({COLUMNS}) VALUES {values}"
    started = time.perf_counter()
    for start in range(0, n, batch):
        db.execute("BEGIN IMMEDIATE")
        db.execute(sql, _rows(batch, start))
        db.execute("COMMIT")
    elapsed = time.perf_counter() - started
    db.close()
    return elapsed


UNNUMBERED = "SELECT task_id, seq, hash FROM aq_events WHERE gseq IS NULL ORDER BY at, task_id, seq"
NUMBER = """UPDATE aq_events SET gseq = v.value ->> 'gseq'
FROM json_each(?) AS v
WHERE aq_events.task_id = v.value ->> 'task_id' AND aq_events.seq = v.value ->> 'seq'
  AND aq_events.gseq IS NULL"""


def number_the_old_way(path: Path) -> int:
    """The anchoring step's numbering before version 17: read what waits, number it."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    waiting = db.execute(UNNUMBERED).fetchall()
    rows = [{"task_id": t, "seq": s, "gseq": i} for i, (t, s, _) in enumerate(waiting, 1)]
    db.execute(NUMBER, (json.dumps(rows),))
    db.execute("COMMIT")
    db.close()
    return len(rows)


async def old_schema(path: Path) -> None:
    """A file at schema version 16: events written without a number."""
    dialect = SQLiteDialect(f"sqlite:///{path}")
    await dialect.open()
    await dialect.applied_versions()
    for migration in available("sqlite")[:16]:
        await dialect.apply_migration(migration)
    await dialect.close()


async def one_round(folder: Path, n: int, batch: int) -> tuple[float, float, float, float]:
    """(old way: writes, numbering) and (new way: writes, anchoring) seconds, on fresh files.
    The anchoring step itself (reading the events, the running hash, signing) is left out of
    the old way's figure: only its numbering, which the new way no longer does."""
    old = folder / f"{uuid.uuid4().hex}.db"
    await old_schema(old)
    old_writes = await asyncio.to_thread(write, old, n, batch, False)
    started = time.perf_counter()
    assert await asyncio.to_thread(number_the_old_way, old) == n
    numbering = time.perf_counter() - started
    new = folder / f"{uuid.uuid4().hex}.db"
    queue = AsyncQueue(f"sqlite:///{new}", settings=Settings())
    await queue.open()  # migrated: the real schema, indexes and triggers
    new_writes = await asyncio.to_thread(write, new, n, batch, True)
    started = time.perf_counter()
    made = await queue.anchor_audit()
    anchoring = time.perf_counter() - started
    assert made and made[-1].count == n and not made[-1].gaps, made
    await queue.close()
    return old_writes, numbering, new_writes, anchoring


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=60_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            old, numbering, new, anchoring = await one_round(Path(tmp), args.n, args.batch)
            # The new way's anchoring (read, hash, sign) counted in full, the old way's only
            # its numbering (read and UPDATE): the comparison does not favour the new way.
            ratios.append((new + anchoring) / (old + numbering))
            print(
                f"round {i + 1}: numbered by the anchoring step: writes {old:.2f} s + "
                f"numbering {numbering:.2f} s; numbered as written: writes {new:.2f} s + "
                f"anchoring {anchoring:.2f} s; ratio {ratios[-1]:.2f}"
            )
    median = statistics.median(ratios)
    print(f"median ratio (numbered as written / by the anchoring step): {median:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
