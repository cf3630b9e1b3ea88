"""No stored string may hold a NUL character, the same on both backends: PostgreSQL cannot store
one in text or JSON, SQLite can. Input that holds one is refused naming the field; free text
from an attempt has it replaced; an attempt's result that holds one fails that attempt alone."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agentqueue import AsyncQueue, InvalidInput, Outcome, OutcomeKind, TaskState
from agentqueue.domain.models import LogRecord


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"payload": {"notes": ["ok", "a\u0000b"]}}, "payload"),
        ({"title": "Fix\u0000login"}, "title"),
        ({"source": "issue", "source_id": "octo/repo#1\u0000"}, "source_id"),
    ],
)
async def test_a_nul_character_in_a_submitted_field_is_refused_naming_it(
    queue: AsyncQueue, fields: dict[str, object], where: str
) -> None:
    """Submit refuses a NUL anywhere in a field, naming the field (and the path inside a
    payload), and writes nothing."""
    spec = {"title": "Fix login", "task_type": "bugfix", **fields}
    with pytest.raises(InvalidInput) as caught:
        await queue.submit(spec)
    assert caught.value.fields[0] == where
    assert "NUL" in str(caught.value)
    if where == "payload":
        assert "notes[1]" in str(caught.value)
    assert (await queue.list()).items == []


async def test_a_result_with_a_nul_fails_its_attempt_and_not_the_batch(queue: AsyncQueue) -> None:
    """One outcome whose result holds a NUL does not stop the batch it is in: that attempt fails
    (not retried: it would report the same), naming the field; the other completes; an error
    message and captured output keep their text with the NUL replaced."""
    for n in range(3):
        await queue.submit(title=f"task {n}", task_type="bugfix", max_retries=3)
    await queue.admit()
    odd, plain, noisy = await queue.claim(3, "w")
    assert odd.lock_token and plain.lock_token and noisy.lock_token
    at = datetime.now(UTC)
    logs = [LogRecord(plain.id, plain.tenant, 1, "stdout", at, "bin\u0000ary", False)]
    answers = await queue.finish(
        [
            Outcome(odd.id, odd.lock_token, OutcomeKind.COMPLETED, result={"k": "x\u0000y"}),
            Outcome(plain.id, plain.lock_token, OutcomeKind.COMPLETED, result={"k": "fine"}),
            Outcome(
                noisy.id, noisy.lock_token, OutcomeKind.FAILED, error="boom\u0000", retryable=False
            ),
        ],
        actor="w",
        logs=logs,
    )
    assert set(answers) == {odd.id, plain.id, noisy.id}
    failed = await queue.get(odd.id)
    assert failed.state is TaskState.FAILED and failed.result is None
    assert failed.error is not None and failed.error.startswith("result.k: ")
    assert "NUL" in failed.error
    done = await queue.get(plain.id)
    assert done.state is TaskState.COMPLETED and done.result == {"k": "fine"}
    assert (await queue.get(noisy.id)).error == "boom\ufffd"
    assert [r.text for r in await queue.logs(plain.id)] == ["bin\ufffdary"]
