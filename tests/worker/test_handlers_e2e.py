"""Workers running Python handlers, as real processes, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from worker_helpers import ended, executions, wait_for

from agentqueue import AsyncQueue, TaskState

S = TaskState


def settled(counts: dict[TaskState, int], n: int) -> bool:
    """Nothing is waiting to run or running any more."""
    return sum(counts[s] for s in (S.PENDING, S.QUEUED, S.EXECUTING, S.RETRYING)) == 0 and (
        sum(counts.values()) == n
    )


async def test_handlers_complete_fail_dead_letter_and_keep_logs(
    live_queue: AsyncQueue, start_worker
) -> None:
    ok = (await live_queue.submit(title="ok", task_type="sleep", payload={"secs": 0.05})).task
    flaky = (
        await live_queue.submit(
            title="flaky", task_type="fail", payload={"retryable": True}, max_retries=1
        )
    ).task
    fatal = (await live_queue.submit(title="fatal", task_type="fail")).task
    bad = (await live_queue.submit(title="bad", task_type="bad_result")).task
    once = (await live_queue.submit(title="once", task_type="fail_once", max_retries=1)).task
    worker = start_worker("--concurrency", "4")
    await wait_for(live_queue, lambda c: settled(c, 5), what="all five to settle")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.output()
    # The summary counts tasks by how they ended (the one that failed once then completed is
    # completed) and, apart, the failed attempts that went back to retry.
    assert (
        "stopped: 5 tasks: 2 completed, 2 failed for good, 1 dead-lettered; "
        "2 attempts failed and went back to retry"
    ) in worker.output(), worker.output()
    assert (await live_queue.get(once.id)).state is S.COMPLETED

    done = await live_queue.get(ok.id)
    assert done.state is S.COMPLETED and done.result == {"slept": 0.05, "tenant": "default"}
    assert [r.text for r in await live_queue.logs(ok.id)] == ["sleeping 0.05s"]

    dead = await live_queue.get(flaky.id)
    assert dead.state is S.DEAD_LETTER and dead.retry_count == 1
    assert "Retryable: try again (2)" in (dead.error or "")

    failed = await live_queue.get(fatal.id)
    assert failed.state is S.FAILED and failed.retry_count == 0
    assert failed.error == "Fatal: cannot be done"

    refused = await live_queue.get(bad.id)
    assert refused.state is S.FAILED and "result: not JSON" in (refused.error or "")
    assert (await live_queue.verify()).ok


async def test_200_tasks_from_20_tenants_each_see_only_their_own_payload(
    live_queue: AsyncQueue, start_worker
) -> None:
    specs = [
        {
            "title": f"echo {i}",
            "task_type": "echo",
            "tenant": f"tenant-{i % 20}",
            "payload": {"n": i, "secret": f"s-{i}-{i % 20}", "secs": 0.02},
        }
        for i in range(200)
    ]
    made = [r.task for r in await live_queue.submit_many(specs)]
    start_worker("--concurrency", "50")
    await wait_for(live_queue, lambda c: ended(c, 200), within=60, what="200 echoes")
    by_id = {t.id: t for t in made}
    for task_id, submitted in by_id.items():
        task = await live_queue.get(task_id)
        assert task.state is S.COMPLETED
        assert task.result == {
            "task_id": str(task_id),
            "tenant": submitted.tenant,
            "payload": submitted.payload,
        }
        # The stored payload is untouched by the handler's mutation of its copy.
        assert task.payload == submitted.payload


async def test_sigkill_mid_task_then_another_worker_ends_every_task_exactly_once(
    live_queue: AsyncQueue, start_worker, record_file: Path
) -> None:
    made = [
        r.task
        for r in await live_queue.submit_many(
            {"title": f"s{i}", "task_type": "sleep", "payload": {"secs": 1.0}} for i in range(12)
        )
    ]
    first = start_worker("--concurrency", "4", "--id", "doomed")
    await wait_for(live_queue, lambda c: c[S.COMPLETED] >= 4 and c[S.EXECUTING] >= 1,
                   what="some done, some running")  # fmt: skip
    first.signal(signal.SIGKILL)
    first.wait()
    start_worker("--concurrency", "4", "--id", "survivor")
    await wait_for(live_queue, lambda c: ended(c, 12), within=60, what="every task to end")

    reruns = 0
    for task in made:
        events = await live_queue.events(task.id)
        endings = [e for e in events if e.to_state.terminal]
        assert [e.to_state for e in endings] == [S.COMPLETED], events
        final = await live_queue.get(task.id)
        if final.retry_count:
            reruns += 1
            # The killed worker's lease was taken back by the scheduler, then it ran again.
            assert any(e.action == "lease_expired" and e.actor == "scheduler" for e in events)
            assert final.assigned_to is None and endings[0].actor == "survivor"
    assert reruns >= 1
    runs = Counter(task_id for task_id, _, what in executions(record_file) if what == "finished")
    assert all(runs[str(t.id)] >= 1 for t in made)
    assert (await live_queue.verify()).ok


async def test_sigterm_completes_short_tasks_and_releases_long_ones_without_a_retry(
    live_queue: AsyncQueue, start_worker
) -> None:
    short = [
        (await live_queue.submit(title=f"short{i}", task_type="sleep", payload={"secs": 0.5})).task
        for i in range(3)
    ]
    long = [
        (await live_queue.submit(title=f"long{i}", task_type="sleep", payload={"secs": 60})).task
        for i in range(3)
    ]
    worker = start_worker("--concurrency", "6", "--grace", "2")
    await wait_for(live_queue, lambda c: c[S.EXECUTING] == 6, what="all six running")
    worker.signal(signal.SIGTERM)
    started = time.monotonic()
    assert worker.wait(timeout=20) == 0, worker.output()
    assert time.monotonic() - started < 10
    for task in short:
        assert (await live_queue.get(task.id)).state is S.COMPLETED
    for task in long:
        back = await live_queue.get(task.id)
        assert back.state is S.QUEUED and back.retry_count == 0 and back.lock_token is None
        last = (await live_queue.events(task.id))[-1]
        assert (last.action, last.from_state, last.to_state) == ("release", S.EXECUTING, S.QUEUED)
    assert sum((await live_queue.stats()).by_state.values()) == 6


def _running(pid: int) -> bool:
    """Whether the process runs (exists, and is not a zombie waiting to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _children(pid: int) -> dict[int, str]:
    """The command lines of a process's children, by pid."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            line = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
            found[int(child)] = line.decode()
    return found


async def test_sigterm_to_the_whole_group_still_records_every_outcome(
    live_queue: AsyncQueue, start_worker, db_url: str
) -> None:
    made = [
        (await live_queue.submit(title=f"s{i}", task_type="sleep", payload={"secs": 1.0})).task
        for i in range(4)
    ]
    worker = start_worker("--concurrency", "4", "--grace", "20")
    await wait_for(live_queue, lambda c: c[S.EXECUTING] == 4, what="all four running")
    children = _children(worker.proc.pid)
    writers = [pid for pid, line in children.items() if "agentqueue.store.sqlite.ops" in line]
    # On SQLite the worker writes from a process of its own (in its process group).
    assert len(writers) == (1 if db_url.startswith("sqlite") else 0), children
    # What a service manager (or a terminal's Ctrl-C) does: the signal reaches every process
    # of the group. The worker stops taking work, lets the attempts end, and records them
    # through the same writer, which the signal left alone.
    os.killpg(worker.proc.pid, signal.SIGTERM)
    await asyncio.sleep(0.3)
    assert [pid for pid in writers if _running(pid)] == writers
    assert worker.wait(timeout=30) == 0, worker.output()
    for task in made:
        assert (await live_queue.get(task.id)).state is S.COMPLETED
    assert "writer process ended" not in worker.output()
    assert (await live_queue.verify()).ok


async def test_cancel_reaches_a_running_handler_and_the_worker_goes_on(
    live_queue: AsyncQueue, start_worker, record_file: Path
) -> None:
    task = (await live_queue.submit(title="long", task_type="sleep", payload={"secs": 60})).task
    start_worker("--concurrency", "2")
    await wait_for(live_queue, lambda c: c[S.EXECUTING] == 1, what="the task to run")
    await live_queue.cancel(task.id, actor="operator", reason="wrong repo")
    started = time.monotonic()
    while not any(what == "cancelled" for _, _, what in executions(record_file)):
        assert time.monotonic() - started < 2.0, "the handler was not stopped within 2 s"
        await asyncio.sleep(0.02)
    cancelled = await live_queue.get(task.id)
    assert cancelled.state is S.CANCELLED and cancelled.state_reason == "wrong repo"
    assert (await live_queue.events(task.id))[-1].actor == "operator"

    after = (await live_queue.submit(title="next", task_type="sleep", payload={"secs": 0})).task
    await wait_for(live_queue, lambda c: c[S.COMPLETED] == 1, what="the next task")
    assert (await live_queue.get(after.id)).state is S.COMPLETED


async def test_an_attempt_past_its_timeout_is_stopped_and_retried_then_dead_lettered(
    live_queue: AsyncQueue, start_worker, record_file: Path
) -> None:
    task = (
        await live_queue.submit(
            title="slow", task_type="sleep", payload={"secs": 30}, timeout_secs=1, max_retries=1
        )
    ).task
    start_worker()
    await wait_for(live_queue, lambda c: c[S.DEAD_LETTER] == 1, within=30, what="dead letter")
    dead = await live_queue.get(task.id)
    assert dead.retry_count == 1 and "timed out after 1s" in (dead.error or "")
    stopped = [what for _, _, what in executions(record_file)]
    assert stopped.count("ran") == 2 and stopped.count("cancelled") == 2


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_an_idle_sqlite_worker_gives_its_writer_process_back_and_still_works(
    live_queue: AsyncQueue, start_worker
) -> None:
    """The worker's writer process (started with it) ends once the worker has been quiet for a
    few seconds; the writes then go from the worker's own thread, and a burst of work brings a
    process back."""
    worker = start_worker("--concurrency", "4")

    def writers() -> list[int]:
        return [
            pid
            for pid, line in _children(worker.proc.pid).items()
            if "agentqueue.store.sqlite.ops" in line and _running(pid)
        ]

    deadline = time.monotonic() + 60
    while not writers():
        assert time.monotonic() < deadline, "the worker started no writer process"
        await asyncio.sleep(0.05)
    while writers():
        assert time.monotonic() < deadline, "the idle worker kept its writer process"
        await asyncio.sleep(0.1)
    made = (await live_queue.submit(title="one", task_type="sleep", payload={"secs": 0})).task
    await wait_for(live_queue, lambda c: c[S.COMPLETED] == 1, what="the task on the thread")
    assert (await live_queue.get(made.id)).state is S.COMPLETED
    assert not writers()
    await live_queue.submit_many(
        [{"title": f"b{i}", "task_type": "sleep", "payload": {"secs": 0}} for i in range(3000)]
    )
    while not writers():
        assert time.monotonic() < deadline + 60, "no writer process for a burst of work"
        await asyncio.sleep(0.05)
    # Generous: 3,000 tasks on four slots took 5 s alone and over 30 s under the full suite on a
    # slow machine; the test is of the writer process coming back, not of a speed.
    await wait_for(live_queue, lambda c: c[S.COMPLETED] == 3001, within=180, what="the burst")
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, worker.output()
    assert (await live_queue.verify()).ok
