"""Mail threads and the pipeline hooks at the service layer, on both backends (R25): a reply
names the mail it answers and comes from its recipient, or is refused naming the field with
nothing written; a thread lists the mail and its replies; the execution layer puts a mail's
timeout and completion to its pipeline in the transaction that writes the outcome."""

from __future__ import annotations

from uuid import uuid4

import pytest

from agentqueue import AsyncQueue, Task, TaskState
from agentqueue.clock import ManualClock
from agentqueue.domain.errors import InvalidInput
from agentqueue.service import threads
from agentqueue.service.execution import Outcome, OutcomeKind

S = TaskState


async def mail(q: AsyncQueue, sender: str = "alice", to: str = "bob", **extra: object) -> Task:
    made = await q.submit(
        title="Which index?",
        task_type="mail",
        source="mail",
        assignee=to,
        requested_by=sender,
        **extra,
    )
    return made.task


async def test_a_thread_is_the_mail_and_its_replies(queue: AsyncQueue) -> None:
    first = await mail(queue)
    reply = await mail(queue, "bob", "alice", in_reply_to=str(first.id))
    again = await mail(queue, "alice", "bob", in_reply_to=str(reply.id))
    other = await mail(queue)

    assert reply.in_reply_to == first.id and reply.kind == "mail"
    for member in (first, reply, again):
        assert [t.id for t in await queue.thread(member.id)] == [first.id, reply.id, again.id]
    assert [t.id for t in await queue.thread(other.id)] == [other.id]
    assert (await queue.get(reply.id)).in_reply_to == first.id


async def test_a_bad_reply_is_refused_naming_the_field_and_nothing_is_written(
    queue: AsyncQueue,
) -> None:
    first = await mail(queue)
    before = (await queue.stats()).by_state

    with pytest.raises(InvalidInput) as nowhere:
        await mail(queue, "bob", "alice", in_reply_to=str(uuid4()))
    assert nowhere.value.fields == ["in_reply_to"] and "no mail" in str(nowhere.value)
    with pytest.raises(InvalidInput) as stranger:
        await mail(queue, "carol", "alice", in_reply_to=str(first.id))
    assert stranger.value.fields == ["requested_by"]
    assert "from its recipient 'bob', not 'carol'" in str(stranger.value)
    with pytest.raises(InvalidInput) as task:
        await queue.submit(title="t", task_type="docs", in_reply_to=str(first.id))
    assert task.value.fields == ["in_reply_to"] and "only mail" in str(task.value)
    with pytest.raises(InvalidInput) as batch:
        await queue.submit_many(
            [
                {"title": "ok", "task_type": "docs"},
                {
                    "title": "Re",
                    "task_type": "mail",
                    "source": "mail",
                    "assignee": "alice",
                    "requested_by": "carol",
                    "in_reply_to": str(first.id),
                },
            ]
        )
    assert batch.value.fields == ["tasks[1].requested_by"]
    assert (await queue.stats()).by_state == before


async def claimed(q: AsyncQueue, task: Task) -> Task:
    await q.admit()
    (mine,) = await q.claim(1, worker="w")
    assert mine.id == task.id
    return mine


async def test_a_completion_claiming_a_reply_that_does_not_exist_is_a_retryable_failure(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    sent = await mail(queue, max_retries=1)
    made_up = str(uuid4())
    for expected in (S.RETRYING, S.DEAD_LETTER):
        task = await claimed(queue, sent)
        outcome = Outcome(
            task.id, task.lock_token, OutcomeKind.COMPLETED, {"reply_id": made_up}, claimed=task
        )
        done = (await queue.finish([outcome]))[task.id]
        assert isinstance(done, Task) and done.state is expected
        assert done.error == f"no such reply: reply_id {made_up}" and done.result is None
        if expected is S.RETRYING:
            assert done.run_after is not None
            clock.set(done.run_after)
            await queue.promote_due_retries()


async def test_a_completion_claiming_an_existing_reply_stands(queue: AsyncQueue) -> None:
    sent = await mail(queue)
    task = await claimed(queue, sent)
    reply = await mail(queue, "bob", "alice", in_reply_to=str(sent.id))
    # The envelope form ({"result": {...}}) is read the same way.
    result = {"result": {"reply_id": str(reply.id)}}
    outcome = Outcome(task.id, task.lock_token, OutcomeKind.COMPLETED, result, claimed=task)
    done = (await queue.finish([outcome]))[task.id]
    assert isinstance(done, Task) and done.state is S.COMPLETED and done.result == result


async def test_a_timeout_after_the_reply_completes_the_mail(queue: AsyncQueue) -> None:
    answered, silent = await mail(queue), await mail(queue, to="dave")
    await queue.admit()
    tasks = {t.id: t for t in await queue.claim(2, worker="w")}
    reply = await mail(queue, "bob", "alice", in_reply_to=str(answered.id))
    outcomes = [
        Outcome(
            t.id, t.lock_token, OutcomeKind.FAILED, error="timed out", timed_out=True, claimed=t
        )
        for t in tasks.values()
    ]
    done = await queue.finish(outcomes)
    completed, retried = done[answered.id], done[silent.id]
    assert isinstance(completed, Task) and completed.state is S.COMPLETED
    assert completed.result == {"reply_id": str(reply.id)}
    assert isinstance(retried, Task) and retried.state is S.RETRYING
    assert retried.error == "timed out"


async def test_a_reply_line_becomes_one_reply_from_the_recipient(queue: AsyncQueue) -> None:
    rt = await queue.runtime()
    sent = await mail(queue)
    first = await threads.send_reply(rt, sent, {"payload": {"text": "B-tree"}})
    again = await threads.send_reply(rt, sent, {"payload": {"text": "hash"}})
    assert first.created and not again.created and again.task.id == first.task.id
    reply = first.task
    assert (reply.requested_by, reply.assignee, reply.in_reply_to) == ("bob", "alice", sent.id)
    assert (reply.title, reply.payload) == ("Re: Which index?", {"text": "B-tree"})

    with pytest.raises(InvalidInput) as unknown:
        await threads.send_reply(rt, sent, {"colour": "red"})
    assert unknown.value.fields == ["reply.colour"]
    with pytest.raises(InvalidInput) as not_object:
        await threads.send_reply(rt, sent, "yes")
    assert not_object.value.fields == ["reply"]
    task = (await queue.submit(title="t", task_type="docs")).task
    with pytest.raises(InvalidInput) as no_replies:
        await threads.send_reply(rt, task, {})
    assert no_replies.value.fields == ["reply"]


async def test_a_lapsed_lease_past_the_timeout_is_put_to_the_pipeline_too(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    # The worker died without reporting: the scheduler takes the leases back.
    answered, silent = await mail(queue, timeout_secs=60), await mail(queue, to="dave")
    await queue.admit()
    assert len(await queue.claim(2, worker="w")) == 2
    reply = await mail(queue, "bob", "alice", in_reply_to=str(answered.id))
    clock.advance(3600)

    taken = {t.id: t for t in await queue.reclaim_lapsed()}

    assert taken[answered.id].state is S.COMPLETED
    assert taken[answered.id].result == {"reply_id": str(reply.id)}
    assert taken[silent.id].state is S.RETRYING
    assert taken[silent.id].error == "attempt timed out after 300s"
    last = (await queue.events(answered.id))[-1]
    assert (last.action, last.actor) == ("complete", "scheduler") and "reply" in last.reason
