"""Another process holds a SQLite file's write transaction for 40 s, longer than the store's
30 s busy timeout. A worker keeps running and finishes its tasks afterwards; ``agentqueue
submit`` says it is waiting for the database and succeeds once the lock is gone; nothing is
lost, nothing runs twice at once, and a task runs again only if its lease truly lapsed."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from fault_helpers import (
    AGENTQUEUE,
    FAST_RETRIES,
    HERE,
    LEASE_LAPSED,
    Fleet,
    check_side_effects,
    fleet_env,
    tail,
    wait_until,
)

from agentqueue import Queue

LOCK_SECS = 40.0
"""How long the other process holds the write lock (the requirement: 40 s)."""
BUSY_TIMEOUT_SECS = 30.0
"""The SQLite store's busy timeout: past it, every write that waited meets "database is
locked"."""

CONFIG = FAST_RETRIES.format(poll_secs=0.2)


def states(path: Path) -> dict[str, int]:
    with sqlite3.connect(path, timeout=60) as conn:
        return dict(conn.execute("SELECT state, count(*) FROM aq_tasks GROUP BY state"))


def per_task(path: Path, where: str, arg: str) -> dict[str, int]:
    with sqlite3.connect(path, timeout=60) as conn:
        query = f"SELECT task_id, count(*) FROM aq_events WHERE {where} = ? GROUP BY task_id"
        return {str(t): n for t, n in conn.execute(query, (arg,))}


def test_a_40_second_write_lock_is_waited_out(tmp_path: Path) -> None:
    db = tmp_path / "queue.db"
    url = f"sqlite:///{db}"
    config = tmp_path / "agentqueue.toml"
    config.write_text(CONFIG)
    fault_log = tmp_path / "side-effects.log"
    fleet = Fleet(tmp_path, fleet_env(url, config, fault_log))
    with Queue(url, config=config) as q:
        made = q.submit_many(
            [
                {
                    "title": f"short {i}",
                    "task_type": "work",
                    "payload": {"secs": 0.05},
                    "max_retries": 50,
                }
                for i in range(60)
            ]
            + [
                {
                    "title": f"long {i}",
                    "task_type": "work",
                    "payload": {"secs": 3},
                    "max_retries": 50,
                }
                for i in range(4)
            ]
        )
    task_ids = {str(r.task.id) for r in made}
    locker: subprocess.Popen[str] | None = None
    submits: list[tuple[subprocess.Popen[str], Path, Path]] = []
    try:
        worker = fleet.spawn("worker", "worker", "--app", "fault_app:queue", "--concurrency", "4")
        wait_until(lambda: states(db).get("completed", 0) >= 5, 60, "the worker to start", fleet)

        locker = subprocess.Popen(
            [sys.executable, str(HERE / "hold_lock.py"), str(db), str(LOCK_SECS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert locker.stdout is not None
        first = locker.stdout.readline().split()
        assert first and first[0] == "locked", f"the lock holder said {first}"
        locked_at = float(first[1])

        batch = tmp_path / "batch.jsonl"
        batch.write_text(
            "".join(
                json.dumps(
                    {
                        "title": f"during {i}",
                        "task_type": "work",
                        "payload": {"secs": 0.05},
                        "max_retries": 50,
                    }
                )
                + "\n"
                for i in range(20)
            )
        )
        for name, args in (
            (
                "submit-one",
                [
                    "submit",
                    "--title",
                    "during the lock",
                    "--type",
                    "work",
                    "--payload",
                    '{"secs": 0.05}',
                    "--max-retries",
                    "50",
                ],
            ),
            ("submit-file", ["submit", "--file", str(batch)]),
        ):
            out, err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
            with out.open("w") as o, err.open("w") as e:
                proc = subprocess.Popen(
                    [AGENTQUEUE, "--db", url, *args, "--json"],
                    cwd=HERE,
                    env=fleet.env,
                    stdout=o,
                    stderr=e,
                    text=True,
                )
            submits.append((proc, out, err))

        # Past the busy timeout, with the lock still held: everyone is still waiting.
        while time.monotonic() < locked_at + BUSY_TIMEOUT_SECS + 3:
            time.sleep(0.5)
        assert locker.poll() is None, "the lock holder ended early"
        assert worker.alive(), f"the worker exited while the file was locked\n{fleet.report()}"
        for proc, _, err in submits:
            assert proc.poll() is None, (
                f"{proc.args} ended while the lock was held (exit {proc.returncode}):\n{tail(err)}"
            )

        rest, _ = locker.communicate(timeout=LOCK_SECS + 60)
        assert locker.returncode == 0 and "released" in rest, rest
        for proc, out, err in submits:
            code = proc.wait(timeout=120)
            where = f"{proc.args}: exit {code}\nstdout: {tail(out)}\nstderr: {tail(err)}"
            assert code == 0, where
            said = err.read_text()
            assert said.count("waiting for the database") == 1, where
            assert "another process holds the write lock" in said, where
            printed = json.loads(out.read_text())
            for item in printed if isinstance(printed, list) else [printed]:
                task_ids.add(str(item["id"]))
        assert len(task_ids) == 64 + 21

        n = len(task_ids)
        wait_until(lambda: states(db).get("completed", 0) >= n, 180, f"{n} tasks completed", fleet)
        time.sleep(1.0)
        assert worker.alive(), fleet.report()
        assert states(db) == {"completed": n}, f"{states(db)}\n{fleet.report()}"
        done = per_task(db, "to_state", "completed")
        assert set(done) == task_ids and set(done.values()) == {1}, done
        verify = subprocess.run(
            [AGENTQUEUE, "--db", url, "verify"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert verify.returncode == 0, f"verify: {verify.stdout}{verify.stderr}"
        check_side_effects(fault_log, task_ids, per_task(db, "action", LEASE_LAPSED), fleet)
    finally:
        for proc, _, _ in submits:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if locker is not None and locker.poll() is None:
            locker.kill()
            locker.wait()
        fleet.stop()
