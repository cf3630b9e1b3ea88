"""A command agent's reply line (R25): ``{"reply": {...}}`` on stdout is handed to the worker
as soon as it is printed (the agent may have no database to write to), is never the result,
and the attempt's outcome waits for it to be recorded; a reply the worker refuses, or a second
reply in one attempt, fails the attempt naming the field."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agent_harness import RunAgent, control

from agentqueue.executors.base import AttemptEnd


def reply(value: Any) -> str:
    return json.dumps({"reply": value})


class Replies:
    """A ``send_reply`` that records what it was given, slowly, refusing when told to."""

    def __init__(self, delay: float = 0.0, refuse: str | None = None) -> None:
        self.sent: list[Any] = []
        self.delay = delay
        self.refuse = refuse
        self.first = asyncio.Event()

    async def __call__(self, value: Any) -> str | None:
        await asyncio.sleep(self.delay)
        self.sent.append(value)
        self.first.set()
        return self.refuse


async def test_a_reply_is_sent_while_the_agent_runs(run_agent: RunAgent) -> None:
    replies = Replies()
    attempt = asyncio.create_task(
        run_agent("print", reply({"payload": {"a": 1}}), "sleep", "30", control_=control(
            send_reply=replies
        ))
    )  # fmt: skip
    await asyncio.wait_for(replies.first.wait(), 10)
    assert replies.sent == [{"payload": {"a": 1}}] and not attempt.done()
    attempt.cancel()
    with pytest.raises(asyncio.CancelledError):
        await attempt


async def test_the_outcome_waits_for_the_reply_and_the_reply_is_not_the_result(
    run_agent: RunAgent,
) -> None:
    replies = Replies(delay=0.5)
    result = await run_agent(
        "print", '{"answer": 42}', "print", reply({"title": "Re"}),
        control_=control(send_reply=replies),
    )  # fmt: skip
    assert result.end is AttemptEnd.COMPLETED, result.error
    assert result.result == {"answer": 42}
    assert replies.sent == [{"title": "Re"}]


async def test_a_refused_reply_fails_the_attempt_saying_why(run_agent: RunAgent) -> None:
    replies = Replies(refuse="reply.colour: unknown field (known: title, payload)")
    result = await run_agent(
        "print", reply({"colour": "red"}), "sleep", "30", control_=control(send_reply=replies)
    )
    assert result.end is AttemptEnd.FAILED and not result.retryable
    assert result.error == "reply.colour: unknown field (known: title, payload)"


async def test_a_second_reply_in_one_attempt_fails_it(run_agent: RunAgent) -> None:
    replies = Replies()
    result = await run_agent(
        "print", reply({}), "print", reply({}), "sleep", "30",
        control_=control(send_reply=replies),
    )  # fmt: skip
    assert result.end is AttemptEnd.FAILED
    assert result.error is not None and result.error.startswith("reply: a second reply")
    assert replies.sent == [{}]
