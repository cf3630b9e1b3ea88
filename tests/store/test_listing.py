"""Reads on each backend: get, list (filters and paging), events and stats, and tenant scoping
of reads and writes."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest

from agentqueue import AsyncQueue, InvalidInput, ManualClock, NotFound, Task, TaskState

SPECS: list[dict[str, Any]] = [
    {"title": "a-issue-bugfix", "task_type": "bugfix", "source": "issue", "tenant": "a"},
    {"title": "a-pr-review", "task_type": "review", "source": "pr", "tenant": "a"},
    {"title": "a-api-docs", "task_type": "docs", "source": "api", "tenant": "a"},
    {"title": "b-issue-bugfix", "task_type": "bugfix", "source": "issue", "tenant": "b"},
    {"title": "b-cron-docs", "task_type": "docs", "source": "cron", "tenant": "b"},
    {"title": "c-api-bugfix", "task_type": "bugfix", "source": "api", "tenant": "c"},
]


async def seeded(queue: AsyncQueue) -> dict[str, Task]:
    """The six tasks of SPECS; ``a-issue-bugfix`` queued and ``b-issue-bugfix`` cancelled."""
    tasks = {r.task.title: r.task for r in await queue.submit_many(SPECS)}
    await queue.admit(limit=1)  # the first submitted: a-issue-bugfix
    await queue.cancel(tasks["b-issue-bugfix"].id)
    return tasks


async def titles(queue: AsyncQueue, **filters: Any) -> list[str]:
    return [t.title for t in (await queue.list(**filters)).items]


async def test_list_is_newest_first(queue: AsyncQueue) -> None:
    await seeded(queue)
    assert await titles(queue) == [s["title"] for s in reversed(SPECS)]


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"state": "pending"}, ["c-api-bugfix", "b-cron-docs", "a-api-docs", "a-pr-review"]),
        ({"state": TaskState.QUEUED}, ["a-issue-bugfix"]),
        ({"state": ["queued", "cancelled"]}, ["b-issue-bugfix", "a-issue-bugfix"]),
        ({"state": "executing"}, []),
        ({"task_type": "bugfix"}, ["c-api-bugfix", "b-issue-bugfix", "a-issue-bugfix"]),
        ({"task_type": ["docs", "review"]}, ["b-cron-docs", "a-api-docs", "a-pr-review"]),
        ({"tenant": "a"}, ["a-api-docs", "a-pr-review", "a-issue-bugfix"]),
        ({"tenant": "nobody"}, []),
        ({"source": "issue"}, ["b-issue-bugfix", "a-issue-bugfix"]),
        ({"source": ["cron", "pr"]}, ["b-cron-docs", "a-pr-review"]),
        ({"tenant": "a", "task_type": "bugfix", "state": "queued"}, ["a-issue-bugfix"]),
        ({"tenant": "b", "source": "issue", "state": "pending"}, []),
        ({"task_type": "bugfix", "source": "api"}, ["c-api-bugfix"]),
    ],
)
async def test_list_filters(
    queue: AsyncQueue, filters: dict[str, Any], expected: list[str]
) -> None:
    await seeded(queue)
    assert await titles(queue, **filters) == expected


async def test_list_refuses_an_unknown_state(queue: AsyncQueue) -> None:
    with pytest.raises(InvalidInput) as refused:
        await queue.list(state="sleeping")
    assert refused.value.fields == ["state"]


@pytest.mark.parametrize("limit", [0, 1001])
async def test_list_refuses_a_limit_out_of_range(queue: AsyncQueue, limit: int) -> None:
    with pytest.raises(InvalidInput) as refused:
        await queue.list(limit=limit)
    assert refused.value.fields == ["limit"]


async def test_list_refuses_a_cursor_it_did_not_make(queue: AsyncQueue) -> None:
    with pytest.raises(InvalidInput) as refused:
        await queue.list(cursor="not-a-cursor")
    assert refused.value.fields == ["cursor"]


TAGGED: list[dict[str, Any]] = [
    {"title": "issue-1", "task_type": "bugfix", "source": "issue", "source_id": "o/r#1",
     "assignee": "alice", "labels": ["python", "db"]},
    {"title": "issue-11", "task_type": "bugfix", "source": "issue", "source_id": "o/r#11",
     "assignee": "bob", "labels": ["python"]},
    {"title": "api-alice", "task_type": "docs", "assignee": "alice", "labels": ["db"]},
    {"title": "api-none", "task_type": "docs"},
]  # fmt: skip


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"source_id": "o/r#1"}, ["issue-1"]),
        ({"source_id": "o/r#"}, []),
        ({"assignee": "alice"}, ["api-alice", "issue-1"]),
        ({"assignee": "carol"}, []),
        ({"label": "python"}, ["issue-11", "issue-1"]),
        ({"label": ["db"]}, ["api-alice", "issue-1"]),
        ({"label": ("db", "python")}, ["issue-1"]),
        ({"label": ["db", "go"]}, []),
        ({"label": []}, ["api-none", "api-alice", "issue-11", "issue-1"]),
        ({"assignee": "alice", "label": "python"}, ["issue-1"]),
        ({"assignee": "bob", "source": "issue", "source_id": "o/r#11"}, ["issue-11"]),
        ({"assignee": "alice", "task_type": "docs", "state": "pending"}, ["api-alice"]),
    ],
)
async def test_list_filters_by_source_id_assignee_and_labels(
    queue: AsyncQueue, filters: dict[str, Any], expected: list[str]
) -> None:
    await queue.submit_many(TAGGED)
    assert await titles(queue, **filters) == expected


async def test_list_by_creation_time_takes_datetimes_and_iso_text(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    """``created_after`` is inclusive and ``created_before`` exclusive; each takes a datetime or
    ISO 8601 text, UTC when it names no offset."""
    start = clock.now()  # 2026-03-01 09:00 UTC
    for i in range(3):
        await queue.submit(title=f"t{i}", task_type="docs")
        clock.advance(3600)
    second = start + timedelta(hours=1)
    assert await titles(queue, created_after=second) == ["t2", "t1"]
    assert await titles(queue, created_before=second) == ["t0"]
    assert await titles(queue, created_after="2026-03-01T10:00:00Z") == ["t2", "t1"]
    assert await titles(queue, created_after="2026-03-01T12:00:00+02:00") == ["t2", "t1"]
    assert await titles(queue, created_after="2026-03-01T10:00:00") == ["t2", "t1"]
    naive = datetime(2026, 3, 1, 10, 0, 0, 1)
    assert await titles(queue, created_after=naive) == ["t2"]
    window = {"created_after": "2026-03-01T09:30Z", "created_before": "2026-03-01T11:00:00Z"}
    assert await titles(queue, **window) == ["t1"]
    assert await titles(queue, **window, state="pending", task_type="docs") == ["t1"]


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({"created_after": "yesterday"}, "created_after"),
        ({"created_before": "2026-13-01"}, "created_before"),
        ({"created_before": 1767225600}, "created_before"),
        ({"created_after": "2026-03-02", "created_before": "2026-03-01"}, "created_after"),
        ({"created_after": "2026-03-01T10:00Z", "created_before": "2026-03-01T11:00+01:00"},
         "created_after"),
    ],
)  # fmt: skip
async def test_list_refuses_a_bad_creation_time_naming_the_field(
    queue: AsyncQueue, filters: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        await queue.list(**filters)
    assert refused.value.fields == [field]


async def test_paging_with_the_new_filters_covers_every_match_exactly_once(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    start = clock.now()
    results = []
    for i in range(30):
        results.append(
            await queue.submit(
                title=f"t{i}",
                task_type="docs",
                assignee="alice" if i % 2 else "bob",
                labels=["x", "y"] if i % 3 else ["x"],
            )
        )
        clock.advance(1)
    after, before = start + timedelta(seconds=4), start + timedelta(seconds=25)
    expected = [
        r.task.id
        for r in reversed(results)
        if r.task.assignee == "alice"
        and "y" in r.task.labels
        and after <= r.task.created_at < before
    ]
    assert len(expected) == 7
    pages = await page_through(
        queue, 3, assignee="alice", label=["y", "x"], created_after=after, created_before=before
    )
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [t.id for page in pages for t in page] == expected


async def page_through(queue: AsyncQueue, limit: int, **filters: Any) -> list[list[Task]]:
    pages = []
    cursor = None
    while True:
        page = await queue.list(limit=limit, cursor=cursor, **filters)
        pages.append(page.items)
        if page.next_cursor is None:
            return pages
        assert len(pages) < 100, "paging does not end"
        cursor = page.next_cursor


@pytest.mark.parametrize(("total", "limit"), [(23, 5), (21, 7), (5, 5), (1, 50), (0, 10)])
async def test_paging_covers_every_task_exactly_once(
    queue: AsyncQueue, total: int, limit: int
) -> None:
    results = await queue.submit_many({"title": f"t{i}", "task_type": "docs"} for i in range(total))
    pages = await page_through(queue, limit)
    assert all(len(p) == limit for p in pages[:-1]) and len(pages[-1]) <= limit
    seen = [t.id for page in pages for t in page]
    assert len(seen) == len(set(seen)) == total
    assert seen == [r.task.id for r in reversed(results)]


async def test_paging_with_a_filter_covers_every_match_exactly_once(queue: AsyncQueue) -> None:
    results = await queue.submit_many(
        {"title": f"t{i}", "task_type": "docs" if i % 3 else "bugfix", "tenant": f"t{i % 2}"}
        for i in range(40)
    )
    expected = [
        r.task.id for r in reversed(results) if r.task.task_type == "docs" and r.task.tenant == "t1"
    ]
    pages = await page_through(queue, 4, task_type="docs", tenant="t1")
    assert [t.id for page in pages for t in page] == expected


async def test_tasks_submitted_while_paging_do_not_shift_later_pages(queue: AsyncQueue) -> None:
    first = await queue.submit_many({"title": f"old{i}", "task_type": "docs"} for i in range(10))
    page = await queue.list(limit=4)
    await queue.submit_many({"title": f"new{i}", "task_type": "docs"} for i in range(5))
    seen = [t.id for t in page.items]
    while page.next_cursor is not None:
        page = await queue.list(limit=4, cursor=page.next_cursor)
        seen.extend(t.id for t in page.items)
    assert seen == [r.task.id for r in reversed(first)]


async def test_get_returns_the_stored_task(queue: AsyncQueue) -> None:
    submitted = await queue.submit(
        title="Fix login",
        task_type="bugfix",
        payload={"issue": 12, "labels": ["bug", "ü"]},
        source="issue",
        source_id="octo/repo#12",
        assignee="coder-1",
        callback_url="https://example.com/hook",
    )
    task = await queue.get(submitted.task.id)
    assert task.id == submitted.task.id and task.seq > 0
    assert task.payload == {"issue": 12, "labels": ["bug", "ü"]}
    assert (task.source, task.source_id, task.assignee) == ("issue", "octo/repo#12", "coder-1")
    assert task.callback_url == "https://example.com/hook"
    assert task.timeout_secs == 120 and task.max_retries == 3 and task.priority == 5
    assert task.state is TaskState.PENDING and task.created_at == submitted.task.created_at
    assert await queue.get(str(task.id)) == task


async def test_get_of_an_unknown_id_raises_not_found(queue: AsyncQueue) -> None:
    with pytest.raises(NotFound):
        await queue.get(uuid.uuid4())
    with pytest.raises(NotFound):
        await queue.events(uuid.uuid4())


async def test_get_of_something_that_is_not_an_id_raises_invalid_input(
    queue: AsyncQueue,
) -> None:
    with pytest.raises(InvalidInput):
        await queue.get("not-a-uuid")


async def test_cancel_of_an_unknown_id_raises_not_found(queue: AsyncQueue) -> None:
    with pytest.raises(NotFound):
        await queue.cancel(uuid.uuid4())


async def test_stats_has_every_state_and_counts_them(queue: AsyncQueue) -> None:
    empty = await queue.stats()
    assert set(empty.by_state) == set(TaskState) and empty.total == 0
    await seeded(queue)
    stats = await queue.stats()
    assert set(stats.by_state) == set(TaskState)
    assert stats.by_state[TaskState.PENDING] == 4
    assert stats.by_state[TaskState.QUEUED] == 1
    assert stats.by_state[TaskState.CANCELLED] == 1
    assert sum(1 for n in stats.by_state.values() if n) == 3
    assert stats.total == 6
    assert stats.to_json()["by_state"]["pending"] == 4


async def test_events_are_the_tasks_history_in_order(queue: AsyncQueue) -> None:
    tasks = await seeded(queue)
    events = await queue.events(tasks["a-issue-bugfix"].id)
    assert [(e.seq, e.action, e.actor, e.to_state) for e in events] == [
        (1, "submit", "api", TaskState.PENDING),
        (2, "admit", "scheduler", TaskState.QUEUED),
    ]
    assert events[0].data == {"priority": 5, "task_type": "bugfix", "source": "issue"}
    assert events[0].tenant == "a" and events[0].hash != events[1].hash


# --- tenant scoping --------------------------------------------------------------------------


async def test_tenant_queue_sees_only_its_tenant(queue: AsyncQueue, open_queue: Any) -> None:
    tasks = await seeded(queue)
    async with open_queue(tenant="a") as qa:
        assert await titles(qa) == ["a-api-docs", "a-pr-review", "a-issue-bugfix"]
        assert await titles(qa, task_type="bugfix") == ["a-issue-bugfix"]
        assert await titles(qa, tenant="a", source="pr") == ["a-pr-review"]
        assert (await qa.get(tasks["a-pr-review"].id)).tenant == "a"
        stats = await qa.stats()
        assert stats.total == 3 and stats.by_state[TaskState.CANCELLED] == 0
        assert set(stats.by_state) == set(TaskState)
        for title in ("b-issue-bugfix", "b-cron-docs", "c-api-bugfix"):
            with pytest.raises(NotFound):
                await qa.get(tasks[title].id)
            with pytest.raises(NotFound):
                await qa.events(tasks[title].id)


async def test_tenant_queue_cannot_list_another_tenant(queue: AsyncQueue, open_queue: Any) -> None:
    await seeded(queue)
    async with open_queue(tenant="a") as qa:
        with pytest.raises(InvalidInput) as refused:
            await qa.list(tenant="b")
        assert refused.value.fields == ["tenant"]


@pytest.mark.parametrize("action", ["cancel", "review", "requeue", "archive"])
async def test_tenant_queue_cannot_act_on_another_tenants_task(
    queue: AsyncQueue, open_queue: Any, action: str
) -> None:
    tasks = await seeded(queue)
    target = tasks["b-cron-docs"]
    async with open_queue(tenant="a") as qa:
        with pytest.raises(NotFound):
            await getattr(qa, action)(target.id, reason="not yours")
    after = await queue.get(target.id)
    assert after.state is TaskState.PENDING and after.event_seq == 1


async def test_tenant_queue_can_cancel_its_own_task(queue: AsyncQueue, open_queue: Any) -> None:
    tasks = await seeded(queue)
    async with open_queue(tenant="a") as qa:
        cancelled = await qa.cancel(tasks["a-api-docs"].id, reason="done by hand")
    assert cancelled.state is TaskState.CANCELLED


async def test_tenant_queue_submits_into_its_tenant_and_not_another(
    queue: AsyncQueue, open_queue: Any
) -> None:
    async with open_queue(tenant="a") as qa:
        own = await qa.submit(title="mine", task_type="docs")
        assert own.task.tenant == "a"
        with pytest.raises(InvalidInput) as refused:
            await qa.submit(title="theirs", task_type="docs", tenant="b")
        assert refused.value.fields == ["tenant"]
        with pytest.raises(InvalidInput) as refused:
            await qa.submit_many(
                [
                    {"title": "ok", "task_type": "docs"},
                    {"title": "x", "task_type": "docs", "tenant": "b"},
                ]
            )
        assert refused.value.fields == ["tasks[1].tenant"]
    assert (await queue.stats()).total == 1
    assert await titles(queue, tenant="b") == []


async def test_tenant_queue_dedup_does_not_match_another_tenants_task(
    queue: AsyncQueue, open_queue: Any
) -> None:
    theirs = await queue.submit(
        title="x", task_type="docs", tenant="b", source="issue", source_id="o/r#1",
        idempotency_key="k",
    )  # fmt: skip
    async with open_queue(tenant="a") as qa:
        mine = await qa.submit(
            title="x", task_type="docs", source="issue", source_id="o/r#1", idempotency_key="k"
        )
    assert mine.created and mine.task.id != theirs.task.id and mine.task.tenant == "a"
