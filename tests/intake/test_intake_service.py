"""service.intake on both backends, on the manual clock: ``/agent retry`` requeues the
source's dead letter (else nothing is done, saying why), and a delivery applied twice changes
nothing the second time."""

from __future__ import annotations

from typing import Any

from test_github_decide import RULE, body, comment

from agentqueue import AsyncQueue, ManualClock
from agentqueue.domain.states import TaskState
from agentqueue.intake import github
from agentqueue.service import intake


def _plan(event: str, payload: dict[str, Any]) -> github.Plan:
    plan = github.decide(RULE, event, payload)
    assert isinstance(plan, github.Plan), plan
    return plan


async def test_retry_requeues_the_dead_letter_only(queue: AsyncQueue, clock: ManualClock) -> None:
    rt = await queue.runtime()
    opened = await intake.apply(rt, _plan("issues", body("issues.opened")), "d-1", "issues")
    [made] = opened.body["tasks"]
    assert made["outcome"] == "created"
    retry = _plan("issue_comment", comment("/agent retry"))
    early = await intake.apply(rt, retry, "d-2", "issue_comment")
    assert early.status == 202
    assert early.body["ignored"].endswith(f"({made['id']} is pending)")
    for _attempt in range(4):  # max_retries 3: the fourth failure is the last
        await queue.promote_due_retries()
        await queue.admit()
        [got] = await queue.claim(1, "w", task_types=["bugfix"])
        assert got.lock_token is not None
        failed = await queue.fail(got.id, got.lock_token, "broke")
        clock.advance(120)
    assert failed.state is TaskState.DEAD_LETTER
    answer = await intake.apply(rt, retry, "d-3", "issue_comment")
    assert answer.status == 200, answer.body
    [requeued] = answer.body["tasks"]
    assert (requeued["id"], requeued["outcome"], requeued["state"]) == (
        made["id"],
        "requeued",
        "queued",
    )
    events = await queue.events(made["id"])
    assert events[-1].action == "requeue" and events[-1].actor == "Codertocat"
    again = await intake.apply(rt, retry, "d-3", "issue_comment")
    assert again.body == {**answer.body, "duplicate": True}
    assert len(await queue.events(made["id"])) == len(events)
