"""Requeueing a dead letter to a new assignee (R8, R14), on each backend through AsyncQueue: the
assignee is written by the requeue itself, the task is routed afresh for it (the agent admission
chose for the old assignee no longer holds it), and the requeue event records the hand-over."""

from __future__ import annotations

import inspect

import pytest
from scheduler_helpers import OpenQueue, agent

from agentqueue import AsyncQueue, InvalidInput, Task, TaskState
from agentqueue.domain.states import Action
from agentqueue.service import actions

AGENTS = {"alice": agent(["bugfix"]), "bob": agent(["bugfix"]), "carol": agent(["docs"])}


async def dead_letter(queue: AsyncQueue, assignee: str = "alice") -> Task:
    """A bugfix task for ``assignee`` with no retries, admitted (routed to its agent), claimed
    by that agent and failed: it goes straight to dead_letter."""
    task = (
        await queue.submit(title="Fix login", task_type="bugfix", assignee=assignee, max_retries=0)
    ).task
    [admitted] = await queue.admit()
    assert admitted.id == task.id
    [claimed] = await queue.claim(1, f"worker-{assignee}", ["bugfix"], [assignee])
    assert claimed.id == task.id and claimed.lock_token is not None
    dead = await queue.fail(claimed.id, claimed.lock_token, "gave up")
    assert dead.state is TaskState.DEAD_LETTER
    return dead


async def test_requeue_to_a_new_assignee_routes_it_to_that_agent_alone(
    open_queue: OpenQueue,
) -> None:
    queue = await open_queue(agents=AGENTS)
    dead = await dead_letter(queue)
    assert (dead.assignee, dead.agent) == ("alice", "alice")

    requeued = await queue.requeue(dead.id, actor="lead", reason="alice is out", assignee="bob")
    assert requeued.state is TaskState.QUEUED and requeued.retry_count == 0
    assert (requeued.assignee, requeued.agent) == ("bob", "bob")
    assert await queue.get(dead.id) == requeued
    events = await queue.events(dead.id)
    last = events[-1]
    assert (last.action, last.actor, last.reason) == ("requeue", "lead", "alice is out")
    assert (last.from_state, last.to_state) == (TaskState.DEAD_LETTER, TaskState.QUEUED)
    assert last.data == {
        "previous_retry_count": 0,
        "assignee": "bob",
        "previous_assignee": "alice",
        "agent": "bob",
    }
    assert last.seq == dead.event_seq + 1  # one guarded change, one event
    assert (await queue.verify()).ok

    # Only the new assignee's executors take it now.
    assert await queue.claim(10, "worker-alice", ["bugfix"], ["alice"]) == []
    [again] = await queue.claim(10, "worker-bob", ["bugfix"], ["bob"])
    assert again.id == dead.id and again.assigned_to == "worker-bob"


async def test_requeue_from_review_to_a_new_assignee(open_queue: OpenQueue) -> None:
    queue = await open_queue(agents=AGENTS)
    dead = await dead_letter(queue)
    await queue.review(dead.id, actor="lead")
    requeued = await queue.requeue(dead.id, actor="lead", assignee="bob")
    assert requeued.state is TaskState.QUEUED and (requeued.assignee, requeued.agent) == (
        "bob",
        "bob",
    )
    last = (await queue.events(dead.id))[-1]
    assert last.from_state is TaskState.MANUAL_REVIEW and last.data["assignee"] == "bob"


async def test_requeue_without_an_assignee_keeps_the_assignee_and_agent(
    open_queue: OpenQueue,
) -> None:
    queue = await open_queue(agents=AGENTS)
    dead = await dead_letter(queue)
    requeued = await queue.requeue(dead.id)
    assert (requeued.assignee, requeued.agent) == ("alice", "alice")
    assert (await queue.events(dead.id))[-1].data == {"previous_retry_count": 0}


async def test_requeue_clears_the_agent_when_routing_names_none(open_queue: OpenQueue) -> None:
    """A queue with no agents configured routes a task to whoever serves its type: the agent the
    dead letter was routed to is cleared, and any executor of the type claims it."""
    routed = await open_queue(agents=AGENTS)
    dead = await dead_letter(routed)
    unrouted = await open_queue()
    requeued = await unrouted.requeue(dead.id, assignee="bob")
    assert (requeued.assignee, requeued.agent) == ("bob", None)
    last = (await unrouted.events(dead.id))[-1]
    assert last.data == {"previous_retry_count": 0, "assignee": "bob", "previous_assignee": "alice"}
    [claimed] = await unrouted.claim(1, "worker-1", ["bugfix"])
    assert claimed.id == dead.id


@pytest.mark.parametrize(
    ("assignee", "message"),
    [
        ("dave", "'dave' is not a configured agent"),
        ("carol", "'carol' does not take task type 'bugfix'"),
        ("", "assignee must be 1-64 letters"),
        ("bob smith", "assignee must be 1-64 letters"),
    ],
)
async def test_requeue_to_an_assignee_no_agent_can_be_is_refused_writing_nothing(
    open_queue: OpenQueue, assignee: str, message: str
) -> None:
    queue = await open_queue(agents=AGENTS)
    dead = await dead_letter(queue)
    with pytest.raises(InvalidInput) as refused:
        await queue.requeue(dead.id, assignee=assignee)
    assert refused.value.fields == ["assignee"] and message in str(refused.value)
    assert await queue.get(dead.id) == dead


async def test_only_a_requeue_takes_an_assignee(open_queue: OpenQueue) -> None:
    queue = await open_queue(agents=AGENTS)
    dead = await dead_letter(queue)
    for name in ("cancel", "review", "archive"):
        assert "assignee" not in inspect.signature(getattr(queue, name)).parameters
    assert "assignee" in inspect.signature(queue.requeue).parameters
    rt = await queue.runtime()
    for action in (Action.REVIEW, Action.ARCHIVE, Action.CANCEL):
        with pytest.raises(InvalidInput) as refused:
            await actions.act(rt, action, [dead.id], actor="lead", assignee="bob")
        assert refused.value.fields == ["assignee"]
    assert await queue.get(dead.id) == dead
