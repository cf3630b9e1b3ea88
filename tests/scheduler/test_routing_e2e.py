"""Pipelines and routing across real worker processes (R14, R15): mail goes to its recipient
alone and is never held by guardrails; an ordinary task that matches a guardrail waits for an
approver; bugfix tasks spread over the agents that declare bugfix, within each agent's cap; a
task no agent can do waits in pending saying why; a P0 task's idempotency key reaches the
command agent that runs it.

Every agent runs ``routing_agent.py`` with its own name, which records each run (task, agent,
start, end) so the tests check who ran what from the agents' side, not only the queue's.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from scheduler_helpers import AGENTQUEUE, max_overlap, spawn

from agentqueue import AsyncQueue, Task, TaskState
from agentqueue.domain.errors import Forbidden

AGENT = Path(__file__).with_name("routing_agent.py")

SEED_AGENTS = ("pangtong", "simayi-challenger", "zhugeliang", "zhouyu", "guanyu", "zhangfei")
"""The six idle agents of the seed incident."""

DELETION_GUARDRAIL = """
[[guardrails]]
name = "data_deletion"
pattern = "删除|删掉|drop table|rm -rf"
action = "require_approval"
applies_to = ["task"]

[approval]
approvers = ["zhugeliang"]
"""

TIMEOUT = 45.0
"""Seconds a test waits for the workers before it fails."""


@dataclass(frozen=True)
class Run:
    """One run of a command agent, as it recorded it."""

    task_id: UUID
    agent: str
    start: float
    end: float


def agent_section(
    name: str, task_types: Sequence[str], max_concurrent: int = 1, labels: Sequence[str] = ()
) -> str:
    """The ``[agents.NAME]`` TOML of an agent running routing_agent.py under ``name``."""
    return f"""
[agents.{name}]
command = [{json.dumps(sys.executable)}, {json.dumps(str(AGENT))}, {json.dumps(name)}]
task_types = {json.dumps(list(task_types))}
labels = {json.dumps(list(labels))}
max_concurrent = {max_concurrent}
extra_rw = [{{tmp}}]
"""


def write_config(tmp_path: Path, sections: Sequence[str]) -> Path:
    """A configuration with quick scheduler passes and worker polls, plus ``sections``."""
    config = tmp_path / "agentqueue.toml"
    config.write_text(
        f"""
[scheduler]
tick_secs = 0.2

[worker]
poll_secs = 0.2
workdir = {json.dumps(str(tmp_path / "runs"))}
run_as = "root"
"""
        # The agents record what they ran in the test's directory: writable in their sandbox,
        # as the test's own user.
        + "".join(sections).replace("{tmp}", json.dumps(str(tmp_path))),
        encoding="utf-8",
    )
    return config


def start_workers(
    db_url: str, config: Path, tmp_path: Path, n: int
) -> list[subprocess.Popen[bytes]]:
    """``n`` real ``agentqueue worker`` processes (each also runs the scheduler)."""
    return [
        spawn(
            ["--db", db_url, "--config", str(config), "worker", "--id", f"w{i}"],
            tmp_path / f"worker-{i}.log",
        )
        for i in range(n)
    ]


def stop_workers(workers: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every worker still running, wait for each, and kill one that does not exit."""
    for proc in workers:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in workers:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def worker_logs(tmp_path: Path) -> str:
    """The tail of every worker's log, for a failure message."""
    return "\n".join(
        f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        for log in sorted(tmp_path.glob("worker-*.log"))
    )


async def wait_for_state(
    queue: AsyncQueue, task_id: UUID, state: TaskState, tmp_path: Path
) -> Task:
    """The task once it is in ``state``; fails after TIMEOUT seconds."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        task = await queue.get(task_id)
        if task.state is state:
            return task
        if time.monotonic() > deadline:
            pytest.fail(
                f"task {task_id} is {task.state.value} ({task.state_reason}), "
                f"not {state.value}\n{worker_logs(tmp_path)}"
            )
        await asyncio.sleep(0.1)


async def wait_for_completed(queue: AsyncQueue, n: int, tmp_path: Path) -> None:
    """Wait until ``n`` tasks are completed; fails after TIMEOUT seconds."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        counts = (await queue.stats()).by_state
        if counts[TaskState.COMPLETED] >= n:
            return
        if time.monotonic() > deadline:
            pytest.fail(
                f"{counts} after {TIMEOUT} s, wanted {n} completed\n{worker_logs(tmp_path)}"
            )
        await asyncio.sleep(0.2)


def runs(record: Path) -> list[Run]:
    """Every finished agent run in ``record`` (none if no agent ever ran)."""
    if not record.exists():
        return []
    open_runs: dict[tuple[str, str], float] = {}
    done = []
    for line in record.read_text(encoding="utf-8").splitlines():
        task_id, agent, what, at = line.split()
        if what == "start":
            open_runs[(task_id, agent)] = float(at)
        else:
            start = open_runs.pop((task_id, agent))
            done.append(Run(UUID(task_id), agent, start, float(at)))
    assert not open_runs, f"agent runs that never ended: {open_runs}"
    return done


def seen(record: Path) -> list[dict[str, Any]]:
    """What each agent run saw of its task (routing_agent.py's ``.seen`` lines)."""
    path = Path(f"{record}.seen")
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def show(db_url: str, config: Path, task_id: UUID) -> str:
    """The output of ``agentqueue show ID`` run as a separate process."""
    env = {k: v for k, v in os.environ.items() if k != "AGENTQUEUE_CONFIG"}
    proc = await asyncio.create_subprocess_exec(
        str(AGENTQUEUE), "--db", db_url, "--config", str(config), "show", str(task_id),
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    text = out.decode()
    assert proc.returncode == 0, text
    return text


async def test_mail_reaches_only_its_recipient_and_is_never_held_by_a_guardrail(
    db_url: str, tmp_path: Path
) -> None:
    """The seed incident, replayed: pangtong mails simayi-challenger "delete the old branch"
    while six agents idle, every one of which could take mail. The mail is neither held by the
    deletion guardrail nor broadcast: simayi-challenger alone runs it, once."""
    config = write_config(
        tmp_path,
        [*(agent_section(name, ["bugfix", "mail"]) for name in SEED_AGENTS), DELETION_GUARDRAIL],
    )
    record = tmp_path / "mail.log"
    workers = start_workers(db_url, config, tmp_path, 1)
    try:
        async with AsyncQueue(db_url, config=config) as queue:
            made = await queue.submit(
                title="回复", task_type="mail", source="mail", requested_by="pangtong",
                assignee="simayi-challenger",
                payload={"body": "把旧分支删掉", "record": str(record)},
            )  # fmt: skip
            assert made.created and made.task.kind == "mail"
            assert made.task.state is TaskState.PENDING and made.task.hold is None
            task = await wait_for_state(queue, made.task.id, TaskState.COMPLETED, tmp_path)
            events = await queue.events(made.task.id)
    finally:
        stop_workers(workers)
    assert [e for e in events if e.to_state is TaskState.BLOCKED] == [], events
    assert task.hold is None and task.approved_by is None
    assert task.assignee == "simayi-challenger"
    assert task.agent == "simayi-challenger"
    done = runs(record)
    assert [(r.task_id, r.agent) for r in done] == [(made.task.id, "simayi-challenger")]
    lines = record.read_text(encoding="utf-8").splitlines()
    assert {line.split()[1] for line in lines} == {"simayi-challenger"}, lines
    assert len(lines) == 2  # one start, one end: no other agent ran anything
    [view] = seen(record)
    assert view["kind"] == "mail"
    assert view["assignee"] == view["agent"] == "simayi-challenger"


async def test_a_task_matching_a_guardrail_waits_for_an_approver_then_runs_once(
    db_url: str, tmp_path: Path
) -> None:
    """An ordinary task saying "删掉" is blocked for approval and runs nowhere while an
    unrelated task completes beside it; once an approver approves it, it runs exactly once."""
    config = write_config(
        tmp_path,
        [*(agent_section(name, ["bugfix", "mail"]) for name in SEED_AGENTS), DELETION_GUARDRAIL],
    )
    risky_record = tmp_path / "risky.log"
    plain_record = tmp_path / "plain.log"
    workers = start_workers(db_url, config, tmp_path, 1)
    try:
        async with AsyncQueue(db_url, config=config) as queue:
            risky = await queue.submit(
                title="清理", task_type="bugfix", requested_by="pangtong",
                payload={"body": "把旧分支删掉", "record": str(risky_record)},
            )  # fmt: skip
            assert risky.task.kind == "task"
            assert risky.task.state is TaskState.BLOCKED and risky.task.hold == "approval"
            assert "data_deletion" in (risky.task.state_reason or "")
            plain = await queue.submit(
                title="fix the login page", task_type="bugfix",
                payload={"record": str(plain_record)},
            )  # fmt: skip
            # The worker runs and admits work meanwhile; the held task stays put.
            await wait_for_state(queue, plain.task.id, TaskState.COMPLETED, tmp_path)
            await asyncio.sleep(1.0)  # several more scheduler passes
            held = await queue.get(risky.task.id)
            assert held.state is TaskState.BLOCKED and held.hold == "approval"
            assert runs(risky_record) == []
            with pytest.raises(Forbidden):
                await queue.approve(risky.task.id, actor="pangtong", reason="my own request")
            approved = await queue.approve(
                risky.task.id, actor="zhugeliang", reason="the old branch is merged"
            )
            assert approved.state is TaskState.PENDING
            task = await wait_for_state(queue, risky.task.id, TaskState.COMPLETED, tmp_path)
            await asyncio.sleep(0.5)  # a second run, if there were one, would show up here
    finally:
        stop_workers(workers)
    assert task.approved_by == "zhugeliang"
    done = runs(risky_record)
    assert len(done) == 1 and done[0].task_id == risky.task.id, done
    assert done[0].agent == task.agent and task.agent in SEED_AGENTS
    assert len(runs(plain_record)) == 1


async def test_routing_spreads_bugfix_tasks_over_capable_agents_within_their_caps(
    db_url: str, tmp_path: Path
) -> None:
    """100 bugfix tasks on two workers go to the three agents that declare bugfix, each run
    once, never more at once per agent than its cap; the agent that does not declare bugfix
    runs nothing. A bugfix task needing a "gpu" label no agent has waits in pending, saying
    why (in ``show`` too), without holding the others up."""
    caps = {"fixer-a": 2, "fixer-b": 3, "fixer-c": 1}
    config = write_config(
        tmp_path,
        [
            *(agent_section(name, ["bugfix"], cap) for name, cap in caps.items()),
            agent_section("writer", ["docs"], 4),
        ],
    )
    record = tmp_path / "runs.log"
    async with AsyncQueue(db_url, config=config) as queue:
        gpu = await queue.submit(
            title="fix the CUDA kernel", task_type="bugfix", labels=["gpu"],
            payload={"record": str(record)},
        )  # fmt: skip
        # The first six (the caps add up to six, so one admission pass) run long enough to
        # overlap even on a loaded machine; the rest are quick.
        made = await queue.submit_many(
            [
                {"title": f"bug {i}", "task_type": "bugfix",
                 "payload": {"record": str(record), "sleep": 1.0 if i < 6 else 0.05}}
                for i in range(100)
            ]
        )  # fmt: skip
        workers = start_workers(db_url, config, tmp_path, 2)
        try:
            await wait_for_completed(queue, 100, tmp_path)
            deadline = time.monotonic() + TIMEOUT
            waiting = await queue.get(gpu.task.id)
            while (
                waiting.state is TaskState.PENDING
                and waiting.state_reason is None
                and time.monotonic() < deadline
            ):
                await asyncio.sleep(0.2)
                waiting = await queue.get(gpu.task.id)
            shown = await show(db_url, config, gpu.task.id)
            tasks = {t.id: t for t in await queue.store.get_tasks([m.task.id for m in made])}
        finally:
            stop_workers(workers)
    done = runs(record)
    by_task: dict[UUID, list[Run]] = {}
    for run in done:
        by_task.setdefault(run.task_id, []).append(run)
    assert sorted(by_task, key=str) == sorted((m.task.id for m in made), key=str)
    assert all(len(r) == 1 for r in by_task.values()), "a task ran more than once"
    for task_id, task in tasks.items():
        assert task.state is TaskState.COMPLETED
        assert task.agent == by_task[task_id][0].agent, task
    by_agent: dict[str, list[Run]] = {}
    for run in done:
        by_agent.setdefault(run.agent, []).append(run)
    assert set(by_agent) == set(caps), {a: len(r) for a, r in by_agent.items()}
    for agent, cap in caps.items():
        overlap = max_overlap([(r.start, r.end) for r in by_agent[agent]])
        assert overlap <= cap, f"{agent} ran {overlap} at once, over its cap of {cap}"
    # Routing ran them side by side, so the caps were tested, not respected by a serial queue.
    assert max_overlap([(r.start, r.end) for r in done]) > max(caps.values())
    assert waiting.state is TaskState.PENDING and waiting.agent is None
    reason = waiting.state_reason or ""
    assert "no agent" in reason and "gpu" in reason, reason
    assert reason in shown, shown


async def test_a_p0_tasks_idempotency_key_reaches_the_command_agent(
    db_url: str, tmp_path: Path
) -> None:
    """A P0 payment's idempotency key arrives both as AGENTQUEUE_IDEMPOTENCY_KEY and in the
    task JSON on stdin; a task without a key gets neither."""
    config = write_config(tmp_path, [agent_section("payer", ["payment"], 2)])
    record = tmp_path / "pay.log"
    workers = start_workers(db_url, config, tmp_path, 1)
    try:
        async with AsyncQueue(db_url, config=config) as queue:
            p0 = await queue.submit(
                title="pay invoice 123", task_type="payment", priority=0,
                idempotency_key="pay-123", payload={"record": str(record)},
            )  # fmt: skip
            plain = await queue.submit(
                title="check the balance", task_type="payment", payload={"record": str(record)}
            )
            await wait_for_state(queue, p0.task.id, TaskState.COMPLETED, tmp_path)
            await wait_for_state(queue, plain.task.id, TaskState.COMPLETED, tmp_path)
    finally:
        stop_workers(workers)
    views = {UUID(v["id"]): v for v in seen(record)}
    assert len(views) == 2 == len(seen(record))
    assert views[p0.task.id]["agent_name"] == "payer"
    assert views[p0.task.id]["env_idempotency_key"] == "pay-123"
    assert views[p0.task.id]["idempotency_key"] == "pay-123"
    assert views[plain.task.id]["env_idempotency_key"] is None
    assert views[plain.task.id]["idempotency_key"] is None


def starts(record: Path, task_id: UUID) -> int:
    """How many runs of ``task_id`` began (a preempted run begins and never ends)."""
    lines = record.read_text().splitlines() if record.exists() else []
    return sum(
        1 for line in lines if line.split()[0] == str(task_id) and line.split()[2] == "start"
    )


async def test_a_p0_task_preempts_background_work_of_its_own_full_agent_only(
    db_url: str, tmp_path: Path
) -> None:
    """R11 with per-agent caps: the fixer (cap 1) runs a P2 task for more than 3 s; a P0
    bugfix is admitted beyond the cap, the P2 task is preempted (queued again, not a retry) and
    the P0 task starts at once; the writer's P2 task, another agent's work, is left alone."""
    config = write_config(
        tmp_path, [agent_section("fixer", ["bugfix"], 1), agent_section("writer", ["docs"], 1)]
    )
    record = tmp_path / "runs.log"
    workers = start_workers(db_url, config, tmp_path, 1)
    try:
        async with AsyncQueue(db_url, config=config) as queue:
            slow = await queue.submit(
                title="reindex", task_type="bugfix", priority="P2",
                payload={"record": str(record), "sleep": 6},
            )  # fmt: skip
            other = await queue.submit(
                title="rewrite docs", task_type="docs", priority="P2",
                payload={"record": str(record), "sleep": 6},
            )  # fmt: skip
            await wait_for_state(queue, slow.task.id, TaskState.EXECUTING, tmp_path)
            await wait_for_state(queue, other.task.id, TaskState.EXECUTING, tmp_path)
            await asyncio.sleep(3.5)  # both have run for more than 3 s
            p0 = await queue.submit(
                title="fix prod", task_type="bugfix", priority="P0", idempotency_key="fix-prod",
                payload={"record": str(record)},
            )  # fmt: skip
            urgent = await wait_for_state(queue, p0.task.id, TaskState.COMPLETED, tmp_path)
            background = await wait_for_state(queue, slow.task.id, TaskState.COMPLETED, tmp_path)
            docs = await wait_for_state(queue, other.task.id, TaskState.COMPLETED, tmp_path)
            slow_actions = [e.action for e in await queue.events(slow.task.id)]
            docs_actions = [e.action for e in await queue.events(other.task.id)]
    finally:
        stop_workers(workers)
    assert urgent.started_at is not None and urgent.agent == "fixer"
    waited = (urgent.started_at - urgent.created_at).total_seconds()
    assert waited < 2.0, f"the P0 task waited {waited:.2f}s for the fixer's slot"
    assert background.retry_count == 0 and "preempt" in slow_actions and "fail" not in slow_actions
    assert starts(record, slow.task.id) == 2
    assert "preempt" not in docs_actions and starts(record, other.task.id) == 1
    assert docs.retry_count == 0


async def test_serve_until_idle_stops_when_only_tasks_no_agent_can_take_are_left(
    db_url: str, tmp_path: Path
) -> None:
    config = write_config(tmp_path, [agent_section("fixer", ["bugfix"], 2)])
    record = tmp_path / "runs.log"
    async with AsyncQueue(db_url, config=config) as queue:
        done = await queue.submit(
            title="plain", task_type="bugfix", payload={"record": str(record)}
        )
        stuck = await queue.submit(
            title="needs a gpu", task_type="bugfix", labels=["gpu"],
            payload={"record": str(record)},
        )  # fmt: skip
    served = await asyncio.to_thread(
        subprocess.run,
        [
            str(AGENTQUEUE),
            "--db",
            db_url,
            "--config",
            str(config),
            "serve",
            "--until-idle",
            "--port",
            "0",
        ],
        capture_output=True,
        timeout=60,
    )
    assert served.returncode == 0, served.stderr.decode(errors="replace")[-2000:]
    async with AsyncQueue(db_url, config=config) as queue:
        assert (await queue.get(done.task.id)).state is TaskState.COMPLETED
        left = await queue.get(stuck.task.id)
        assert left.state is TaskState.PENDING and "gpu" in (left.state_reason or "")
        assert await queue.work_left() == 0
