"""Over HTTP: the ``traceparent`` header of a submit is kept with the task, and a handler's
traceback is among the task's logs (``GET /v1/tasks/{id}/logs``), both backends."""

from __future__ import annotations

import asyncio
from typing import Any

from http_server import ApiServer

from agentqueue import AsyncQueue

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def test_traceparent_header_and_traceback_in_logs(
    client_server: ApiServer, driver: AsyncQueue
) -> None:
    secret = await client_server.token("trace-submitter", "admin")
    async with client_server.async_client(secret) as http:
        answer = await http.post(
            "/v1/tasks",
            json={"title": "t", "task_type": "trace_boom", "max_retries": 0},
            headers={"traceparent": TRACEPARENT},
        )
        assert answer.status_code == 201, answer.text
        task = answer.json()
        assert task["traceparent"] == TRACEPARENT
        bad = await http.post(
            "/v1/tasks", json={"title": "t", "task_type": "x"}, headers={"traceparent": "00-1"}
        )
        assert bad.status_code == 422 and "traceparent" in bad.text, bad.text

        @driver.handler("trace_boom")
        async def boom(t: Any, ctx: Any) -> None:
            {}["issue"]  # the KeyError is the point

        worker = driver.worker(concurrency=1, task_types=["trace_boom"])
        running = asyncio.create_task(worker.run())
        try:
            for _ in range(300):
                if (await driver.get(task["id"])).state.terminal:
                    break
                await asyncio.sleep(0.1)
        finally:
            worker.stop()
            await running
        logs = (await http.get(f"/v1/tasks/{task['id']}/logs")).json()
    records = logs["items"] if isinstance(logs, dict) else logs
    traces = [r for r in records if r["stream"] == "traceback"]
    assert len(traces) == 1 and traces[0]["attempt"] == 1
    assert '{}["issue"]' in traces[0]["text"] and "KeyError: 'issue'" in traces[0]["text"]
