"""Pipeline hooks through real worker processes running real command agents, on SQLite and
PostgreSQL (R25): a mail whose agent sent its reply and then hung until its timeout is
completed, neither run nor answered a second time; without a reply it is retried; a mail agent
that claims a reply that does not exist is retried and dead-lettered ("no such reply"), one that
claims an existing reply completes; a third kind with hooks of its own runs through the same
worker unchanged.

The agents run sandboxed (no database to write to): a reply reaches the queue only as the
``{"reply": {...}}`` line the worker records.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from uuid import UUID, uuid4

import pytest
from worker_helpers import FAST_CONFIG, settled

from agentqueue import AsyncQueue, Task, TaskState

S = TaskState
HERE = Path(__file__).parent
AGENT = HERE / "mail_agent.py"


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    """Short leases and fast retries; bob reads mail, carol does the third kind's work."""
    path = tmp_path / "agentqueue.toml"
    agent = f"command = [{json.dumps(sys.executable)}, {json.dumps(str(AGENT))}]"
    path.write_text(
        FAST_CONFIG
        + f"""workdir = {json.dumps(str(tmp_path / "runs"))}
run_as = "root"

[pipelines]
modules = ["hooked_kind"]

[agents.bob]
{agent}
task_types = ["mail"]
max_concurrent = 5
kill_grace_secs = 1
extra_rw = [{json.dumps(str(tmp_path))}]

[agents.carol]
{agent}
task_types = ["hooked"]
max_concurrent = 5
kill_grace_secs = 1
extra_rw = [{json.dumps(str(tmp_path))}]
"""
    )
    return path


def runs(record: Path, task_id: UUID) -> int:
    """How many times the agent started on the task."""
    if not record.exists():
        return 0
    return sum(line.split()[0] == str(task_id) for line in record.read_text().splitlines())


async def short(q: AsyncQueue, payload: dict[str, object], **fields: object) -> Task:
    """A task with a 2 s timeout and one retry, telling the test agent what to do."""
    made = await q.submit(timeout_secs=2, max_retries=1, payload=payload, **fields)
    return made.task


async def mail(q: AsyncQueue, **payload: object) -> Task:
    """A mail from alice to bob."""
    return await short(
        q,
        payload,
        title="Which index?",
        task_type="mail",
        source="mail",
        assignee="bob",
        requested_by="alice",
    )


async def test_a_mail_answered_then_timed_out_completes_once_with_one_reply(
    live_queue: AsyncQueue, start_worker, tmp_path: Path
) -> None:
    record = tmp_path / "runs.log"
    sent = await mail(live_queue, record=str(record), reply=True, hang=True)
    start_worker("--agent", "bob")

    done = await settled(live_queue, sent.id)

    assert done.state is S.COMPLETED, (done.state, done.error)
    thread = await live_queue.thread(sent.id)
    assert [t.id for t in thread][:1] == [sent.id] and len(thread) == 2
    reply = thread[1]
    assert (reply.in_reply_to, reply.requested_by, reply.assignee) == (sent.id, "bob", "alice")
    assert reply.kind == "mail" and reply.payload == {"text": "answer to Which index?"}
    assert done.result == {"reply_id": str(reply.id)}
    assert runs(record, sent.id) == 1 and done.retry_count == 0
    complete = [e for e in await live_queue.events(sent.id) if e.to_state is S.COMPLETED]
    assert len(complete) == 1 and "reply" in complete[0].reason


async def test_a_mail_that_times_out_without_a_reply_is_retried(
    live_queue: AsyncQueue, start_worker, tmp_path: Path
) -> None:
    record = tmp_path / "runs.log"
    sent = await mail(live_queue, record=str(record), hang=True)
    start_worker("--agent", "bob")

    done = await settled(live_queue, sent.id)

    assert done.state is S.DEAD_LETTER and "timed out" in (done.error or "")
    assert runs(record, sent.id) == 2 and done.retry_count == 1
    assert await live_queue.thread(sent.id) == [done]


async def test_a_claimed_reply_that_does_not_exist_is_retried_then_dead_lettered(
    live_queue: AsyncQueue, start_worker, tmp_path: Path
) -> None:
    record = tmp_path / "runs.log"
    made_up = str(uuid4())
    sent = await mail(live_queue, record=str(record), claim_reply_id=made_up)
    start_worker("--agent", "bob")

    done = await settled(live_queue, sent.id)

    assert done.state is S.DEAD_LETTER, (done.state, done.error)
    assert done.error == f"no such reply: reply_id {made_up}"
    assert runs(record, sent.id) == 2 and done.result is None
    fails = [e.to_state for e in await live_queue.events(sent.id) if e.action == "fail"]
    assert fails == [S.RETRYING, S.DEAD_LETTER]


async def test_a_claimed_reply_that_exists_completes(
    live_queue: AsyncQueue, start_worker, tmp_path: Path
) -> None:
    # Claimed by id: the reply is submitted (as bob) while the agent waits for its id.
    id_file = tmp_path / "reply-id"
    by_id = await mail(live_queue, claim_reply_id_file=str(id_file))
    # Claimed as "I replied to this mail", after the agent printed its reply.
    by_line = await mail(live_queue, reply=True, claim_reply_to=True)
    start_worker("--agent", "bob")
    reply = await live_queue.submit(
        title="Re: Which index?",
        task_type="mail",
        source="mail",
        assignee="alice",
        requested_by="bob",
        in_reply_to=str(by_id.id),
    )
    id_file.write_text(str(reply.task.id))

    first, second = await settled(live_queue, by_id.id), await settled(live_queue, by_line.id)

    assert first.state is S.COMPLETED and first.result == {"reply_id": str(reply.task.id)}
    assert second.state is S.COMPLETED and second.result == {"reply_to": str(by_line.id)}
    assert [len(await live_queue.thread(m.id)) for m in (by_id, by_line)] == [2, 2]


async def test_a_third_kind_with_its_own_hooks_runs_through_the_same_worker(
    live_queue: AsyncQueue, start_worker, tmp_path: Path
) -> None:
    async def work(**payload: object) -> Task:
        fields = {"title": "sign this", "task_type": "hooked", "kind": "hooked"}
        return await short(live_queue, payload, **fields)

    signed = await work(result={"signed": True})
    unsigned = await work(result={"signed": False})
    late = await work(hang=True)
    start_worker("--agent", "bob", "--agent", "carol", PYTHONPATH=str(HERE))

    ok, refused, timed_out = [await settled(live_queue, t.id) for t in (signed, unsigned, late)]

    assert ok.state is S.COMPLETED and ok.result == {"signed": True}
    assert refused.state is S.DEAD_LETTER and refused.error == "not signed"
    assert refused.retry_count == 1
    assert timed_out.state is S.COMPLETED and timed_out.result == {"late": True}
