"""Real worker and scheduler processes through PostgreSQL outages: crash restarts, a 20 s stop,
a stop while long tasks run, a server that is down when they start. Afterwards every process is
still running, every task completed exactly once in the database, the audit chains hold, the
side-effect log shows no task run twice at the same time and none run again unless its lease
truly lapsed, and each process told of each outage a few times, not at every retry.

The scheduler runs apart (``agentqueue scheduler``); the three workers run ``--no-scheduler``
(under a global cap alone, their claims admit).
Waits are generous bounds on events, never timings.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fault_helpers import (
    AGENTQUEUE,
    FAST_RETRIES,
    LEASE_LAPSED,
    Fleet,
    check_outage_logged_once,
    check_side_effects,
    fleet_env,
    wait_until,
)

from agentqueue import Queue
from pg_instance import PgInstance

CONFIG = (
    FAST_RETRIES.format(poll_secs=0.5)
    + """
[scheduler]
tick_secs = 0.5
leader_ttl_secs = 3
renew_secs = 1.0
"""
)
WORKERS = 3
DRAIN_WITHIN = 180.0


def start_fleet(fleet: Fleet) -> None:
    """Three workers without scheduler steps, and a scheduler alone."""
    for i in range(WORKERS):
        fleet.spawn(
            f"worker{i}",
            "worker",
            "--no-scheduler",
            "--app",
            "fault_app:queue",
            "--concurrency",
            "10",
            "--id",
            f"worker{i}",
        )
    fleet.spawn("scheduler", "scheduler", "--id", "scheduler")


def fleet_ready(fleet: Fleet) -> bool:
    """Every worker has started and the scheduler leads."""
    said = {p.name: p.log.read_text(errors="replace") for p in fleet.procs}
    return all(
        ("leads the scheduler" if name == "scheduler" else f"worker {name} started") in text
        for name, text in said.items()
    )


@pytest.fixture
def scenario(pg: PgInstance, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh, migrated database, the config, and a fleet (started by the test)."""
    name = "aq_" + request.node.name.removeprefix("test_")[:40]
    url = pg.create_database(name)
    config = tmp_path / "agentqueue.toml"
    config.write_text(CONFIG)
    fault_log = tmp_path / "side-effects.log"
    fleet = Fleet(tmp_path, fleet_env(url, config, fault_log))
    with Queue(url, config=config) as q:  # migrate before the processes race to
        q.open()
    try:
        yield url, config, fault_log, fleet
    finally:
        fleet.stop()


@pytest.fixture
def running(scenario: Any) -> Any:
    """The scenario with its fleet up: every worker started, the scheduler leading."""
    fleet = scenario[3]
    start_fleet(fleet)
    wait_until(lambda: fleet_ready(fleet), 60, "every process to start", fleet)
    return scenario


def submit(url: str, config: Path, n: int, secs: float) -> set[str]:
    """``n`` tasks of the fault handler; their ids."""
    with Queue(url, config=config) as q:
        results = q.submit_many(
            [
                {
                    "title": f"fault {i}",
                    "task_type": "work",
                    "payload": {"secs": secs},
                    "max_retries": 50,
                }
                for i in range(n)
            ]
        )
    return {str(r.task.id) for r in results}


def counts(url: str) -> dict[str, int]:
    """Tasks by state (raises while the server is down)."""
    with psycopg.connect(url, connect_timeout=2) as conn:
        return dict(conn.execute("SELECT state, count(*) FROM aq_tasks GROUP BY state").fetchall())


def completed_at_least(url: str, n: int) -> bool:
    return counts(url).get("completed", 0) >= n


def starts(fault_log: Path) -> int:
    if not fault_log.exists():
        return 0
    return sum(line.startswith("start ") for line in fault_log.read_text().splitlines())


def settle_and_check(url: str, fault_log: Path, fleet: Fleet, task_ids: set[str]) -> None:
    """Everything the scenarios promise, once the queue has drained."""
    n = len(task_ids)
    wait_until(lambda: completed_at_least(url, n), DRAIN_WITHIN, f"all {n} tasks completed", fleet)
    time.sleep(1.0)  # a late duplicate run or outcome would show up now
    dead = fleet.dead()
    assert not dead, f"processes exited: {[p.name for p in dead]}\n{fleet.report()}"
    by_state = counts(url)
    assert by_state == {"completed": n}, f"{by_state}\n{fleet.report()}"
    with psycopg.connect(url) as conn:
        done = dict(
            conn.execute(
                "SELECT task_id::text, count(*) FROM aq_events WHERE to_state = 'completed'"
                " GROUP BY task_id"
            ).fetchall()
        )
        lapses = dict(
            conn.execute(
                "SELECT task_id::text, count(*) FROM aq_events WHERE action = %s GROUP BY task_id",
                (LEASE_LAPSED,),
            ).fetchall()
        )
    assert set(done) == task_ids, f"{len(task_ids - set(done))} tasks have no completion event"
    twice = {t: c for t, c in done.items() if c != 1}
    assert not twice, f"tasks completed more than once: {list(twice.items())[:10]}"
    verify = subprocess.run(
        [AGENTQUEUE, "--db", url, "verify"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert verify.returncode == 0, f"verify: {verify.stdout}{verify.stderr}"
    runs = check_side_effects(fault_log, task_ids, lapses, fleet)
    again = sum(1 for r in runs.values() if r > 1)
    print(f"{n} tasks; {again} ran more than once; {sum(lapses.values())} lapsed leases taken back")


def test_two_crash_restarts_during_a_drain(pg: PgInstance, running: Any) -> None:
    url, config, fault_log, fleet = running
    task_ids = submit(url, config, 2000, 0.1)
    wait_until(lambda: completed_at_least(url, 200), 60, "the drain to start", fleet)
    first = time.time()
    pg.restart("immediate")
    wait_until(lambda: completed_at_least(url, 700), 90, "the drain to go on", fleet)
    second = time.time()
    pg.restart("immediate")
    settle_and_check(url, fault_log, fleet, task_ids)
    check_outage_logged_once(fleet, first, second)
    check_outage_logged_once(fleet, second, time.time())


def test_a_20_second_stop_during_a_drain(pg: PgInstance, running: Any) -> None:
    url, config, fault_log, fleet = running
    task_ids = submit(url, config, 600, 0.1)
    wait_until(lambda: completed_at_least(url, 100), 60, "the drain to start", fleet)
    down = time.time()
    pg.stop("fast")
    try:
        time.sleep(20)  # the outage itself
    finally:
        pg.start()
    settle_and_check(url, fault_log, fleet, task_ids)
    check_outage_logged_once(fleet, down, time.time())


def test_a_stop_while_long_tasks_run(pg: PgInstance, running: Any) -> None:
    url, config, fault_log, fleet = running
    task_ids = submit(url, config, 30, 10.0)
    wait_until(lambda: starts(fault_log) >= 20, 60, "long tasks to start", fleet)
    down = time.time()
    pg.stop("fast")
    try:
        # Longer than the lease: the scheduler takes the tasks back once the server is up,
        # while their first attempts would still be running had the workers not stopped them.
        time.sleep(7)
    finally:
        pg.start()
    settle_and_check(url, fault_log, fleet, task_ids)
    check_outage_logged_once(fleet, down, time.time())


def test_processes_started_while_the_server_is_down_wait_for_it(
    pg: PgInstance, scenario: Any
) -> None:
    url, config, fault_log, fleet = scenario
    task_ids = submit(url, config, 200, 0.05)
    down = time.time()
    pg.stop("fast")
    try:
        start_fleet(fleet)
        # Longer than start-up plus any wait for the first connection (15 s today): a worker
        # or scheduler that meets a passing fault at start keeps trying instead of exiting.
        time.sleep(25)
        dead = fleet.dead()
        assert not dead, f"exited while the server was down: {[p.name for p in dead]}\n" + (
            fleet.report()
        )
    finally:
        pg.start()
    settle_and_check(url, fault_log, fleet, task_ids)
    check_outage_logged_once(fleet, down, time.time())


CAP = 12
"""Below the fleet's 30 slots: under a global cap alone the workers' claims admit, and race."""


def test_a_crash_restart_while_claims_admit_under_a_cap(pg: PgInstance, scenario: Any) -> None:
    """Under a global cap alone the workers' claims admit (the scheduler admits nothing): a
    crash restart in the middle of the drain loses nothing and runs nothing twice, and no
    snapshot of the drain, before or after it, shows more admitted work than the cap."""
    url, config, fault_log, fleet = scenario
    config.write_text(CONFIG + f"\n[admission]\nmax_active = {CAP}\n")
    start_fleet(fleet)
    wait_until(lambda: fleet_ready(fleet), 60, "every process to start", fleet)
    task_ids = submit(url, config, 400, 0.05)
    admitted: list[int] = []

    def drained_at_least(n: int) -> bool:
        by_state = counts(url)
        admitted.append(by_state.get("queued", 0) + by_state.get("executing", 0))
        return by_state.get("completed", 0) >= n

    wait_until(lambda: drained_at_least(60), 60, "the drain to start", fleet, every=0.05)
    down = time.time()
    pg.restart("immediate")
    wait_until(lambda: drained_at_least(len(task_ids)), DRAIN_WITHIN, "the drain", fleet, 0.05)
    settle_and_check(url, fault_log, fleet, task_ids)
    check_outage_logged_once(fleet, down, time.time())
    assert max(admitted) <= CAP and max(admitted) > CAP // 2, admitted
    with psycopg.connect(url) as conn:
        admitters = {
            actor
            for (actor,) in conn.execute(
                "SELECT DISTINCT actor FROM aq_events WHERE action = 'admit'"
            ).fetchall()
        }
    assert admitters <= {f"worker{i}" for i in range(WORKERS)}, admitters
