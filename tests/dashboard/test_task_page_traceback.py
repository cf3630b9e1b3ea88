"""A handler that raises: its traceback, kept with the attempt by the worker, is on the task's
dashboard page in its own block (each backend; the app served in this process)."""

from __future__ import annotations

import asyncio
import html
import re
from typing import Any

import httpx

from agentqueue import AsyncQueue
from agentqueue.api.app import create_app
from agentqueue.dashboard.session import COOKIE


def lookup(payload: dict[str, Any]) -> Any:
    return payload["issue"]["number"]


async def _ended(queue: AsyncQueue, task_id: Any) -> None:
    for _ in range(1200):  # 60 s at most
        if (await queue.get(task_id)).state.value in ("dead_letter", "failed"):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the failing task did not end within 60 s")


async def test_a_raising_handlers_traceback_is_on_its_task_page(db_url: str) -> None:
    queue = AsyncQueue(db_url)

    @queue.handler("triage")
    async def triage(task: Any, ctx: Any) -> Any:
        return lookup(task.payload)

    try:
        task = (await queue.submit(title="t", task_type="triage", max_retries=0)).task
        stop = asyncio.Event()
        running = asyncio.create_task(queue.run_worker(concurrency=1, stop=stop))
        try:
            await _ended(queue, task.id)
        finally:
            stop.set()
            await running
        admin = await queue.create_token("ada", role="admin")
        app = create_app(queue)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://dash") as http:
                http.cookies.set(COOKIE, admin.secret)
                page = await http.get(f"/tasks/{task.id}")
        assert page.status_code == 200, page.text[:500]
        blocks = [
            html.unescape(b)
            for b in re.findall(
                r'<pre class="[^"]*traceback[^"]*"[^>]*>(.*?)</pre>', page.text, re.S
            )
        ]
        assert blocks, "no traceback block on the task page"
        assert "Traceback (most recent call last)" in blocks[0]
        assert 'return payload["issue"]["number"]' in blocks[0] and "KeyError: 'issue'" in blocks[0]
    finally:
        await queue.close()
