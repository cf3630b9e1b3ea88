"""Callbacks (R17) on each backend: stored with the task's end in its transaction (once per
end), signed the Standard Webhooks way, retried with backoff until delivered or given up at the
horizon, every try recorded; loopback and private addresses refused at submit and, once resolved,
at delivery; the completion fast path writes no delivery and leaves every callback to the
decided path."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from delivery_receivers import OTHER_SECRET, SECRET, SECRET_ENV, Receiver, opened
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from agentqueue import AsyncQueue, InvalidInput, Outcome, OutcomeKind, Task, TaskState
from agentqueue.config import Settings
from agentqueue.delivery.callbacks import CallbackChannel
from agentqueue.delivery.outbox import Deliverer
from agentqueue.domain.deliveries import CALLBACK_KIND, DeliveryRecord
from agentqueue.domain.states import Action, Request, decide
from agentqueue.service.records import stamp, store_deliveries


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(autouse=True)
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, SECRET)


def settings(**callbacks: Any) -> Settings:
    conf = {
        "secret_env": SECRET_ENV,
        "allow_private": True,
        "backoff_first_secs": 0.02,
        "backoff_max_secs": 0.1,
        "timeout_secs": 5,
        **callbacks,
    }
    return Settings(callbacks=conf)


async def claimed(q: AsyncQueue, url: str | None, **fields: Any) -> Task:
    await q.submit(title="Fix login", task_type="bugfix", callback_url=url,
                   payload={"secret": "payload-only"}, **fields)  # fmt: skip
    [task] = await q.claim(1, "worker-1")
    return task


async def delivered(q: AsyncQueue, n: int, within: float = 30.0) -> list[DeliveryRecord]:
    """Deliver (rounds of the deliverer) until ``n`` callbacks are delivered or given up."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        await q.deliver()
        found = await q.deliveries(kind=CALLBACK_KIND)
        if sum(d.state != "pending" for d in found) >= n:
            return found
        assert asyncio.get_running_loop().time() < deadline, f"not delivered: {found}"
        await asyncio.sleep(0.02)


async def test_every_end_is_called_back_once_signed_and_verified(
    db_url: str, receiver: Receiver
) -> None:
    """Completed (on the worker's path, with the claimed image, and without it), failed,
    dead-lettered and cancelled: one signed POST each, which a receiver verifying with the
    secret accepts and one with another secret refuses; the body says how the task ended,
    never its payload."""
    async with opened(db_url, settings()) as q:
        url = receiver.url()
        a = await claimed(q, url)
        await q.finish([Outcome(a.id, a.lock_token, OutcomeKind.COMPLETED, result={"pr": 7},
                                claimed=a)])  # fmt: skip
        b = await claimed(q, url)
        await q.complete(b.id, b.lock_token, {"pr": 8})
        c = await claimed(q, url)
        await q.fail(c.id, c.lock_token, "bad input token=abc123", retryable=False)
        d = await claimed(q, url, max_retries=0)
        assert (await q.fail(d.id, d.lock_token, "flaky")).state is TaskState.DEAD_LETTER
        e = (await q.submit(title="Never mind", task_type="docs", callback_url=url)).task
        await q.cancel(e.id, reason="not needed")
        found = await delivered(q, 5)
        assert {x.state for x in found} == {"delivered"} and len(found) == 5
        for _ in range(3):  # nothing more is sent
            assert await q.deliver() == 0

    assert len(receiver.arrivals) == 5 and all(x.verified for x in receiver.arrivals)
    bodies = {json.loads(x.body)["task_id"]: json.loads(x.body) for x in receiver.arrivals}
    types = {t.id: bodies[str(t.id)]["type"] for t in (a, b, c, d, e)}
    assert types == {
        a.id: "task.completed", b.id: "task.completed", c.id: "task.failed",
        d.id: "task.dead_letter", e.id: "task.cancelled",
    }  # fmt: skip
    body = bodies[str(a.id)]
    assert body["result"] == {"pr": 7} and body["state"] == "completed"
    assert {"tenant", "title", "task_type", "source", "source_id", "retry_count", "ended_at",
            "event_seq", "error", "reason"} <= set(body)  # fmt: skip
    assert "payload-only" not in json.dumps(bodies)
    assert "abc123" not in bodies[str(c.id)]["error"]
    # a's body (the arrivals come in any order; a's says "completed", which is changed below)
    first = next(x for x in receiver.arrivals if json.loads(x.body)["task_id"] == str(a.id))
    assert first.headers["webhook-signature"].startswith("v1,")
    assert first.webhook_id and first.headers["webhook-timestamp"].isdigit()
    with pytest.raises(WebhookVerificationError):
        Webhook(OTHER_SECRET).verify(first.body, first.headers)
    with pytest.raises(WebhookVerificationError):  # a body changed on the way
        Webhook(SECRET).verify(first.body.replace(b"completed", b"failed"), first.headers)


async def test_a_receiver_failing_five_times_gets_the_sixth_try(
    db_url: str, receiver: Receiver
) -> None:
    receiver.fail_first = 5
    async with opened(db_url, settings()) as q:
        t = await claimed(q, receiver.url())
        await q.complete(t.id, t.lock_token, "done")
        [row] = await delivered(q, 1)
        shown = await q.delivery(row.id)
    assert shown.state == "delivered" and shown.attempts == 6
    assert [x.status_code for x in shown.tries] == [500] * 5 + [204]
    assert [x.error for x in shown.tries] == ["HTTP 500"] * 5 + [None]
    assert all(x.duration_ms > 0 for x in shown.tries)
    assert len({x.webhook_id for x in receiver.arrivals}) == 1  # the same id on every try
    assert [x.status for x in receiver.arrivals] == [500] * 5 + [204]


async def test_past_the_horizon_a_delivery_is_given_up_and_may_be_retried(
    db_url: str, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.fail_first = 1000
    receiver.fail_status = 503
    caplog.set_level(logging.WARNING, logger="agentqueue.deliveries")
    async with opened(db_url, settings(horizon_hours=0.0001)) as q:  # 0.36 s
        t = await claimed(q, receiver.url("/cb?token=url-secret-1"))
        await q.complete(t.id, t.lock_token, "done")
        [row] = await delivered(q, 1)
        assert row.state == "given_up" and row.given_up_at is not None
        tries = (await q.delivery(row.id)).tries
        assert tries and all(x.status_code == 503 for x in tries)
        assert any("given up" in r.getMessage() for r in caplog.records)
        assert await q.deliveries(state="given_up") == [row]
        # An operator retries it: due now, its tries kept.
        receiver.fail_first = 0
        retried = await q.retry_delivery(row.id)
        assert retried.state == "pending"
        assert await q.deliver() == 1
        done = await q.delivery(row.id)
    assert done.state == "delivered" and len(done.tries) == len(tries) + 1
    assert "url-secret-1" not in caplog.text and "url-secret-1" not in json.dumps(done.to_json())


async def test_a_callback_to_a_private_address_is_refused_at_submit_on_every_path(
    db_url: str,
) -> None:
    async with opened(db_url, settings(allow_private=False)) as q:
        for url in ("http://127.0.0.1:9/cb", "http://169.254.169.254/", "http://localhost./x"):
            with pytest.raises(InvalidInput) as raised:
                await q.submit(title="t", task_type="docs", callback_url=url)
            assert [p.field for p in raised.value.problems] == ["callback_url"]
        with pytest.raises(InvalidInput) as raised:
            await q.submit_many([
                {"title": "ok", "task_type": "docs", "callback_url": "https://example.com/cb"},
                {"title": "no", "task_type": "docs", "callback_url": "http://[fd00:ec2::254]/"},
            ])  # fmt: skip
        assert [p.field for p in raised.value.problems] == ["tasks[1].callback_url"]
        assert (await q.list()).items == []  # nothing was written


async def test_a_name_resolving_to_loopback_is_not_sent_to(
    db_url: str, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """Submitted where private addresses are allowed, delivered where they are not: the host
    resolves to 127.0.0.1, so nothing is sent; the delivery is given up at once, saying why."""
    async with opened(db_url, settings()) as q:
        t = await claimed(q, receiver.url(host="localhost"))
        await q.complete(t.id, t.lock_token, "done")
    caplog.set_level(logging.WARNING, logger="agentqueue.deliveries")
    async with opened(db_url, settings(allow_private=False)) as q:
        [row] = await delivered(q, 1)
        shown = await q.delivery(row.id)
    assert shown.state == "given_up" and shown.attempts == 1
    assert "loopback" in (shown.last_error or "")
    assert receiver.requests() == 0


async def test_the_request_goes_to_the_address_that_was_checked(
    db_url: str, receiver: Receiver
) -> None:
    """The name is resolved once, by the resolver the check used, and the connection goes to
    that address (``hooks.invalid`` exists in no DNS), with the name in the Host header; a
    name with any forbidden address among its answers is not sent to."""
    answers = {"hooks.invalid": ["127.0.0.1"], "mixed.invalid": ["93.184.215.14", "10.1.2.3"]}

    async def resolver(host: str, port: int) -> list[str]:
        return answers[host]

    async with opened(db_url, settings()) as q:
        t = await claimed(q, f"http://hooks.invalid:{receiver.port}/cb")
        await q.complete(t.id, t.lock_token, "done")
        rt = await q.runtime()
        sent, _ = await Deliverer(rt, [CallbackChannel(rt, resolver)]).deliver_due()
        assert sent == 1
    [arrival] = receiver.arrivals
    assert arrival.headers["host"] == f"hooks.invalid:{receiver.port}" and arrival.verified

    async with opened(db_url, settings(allow_private=False)) as q:
        async with q.store.transaction() as tx:  # stored as if submitted elsewhere
            [task] = await tx.lock([t.id])
        item_url = f"http://mixed.invalid:{receiver.port}/cb"
        await _store_callback(q, task, item_url)
        rt = await q.runtime()
        assert await Deliverer(rt, [CallbackChannel(rt, resolver)]).deliver_due() == (0, False)
        [row] = await q.deliveries(state="given_up")
        assert "private" in (row.last_error or "")
    assert len(receiver.arrivals) == 1


async def _store_callback(q: AsyncQueue, task: Task, url: str) -> None:
    from agentqueue.domain.deliveries import Delivery

    item = Delivery(
        CALLBACK_KIND, task.id, task.tenant, task.event_seq + 100, url, {}, task.updated_at
    )
    async with q.store.transaction() as tx:
        await tx.enqueue_outbox([item])


async def test_without_a_secret_callbacks_wait_and_the_deliverer_warns_once(
    db_url: str,
    receiver: Receiver,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(SECRET_ENV)
    caplog.set_level(logging.WARNING, logger="agentqueue.deliveries")
    async with opened(db_url, settings()) as q:
        t = await claimed(q, receiver.url())
        await q.complete(t.id, t.lock_token, "done")
        rt = await q.runtime()
        sender = Deliverer(rt, [CallbackChannel(rt)], poll_secs=0.05)
        job = asyncio.create_task(sender.run())
        try:
            for _ in range(200):
                if any("secret_env" in r.getMessage() for r in caplog.records):
                    break
                await asyncio.sleep(0.05)
            for _ in range(5):
                sender.wake.set()
                await asyncio.sleep(0.15)
        finally:
            job.cancel()
            await asyncio.gather(job, return_exceptions=True)
        [row] = await q.deliveries()
    warned = [r for r in caplog.records if SECRET_ENV in r.getMessage()]
    assert len(warned) == 1 and row.state == "pending" and row.attempts == 0
    assert SECRET not in caplog.text and receiver.requests() == 0


async def test_an_end_written_again_stores_each_delivery_once(db_url: str) -> None:
    """The outbox keeps one delivery per (kind, task, end): the same change's deliveries
    stored twice are one callback and one reply."""
    async with opened(db_url, settings()) as q:
        t = await claimed(q, "https://hooks.example.com/cb", source="issue",
                          source_id="octo/hello#12")  # fmt: skip
        change = stamp(t, _decided(t))
        async with q.store.transaction() as tx:
            await store_deliveries(tx, [change])
            await store_deliveries(tx, [change, change])
        async with q.store.transaction() as tx:
            await store_deliveries(tx, [change])
        found = await q.deliveries()
    assert sorted(d.kind for d in found) == ["callback", "github_reply"]


def _decided(t: Task) -> Any:
    from agentqueue.domain.states import Transition

    outcome = decide(t, Request(Action.COMPLETE, t.locked_at or t.updated_at, actor="w",
                                lock_token=t.lock_token, result="ok"))  # fmt: skip
    assert isinstance(outcome, Transition)
    return outcome


async def test_the_set_wise_completion_writes_no_delivery(db_url: str) -> None:
    """Completions of tasks that call for nothing are written set-wise and store nothing;
    those with a callback go the decided way and store exactly one each."""
    async with opened(db_url, settings()) as q:
        plain = [await claimed(q, None) for _ in range(3)]
        hooked = await claimed(q, "https://hooks.example.com/cb")
        outcomes = [Outcome(t.id, t.lock_token, OutcomeKind.COMPLETED, result=1, claimed=t)
                    for t in [*plain, hooked]]  # fmt: skip
        done = await q.finish(outcomes)
        assert all(isinstance(x, Task) and x.state is TaskState.COMPLETED for x in done.values())
        [row] = await q.deliveries()
        assert (row.task_id, row.event_seq) == (hooked.id, done[hooked.id].event_seq)


async def test_a_hanging_receiver_does_not_hold_up_later_callbacks(
    db_url: str, receiver: Receiver
) -> None:
    """The first callback's receiver hangs (30 s, well within the try's 60 s); a callback stored
    meanwhile is delivered while the first is still hanging."""
    receiver.hold_secs, receiver.hold_count = 30.0, 1
    async with opened(db_url, settings(timeout_secs=60)) as q:
        rt = await q.runtime()
        sender = Deliverer(rt, [CallbackChannel(rt)], poll_secs=0.2)
        job = asyncio.create_task(sender.run())
        try:
            first = await claimed(q, receiver.url("/slow"))
            await q.complete(first.id, first.lock_token, "done")
            await _until(lambda: receiver.in_flight() == 1, "the first callback hanging")
            second = await claimed(q, receiver.url("/fast"))
            await q.complete(second.id, second.lock_token, "done")
            await _until(lambda: len(receiver.delivered_ids()) == 1, "the second delivered")
            # The first still hangs: one request in flight that was not delivered (the second
            # may still be sending its answer, recorded just before).
            assert len(receiver.in_flight_ids() - receiver.delivered_ids()) == 1
        finally:
            job.cancel()
            await asyncio.gather(job, return_exceptions=True)
        [row] = await q.deliveries(task_id=first.id)
    assert row.state == "pending" and not row.leased  # released when the deliverer stopped


async def _until(check: Any, what: str, within: float = 25.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)
