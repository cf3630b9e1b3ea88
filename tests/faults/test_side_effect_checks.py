"""The checks the fault scenarios end with catch what they are meant to catch: a task run twice
at the same time, a task run again with no lapsed lease to explain it, a task never run."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from fault_helpers import (
    MAX_OUTAGE_WARNINGS,
    Fleet,
    Proc,
    attempts,
    check_outage_logged_once,
    check_side_effects,
)

A, B = "task-a", "task-b"


def write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_sequential_runs_explained_by_a_lapse_pass(tmp_path: Path) -> None:
    log = write(
        tmp_path / "log",
        f"start {A} 1 1.0 0",
        f"end {A} 1 2.0 0 done",
        f"start {A} 2 3.0 0",
        f"end {A} 2 4.0 0 done",
        f"start {B} 1 1.5 0",
        f"end {B} 1 1.6 0 done",
    )
    runs = check_side_effects(log, {A, B}, {A: 1}, Fleet(tmp_path, {}))
    assert runs == {A: 2, B: 1}
    assert [a.pid for a in attempts(log)[A]] == ["1", "2"]


def test_two_runs_at_the_same_time_fail(tmp_path: Path) -> None:
    log = write(
        tmp_path / "log",
        f"start {A} 1 1.0 0",
        f"start {A} 2 1.5 0",
        f"end {A} 1 2.0 0 done",
        f"end {A} 2 2.5 0 done",
    )
    with pytest.raises(AssertionError, match="at the same time"):
        check_side_effects(log, {A}, {A: 1}, Fleet(tmp_path, {}))


def test_an_unfinished_run_overlaps_any_later_one(tmp_path: Path) -> None:
    log = write(
        tmp_path / "log", f"start {A} 1 1.0 0", f"start {A} 2 9.0 0", f"end {A} 2 9.5 0 done"
    )
    with pytest.raises(AssertionError, match="at the same time"):
        check_side_effects(log, {A}, {A: 1}, Fleet(tmp_path, {}))


def test_a_second_run_without_a_lapse_fails(tmp_path: Path) -> None:
    log = write(
        tmp_path / "log",
        f"start {A} 1 1.0 0",
        f"end {A} 1 2.0 0 done",
        f"start {A} 2 3.0 0",
        f"end {A} 2 4.0 0 done",
    )
    with pytest.raises(AssertionError, match="lapsed leases explain"):
        check_side_effects(log, {A}, {}, Fleet(tmp_path, {}))


def test_a_task_that_never_ran_fails(tmp_path: Path) -> None:
    log = write(tmp_path / "log", f"start {A} 1 1.0 0", f"end {A} 1 2.0 0 done")
    with pytest.raises(AssertionError, match="never ran"):
        check_side_effects(log, {A, B}, {}, Fleet(tmp_path, {}))


def test_a_warning_at_every_retry_fails(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    lines = [
        f"2026-03-01 09:00:{i:02d},000 WARNING agentqueue.worker: claim failed"
        for i in range(MAX_OUTAGE_WARNINGS + 1)
    ]
    write(log, *lines, "\tIs the server running on that host?")
    fleet = Fleet(tmp_path, {}, [Proc("worker", None, log)])  # type: ignore[arg-type]
    since = datetime(2026, 3, 1, 9, 0).timestamp()
    check_outage_logged_once(fleet, since + 60, since + 120)  # none in that window
    with pytest.raises(AssertionError, match="once per loop"):
        check_outage_logged_once(fleet, since, since + 60)
