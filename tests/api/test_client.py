"""``Client`` and ``AsyncClient`` against a real ``agentqueue api`` process, on SQLite and on
PostgreSQL: every method once, through each client, and the errors they raise.

A queue opened on the server's own database (``driver``) plays the worker: it admits, claims
and ends attempts, so the API's answers can be checked in every state.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import uuid4

import httpx
import pytest
from client_helpers import Either, claim, finish, log_line, unique
from http_server import CLIENT_API_SETTINGS, CLIENT_CONFIG, ApiServer, running_server

from agentqueue import (
    AgentQueueError,
    AsyncClient,
    AsyncQueue,
    Client,
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    RateLimited,
    Refused,
    ServerUnreachable,
    StoreUnavailable,
    SubmitResult,
    Task,
    TaskPage,
    TaskSpec,
    TaskState,
    TransitionRefused,
    Unauthenticated,
)
from agentqueue.client import Calls
from agentqueue.domain.access import Role
from agentqueue.domain.schedule import CatchUp
from agentqueue.service.execution import OutcomeKind


@pytest.fixture(params=["sync", "async"])
async def aq(request: pytest.FixtureRequest, client_server: ApiServer) -> AsyncIterator[Either]:
    """An admin's client of each kind."""
    face = Either(
        Client(client_server.url, client_server.admin_secret)
        if request.param == "sync"
        else AsyncClient(client_server.url, client_server.admin_secret)
    )
    yield face
    await face.close()


def same_kind(aq: Either, server: ApiServer, token: str) -> Either:
    """A client of ``aq``'s kind with another token."""
    return Either(Client(server.url, token) if aq.sync else AsyncClient(server.url, token))


# --- submitting and reading ---------------------------------------------------------------


async def test_submit_in_every_form_and_get(aq: Either) -> None:
    kind = unique("docs")
    made = await aq.submit(
        title="Write the guide", task_type=kind, priority="P0", payload={"page": 3},
        labels=["writing"], idempotency_key=f"{kind}-1", requested_by="admin",
        run_after=datetime.now(UTC) - timedelta(seconds=1),
    )  # fmt: skip
    assert isinstance(made, SubmitResult) and made.created and made.matched_by is None
    task = made.task
    assert (task.title, task.task_type, task.priority, task.payload) == (
        "Write the guide", kind, 0, {"page": 3},
    )  # fmt: skip
    assert task.labels == ("writing",) and task.requested_by == "admin"  # the token's name
    assert task.state is TaskState.PENDING  # an agent is configured: admission waits

    again = await aq.submit({"title": "Write the guide", "task_type": kind,
                             "idempotency_key": f"{kind}-1"})  # fmt: skip
    assert (again.created, again.matched_by, again.task.id) == (False, "idempotency_key", task.id)
    spec = TaskSpec(title="From a spec", task_type=kind, source="issue", source_id=f"{kind}#1")
    from_spec = await aq.submit(spec)
    assert from_spec.created and from_spec.task.source_id == f"{kind}#1"

    got = await aq.get(task.id)
    assert isinstance(got, Task) and got.id == task.id and got.to_json() == task.to_json()
    assert (await aq.get(str(task.id))).id == task.id


async def test_submit_many_in_order_and_all_or_nothing(aq: Either) -> None:
    kind = unique("bulk")
    results = await aq.submit_many(
        [{"title": f"item {i}", "task_type": kind} for i in range(3)]
        + [TaskSpec(title="item 3", task_type=kind)]
    )
    assert [r.task.title for r in results] == [f"item {i}" for i in range(4)]
    assert all(r.created for r in results)
    with pytest.raises(InvalidInput) as caught:
        await aq.submit_many([{"title": "fine", "task_type": kind}, {"task_type": kind}])
    assert caught.value.fields == ["tasks[1].title"]


async def test_get_waits_for_the_task_to_end(aq: Either, driver: AsyncQueue) -> None:
    kind = unique("wait")
    made = await aq.submit(title="Wait for me", task_type=kind)
    still = await aq.get(made.task.id, wait=0.1)  # it cannot end meanwhile
    assert still.state is TaskState.PENDING

    waiting = asyncio.create_task(aq.get(made.task.id, wait=60))
    claimed = await claim(driver, kind)
    await finish(driver, claimed, OutcomeKind.COMPLETED, result={"ok": 1})
    done = await asyncio.wait_for(waiting, timeout=120)
    assert done.state is TaskState.COMPLETED and done.result == {"ok": 1}


async def test_events_stream_and_logs(aq: Either, driver: AsyncQueue) -> None:
    kind = unique("stream")
    made = await aq.submit(title="Watch me", task_type=kind)
    streaming = asyncio.create_task(aq.streamed(made.task.id))
    claimed = await claim(driver, kind)
    lines = [log_line(claimed, "hello\n"), log_line(claimed, "oops\n", "stderr")]
    await finish(driver, claimed, OutcomeKind.COMPLETED, result="done", logs=lines)
    streamed = await asyncio.wait_for(streaming, timeout=120)

    events = await aq.events(made.task.id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.action for e in events][-1] == "complete" and events[-1].to_state.terminal
    assert streamed == events  # the stream gives every event once, and ends at the last
    assert events[0].from_state is None and events[0].actor == "admin"

    logs = await aq.logs(made.task.id)
    assert [(r.stream, r.text, r.attempt, r.tenant) for r in logs] == [
        ("stdout", "hello\n", 1, "default"), ("stderr", "oops\n", 1, "default"),
    ]  # fmt: skip


async def test_a_stream_of_a_task_that_ended_gives_its_events_and_ends(aq: Either) -> None:
    made = await aq.submit(title="Over already", task_type=unique("over"))
    await aq.cancel(made.task.id)
    streamed = await asyncio.wait_for(aq.streamed(made.task.id), timeout=120)
    assert [e.action for e in streamed] == [e.action for e in await aq.events(made.task.id)]
    with pytest.raises(NotFound):
        await aq.streamed(uuid4())


async def test_list_with_every_filter_and_pages(aq: Either, driver: AsyncQueue) -> None:
    kind = unique("list")
    before = datetime.now(UTC) - timedelta(seconds=1)
    made = [
        (await aq.submit(title=f"t{i}", task_type=kind, labels=["a", "b"] if i % 2 else ["a"],
                         assignee="fixer" if i == 1 else None,
                         source="issue", source_id=f"{kind}#{i}")).task
        for i in range(5)
    ]  # fmt: skip
    page = await aq.list(task_type=kind, limit=2)
    assert isinstance(page, TaskPage) and [t.title for t in page.items] == ["t4", "t3"]
    assert page.next_cursor is not None
    rest = await aq.list(task_type=[kind], limit=10, cursor=page.next_cursor)
    assert [t.title for t in rest.items] == ["t2", "t1", "t0"] and rest.next_cursor is None
    after = await aq.list(task_type=kind, limit=2, after=page.items[-1].id)
    assert [t.title for t in after.items] == ["t2", "t1"]
    assert [t.id for t in (await aq.list(task_type=kind, source_id=f"{kind}#2")).items] == [
        made[2].id
    ]
    assert [t.title for t in (await aq.list(task_type=kind, label=["a", "b"])).items] == [
        "t3", "t1",
    ]  # fmt: skip
    assert [t.title for t in (await aq.list(task_type=kind, assignee="fixer")).items] == ["t1"]
    after = await aq.list(task_type=kind, created_after=before, state=["pending", "queued"])
    assert len(after.items) == 5
    assert (await aq.list(task_type=kind, created_before=before)).items == []
    assert (await aq.list(task_type=kind, source="pr", tenant="default")).items == []


# --- people's actions ---------------------------------------------------------------------


async def dead_letter(aq: Either, driver: AsyncQueue, kind: str) -> Task:
    await aq.submit(title="Will fail", task_type=kind, max_retries=0)
    claimed = await claim(driver, kind)
    return await finish(driver, claimed, OutcomeKind.FAILED, error="boom", retryable=True)


async def test_cancel_and_the_dead_letter_actions(aq: Either, driver: AsyncQueue) -> None:
    made = await aq.submit(title="Cancel me", task_type=unique("cancel"))
    cancelled = await aq.cancel(made.task.id, reason="not needed", actor="ignored")
    assert cancelled.state is TaskState.CANCELLED
    last = (await aq.events(made.task.id))[-1]
    assert (last.action, last.actor, last.reason) == ("cancel", "admin", "not needed")

    kind = unique("dlq")
    first, second = await dead_letter(aq, driver, kind), await dead_letter(aq, driver, kind)
    assert first.state is TaskState.DEAD_LETTER
    letters = await aq.dead_letters(limit=1000)
    assert {first.id, second.id} <= {t.id for t in letters.items}
    reviewed = await aq.review(first.id, reason="looking")
    assert reviewed.state is TaskState.MANUAL_REVIEW
    requeued = await aq.requeue(first.id, reason="fixed the cause")
    assert requeued.state is TaskState.QUEUED and requeued.retry_count == 0
    archived = await aq.archive(second.id, reason="not worth it")
    assert archived.state is TaskState.ARCHIVED
    paged = await aq.dead_letters(limit=1)
    assert len(paged.items) <= 1


async def test_requeue_to_another_assignee(aq: Either, driver: AsyncQueue) -> None:
    letter = await dead_letter(aq, driver, "agentwork")
    requeued = await aq.requeue(letter.id, reason="give it to fixer", assignee="fixer")
    assert requeued.assignee == "fixer"


async def test_approve_and_reject_a_held_task(aq: Either, client_server: ApiServer) -> None:
    kind = unique("guarded")
    held = (await aq.submit(title="drop table users", task_type=kind)).task
    other = (await aq.submit(title="please drop table logs", task_type=kind)).task
    assert (held.state, held.hold) == (TaskState.BLOCKED, "approval")
    submitter = same_kind(aq, client_server, client_server.api_token("submitter"))
    try:
        with pytest.raises(Forbidden, match="approver"):
            await submitter.approve(held.id, reason="me")
    finally:
        await submitter.close()
    with pytest.raises(InvalidInput) as caught:
        await aq.approve(held.id, reason="")
    assert caught.value.fields == ["reason"]
    approved = await aq.approve(held.id, reason="backed up")
    assert approved.state is TaskState.PENDING and approved.approved_by == "admin"
    rejected = await aq.reject(other.id, reason="no")
    assert rejected.state is TaskState.CANCELLED
    with pytest.raises(TransitionRefused):
        await aq.reject(held.id, reason="too late")


async def test_a_tool_result_queues_the_task_again(aq: Either, driver: AsyncQueue) -> None:
    kind = unique("tool")
    made = await aq.submit(title="Needs a tool", task_type=kind)
    claimed = await claim(driver, kind)
    call = {"id": "call-1", "name": "search", "args": {"q": "why"}, "timeout_secs": 600}
    waiting = await finish(driver, claimed, OutcomeKind.WAITING_TOOL, tool_call=call)
    assert waiting.state is TaskState.WAITING_TOOL
    answered = await aq.submit_tool_result(made.task.id, "call-1", {"hits": [1, 2]})
    assert answered.state is TaskState.QUEUED
    assert answered.tool_calls[0]["result"] == {"hits": [1, 2]}
    with pytest.raises(Refused):
        await aq.submit_tool_result(made.task.id, "call-1", None)


# --- operating ----------------------------------------------------------------------------


async def test_stats_agents_and_pausing(aq: Either) -> None:
    kind = unique("pause")
    await aq.submit(title="counted", task_type=kind)
    stats = await aq.stats()
    assert set(stats.by_state) == set(TaskState) and stats.total >= 1
    assert stats.by_state[TaskState.PENDING] >= 1
    [agent] = await aq.agents()
    assert (agent.name, agent.task_types, agent.max_concurrent) == ("fixer", ["agentwork"], 2)

    paused = await aq.pause(kind, reason="incident 7", actor="ignored")
    assert (paused.task_type, paused.paused_by, paused.reason) == (kind, "admin", "incident 7")
    assert kind in {p.task_type for p in await aq.paused()}
    assert await aq.resume(kind) is True
    assert await aq.resume(kind) is False
    assert kind not in {p.task_type for p in await aq.paused()}


async def test_schedules_are_added_listed_and_removed(aq: Either) -> None:
    name = unique("nightly")
    added = await aq.add_schedule(
        name, cron="0 2 * * *", task=TaskSpec(title="Audit", task_type="docs"),
        tz="Europe/Berlin", catch_up="once",
    )  # fmt: skip
    assert (added.name, added.tz, added.catch_up, added.created_by) == (
        name, "Europe/Berlin", CatchUp.ONCE, "admin",
    )  # fmt: skip
    assert added.task == {"title": "Audit", "task_type": "docs"} and added.tenant == "default"
    assert name in {s.name for s in await aq.schedules()}
    assert name in {s.name for s in await aq.schedules(tenant="default")}
    with pytest.raises(InvalidInput) as caught:
        await aq.add_schedule(unique("bad"), cron="nope", task={"title": "x", "task_type": "y"})
    assert caught.value.fields == ["cron"]
    removed = await aq.remove_schedule(name, tenant="default")
    assert removed.name == name
    with pytest.raises(NotFound):
        await aq.remove_schedule(name)


async def test_tokens_are_made_listed_revoked_and_verify_holds(
    aq: Either, client_server: ApiServer
) -> None:
    name = unique("ci")
    made = await aq.create_token(name, role="operator", tenant="acme", expires="90d")
    assert (made.record.name, made.record.role, made.record.tenant) == (name, Role.OPERATOR, "acme")
    assert made.secret.startswith("aq_") and made.record.expires_at is not None
    listed = {t.name: t for t in await aq.tokens()}
    assert listed[name].prefix == made.record.prefix and listed[name].secret_hash == ""
    with pytest.raises(Conflict):  # a Refused, so a Conflict as the local queue raises
        await aq.create_token(name, role="submitter")

    theirs = same_kind(aq, client_server, made.secret)
    try:
        assert (await theirs.stats()).total >= 0
        revoked = await aq.revoke_token(name)
        assert revoked.revoked_at is not None
        with pytest.raises(Unauthenticated, match="revoked") as caught:
            await theirs.stats()
        assert made.secret not in str(caught.value)
    finally:
        await theirs.close()
    with pytest.raises(NotFound):
        await aq.revoke_token(name)

    report = await aq.verify()
    assert report.ok and report.tasks >= 0 and report.breaks == []


# --- errors -------------------------------------------------------------------------------


async def test_errors_are_the_local_queues_with_their_fields(
    aq: Either, client_server: ApiServer
) -> None:
    kind = unique("errors")
    with pytest.raises(InvalidInput) as caught:
        await aq.submit(title="", task_type=kind, priority="P9")
    assert sorted(caught.value.fields) == ["priority", "title"]
    with pytest.raises(InvalidInput) as caught:
        await aq.submit(title="x", task_type=kind, requested_by="someone else")
    assert caught.value.fields == ["requested_by"]
    with pytest.raises(InvalidInput) as caught:
        await aq.get("not-a-uuid")  # refused here, before any request
    assert caught.value.fields == ["id"]
    with pytest.raises(InvalidInput) as caught:
        await aq.dead_letters(limit=0)
    assert caught.value.fields == ["limit"]
    with pytest.raises(InvalidInput) as caught:
        await aq.submit(title="big", task_type=kind, payload={"blob": "x" * 70_000})
    assert caught.value.fields == ["body"]  # 413: over [api] max_body_bytes

    with pytest.raises(NotFound):
        await aq.get(uuid4())
    made = await aq.submit(title="ends", task_type=kind)
    await aq.cancel(made.task.id)
    with pytest.raises(TransitionRefused) as refused:
        await aq.cancel(made.task.id)
    assert isinstance(refused.value, Refused) and isinstance(refused.value, Conflict)

    acme = same_kind(aq, client_server, client_server.api_token("operator", tenant="acme"))
    try:
        with pytest.raises(NotFound):  # another tenant's task is not there at all
            await acme.get(made.task.id)
        with pytest.raises(Forbidden, match="every tenant"):
            await acme.pause(kind)
        with pytest.raises(InvalidInput) as caught:
            await acme.submit(title="x", task_type=kind, tenant="default")
        assert caught.value.fields == ["tenant"]
    finally:
        await acme.close()

    unknown = "aq_abcdefghijkl_" + "A" * 43
    stranger = same_kind(aq, client_server, unknown)
    try:
        with pytest.raises(Unauthenticated) as denied:
            await stranger.stats()
        assert unknown not in str(denied.value) and "unknown token" in str(denied.value)
    finally:
        await stranger.close()


async def test_a_server_that_is_not_there_is_unreachable(aq: Either) -> None:
    kind = Client if aq.sync else AsyncClient
    gone = Either(kind("http://127.0.0.1:9", "aq_secret_never_shown", timeout=5))
    try:
        with pytest.raises(ServerUnreachable) as caught:
            await gone.stats()
    finally:
        await gone.close()
    assert isinstance(caught.value, StoreUnavailable)
    assert "127.0.0.1:9" in str(caught.value) and "aq_secret_never_shown" not in str(caught.value)


async def test_too_many_requests_say_when_to_come_back(tmp_path: Path) -> None:
    env = {"AGENTQUEUE_API__REQUESTS_PER_MINUTE": "1", "AGENTQUEUE_API__BURST": "2"}
    with running_server("sqlite", tmp_path, CLIENT_API_SETTINGS, CLIENT_CONFIG, env=env) as server:
        async with AsyncClient(server.url, server.admin_secret) as aq:
            with pytest.raises(RateLimited) as caught:
                for _ in range(3):
                    await aq.stats()
        assert caught.value.retry_after >= 1
        with Client(server.url, server.admin_secret) as sync, pytest.raises(RateLimited):
            sync.stats()


# --- the client itself --------------------------------------------------------------------


def test_both_clients_have_the_queues_names_and_signatures() -> None:
    """Each method takes what AsyncQueue's method of the same name takes (and a little more
    where the API offers it: ``wait``, ``assignee``, the list filters)."""
    ours = [name for name in vars(Calls) if not name.startswith("_") and name != "stream_events"]
    for name in ours:
        for client in (Client, AsyncClient):
            assert hasattr(client, name), (client, name)
        theirs = inspect.signature(getattr(AsyncQueue, name)).parameters
        mine = inspect.signature(getattr(Client, name)).parameters
        assert next(iter(mine)) == "self"
        for param, spec in theirs.items():
            if param == "self":
                continue
            assert param in mine, f"{name}: no {param}"
            assert mine[param].kind == spec.kind, f"{name}({param})"
            assert mine[param].default == spec.default, f"{name}({param})"
        assert inspect.signature(getattr(AsyncClient, name)) == inspect.signature(
            getattr(Client, name)
        )
    assert inspect.isasyncgenfunction(AsyncClient.stream_events)
    assert inspect.isgeneratorfunction(Client.stream_events)


def test_the_url_and_token_are_checked_and_the_token_never_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "aq_abcdefghijkl_" + "s" * 43
    client = Client("http://example.test:8077/v1/", secret)
    assert client.url == "http://example.test:8077" and secret not in repr(client)
    client.close()
    monkeypatch.delenv("AGENTQUEUE_TOKEN", raising=False)
    monkeypatch.delenv("AGENTQUEUE_API", raising=False)
    for url, token, field in (
        (None, secret, "url"),
        ("ftp://example.test", secret, "url"),
        ("http://example.test", None, "token"),
        ("http://example.test", "two words " + secret, "token"),
    ):
        with pytest.raises(InvalidInput) as caught:
            Client(url, token)
        assert caught.value.fields == [field] and secret not in str(caught.value)
    monkeypatch.setenv("AGENTQUEUE_API", "http://from-env.test")
    monkeypatch.setenv("AGENTQUEUE_TOKEN", secret)
    with Client() as from_env:
        assert from_env.url == "http://from-env.test"


def test_an_answer_that_is_not_the_apis_is_an_api_error() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/stats"):
            return httpx.Response(200, json={"something": "else"})
        return httpx.Response(500, json={"type": "about:blank", "title": "Internal server error",
                                         "status": 500, "detail": "quote error id abc",
                                         "error_id": "abc"})  # fmt: skip

    with Client("http://x.test", "t", transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(AgentQueueError, match="not what this client reads"):
            client.stats()
        with pytest.raises(AgentQueueError) as caught:
            client.verify()
    assert getattr(caught.value, "error_id", None) == "abc"
    assert getattr(caught.value, "status", None) == 500
