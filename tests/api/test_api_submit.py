"""Submitting over HTTP (R2, SPEC section 5): concurrent duplicates make one live task, and a
bulk submit with one bad item writes nothing and names the item's field."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from http_server import ApiServer

CLIENTS = 8
ROUNDS = 5


def _task(source_id: str, **more: Any) -> dict[str, Any]:
    return {"title": "fix the login bug", "task_type": "bugfix", "source": "issue",
            "source_id": source_id, **more}  # fmt: skip


async def _everything(http: httpx.AsyncClient) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 1000}
    while True:
        page = (await http.get("/v1/tasks", params=params)).json()
        items += page["items"]
        if page["next"] is None:
            return items
        params["cursor"] = page["next"]


async def test_concurrent_submits_of_one_source_id_make_one_live_task(server: ApiServer) -> None:
    """8 clients, each on its own connection, submit the same (source, source_id) at once:
    every answer carries the same task, exactly one says it was created, and one task with
    that source_id exists. Several rounds, since a race shows only sometimes."""
    secret = await server.token(f"dedup-{uuid.uuid4().hex[:6]}", "submitter", "dedup")
    clients = [server.async_client(secret) for _ in range(CLIENTS)]
    try:
        for round_ in range(ROUNDS):
            source_id = f"octo/repo#{uuid.uuid4().hex[:8]}"
            start = asyncio.Event()

            async def submit(
                http: httpx.AsyncClient, sid: str = source_id, go: asyncio.Event = start
            ) -> httpx.Response:
                await go.wait()
                return await http.post("/v1/tasks", json=_task(sid))

            pending = [asyncio.create_task(submit(http)) for http in clients]
            await asyncio.sleep(0.05)  # every client waits at the start line
            start.set()
            answers = await asyncio.gather(*pending)
            assert all(a.status_code in (200, 201) for a in answers), [a.text for a in answers]
            bodies = [a.json() for a in answers]
            assert len({b["id"] for b in bodies}) == 1, f"round {round_}: {bodies}"
            assert [b["created"] for b in bodies].count(True) == 1, f"round {round_}"
            assert sorted(a.status_code for a in answers) == [200] * (CLIENTS - 1) + [201]
            assert {b["matched_by"] for b in bodies if not b["created"]} == {"source"}
            same = [t for t in await _everything(clients[0]) if t["source_id"] == source_id]
            assert [t["id"] for t in same] == [bodies[0]["id"]]
    finally:
        for http in clients:
            await http.aclose()


@pytest.mark.parametrize(
    ("index", "bad", "field"),
    [
        (0, {"priority": "urgent"}, "tasks[0].priority"),
        (3, {"title": ""}, "tasks[3].title"),
        (4, {"depends_on": ["not-a-task-id"]}, "tasks[4].depends_on[0]"),
        (2, {"colour": "red"}, "tasks[2].colour"),
    ],
)
def test_a_bulk_submit_with_one_bad_item_writes_nothing(
    server: ApiServer, index: int, bad: dict[str, Any], field: str
) -> None:
    """Five tasks, one of them bad: 422 naming ``tasks[i].field``, and the counts and the task
    list are as they were."""
    with server.client(server.admin_secret) as http:
        stats = http.get("/v1/stats").json()
        listed = asyncio.run(_listed(server))
        batch = [_task(f"bulk#{uuid.uuid4().hex[:8]}") for _ in range(5)]
        batch[index] = {**batch[index], **bad}
        answer = http.post("/v1/tasks/bulk", json={"tasks": batch})
        assert answer.status_code == 422, answer.text
        assert http.get("/v1/stats").json() == stats
        assert asyncio.run(_listed(server)) == listed
        assert answer.headers["content-type"] == "application/problem+json"
        problem = answer.json()
        assert field in [e["field"] for e in problem["errors"]], problem
        assert field in problem["detail"]
        good = http.post("/v1/tasks/bulk", json={"tasks": [_task(f"ok#{uuid.uuid4().hex}")]})
        assert good.status_code == 200  # the same call with good items writes


async def _listed(server: ApiServer) -> list[str]:
    async with server.async_client(server.admin_secret) as http:
        return sorted(t["id"] for t in await _everything(http))


def test_a_bulk_submit_depending_on_a_missing_task_writes_nothing(server: ApiServer) -> None:
    """An item that depends on a task that does not exist fails the whole call (and names
    it); the others are not written either."""
    with server.client(server.admin_secret) as http:
        stats = http.get("/v1/stats").json()
        batch = [_task(f"dep#{uuid.uuid4().hex[:8]}") for _ in range(3)]
        batch[1]["depends_on"] = [str(uuid.uuid4())]
        answer = http.post("/v1/tasks/bulk", json={"tasks": batch})
        assert answer.status_code == 422, answer.text
        assert [e["field"] for e in answer.json()["errors"]] == ["tasks[1].depends_on"]
        assert http.get("/v1/stats").json() == stats
