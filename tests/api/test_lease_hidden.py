"""The API never shows a lease's lock_token: it is the capability of the worker holding the
task (with it, an outcome could be written for the task), not something a reader needs."""

from __future__ import annotations

import httpx
from client_helpers import claim, unique
from http_server import ApiServer

from agentqueue import AsyncQueue


async def test_an_executing_task_is_shown_without_its_lock_token(
    client_server: ApiServer, driver: AsyncQueue
) -> None:
    """A task a worker holds is executing with a lease, yet get, list and the admin's view
    of it all show lock_token null."""
    kind = unique("held")
    made = await driver.submit(title="held", task_type=kind)
    claimed = await claim(driver, kind)
    assert claimed.lock_token is not None
    headers = {"Authorization": f"Bearer {client_server.admin_secret}"}
    async with httpx.AsyncClient(base_url=client_server.url, headers=headers, timeout=30) as http:
        one = (await http.get(f"/v1/tasks/{made.task.id}")).json()
        listed = (await http.get("/v1/tasks", params={"task_type": kind})).json()["items"]
    assert one["state"] == "executing" and one["locked_at"] is not None
    assert one["lock_token"] is None
    assert [t["lock_token"] for t in listed] == [None]
    assert str(claimed.lock_token) not in str(one) + str(listed)
