"""What the dashboard's browser tests share: a real ``agentqueue api`` server per database kind
with a worker process beside it (``serve --no-api``, two command agents: one that succeeds, one
that always asks for a retry, so its tasks dead-letter), some realistic tasks, and one Chromium
(Debian's ``/usr/bin/chromium``, driven by Playwright) per module.

The browser tests are never skipped: without ``/usr/bin/chromium`` they fail saying how to
install it (``.ci/run`` does).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "api"))

from http_server import (
    AGENTQUEUE,
    HOLD_PATTERN,
    ApiServer,
    clean_env,
    running_server,
)
from playwright.sync_api import Browser, Page, sync_playwright

from agentqueue.domain.models import LogRecord

CHROMIUM = "/usr/bin/chromium"
WAIT_SECS = 90.0
"""The most a test waits for the worker to move a task (a generous bound, never a claim)."""

DONE_TYPE, DEAD_TYPE = "dash-work", "dash-flaky"

DOER = [
    "sh",
    "-c",
    "echo 'applied the patch: 3 files changed'; sleep 0.3; echo '{\"files_changed\": 3}'",
]
"""A command agent that prints a line of output, then its result as JSON."""

WORKER_CONFIG = f"""
[queue]
lease_ttl_secs = 30

[agents.doer]
command = {json.dumps(DOER)}
task_types = ["{DONE_TYPE}"]
max_concurrent = 3

[agents.flaky]
command = ["sh", "-c", "echo 'connection reset by peer' >&2; exit 75"]
task_types = ["{DEAD_TYPE}"]
max_concurrent = 2
"""

KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@dataclass
class Site:
    """A running server with a worker, its tokens, and what the fixture put in it."""

    server: ApiServer
    operator: str
    submitter: str
    source_ids: list[str]
    screens: Path

    @property
    def url(self) -> str:
        """The dashboard's base URL."""
        return self.server.url

    def api(self, method: str, path: str, **kw: Any) -> Any:
        """Call the API as the admin; the JSON answer."""
        with self.server.client(self.server.admin_secret) as http:
            answer = http.request(method, path, **kw)
        assert answer.status_code < 300, answer.text
        return answer.json()

    def submit(self, **task: Any) -> dict[str, Any]:
        """Submit one task as the admin."""
        found: dict[str, Any] = self.api("POST", "/v1/tasks", json=task)
        return found

    def task(self, task_id: str) -> dict[str, Any]:
        """The task as the API shows it now."""
        found: dict[str, Any] = self.api("GET", f"/v1/tasks/{task_id}")
        return found

    def wait_for(self, task_id: str, states: set[str]) -> dict[str, Any]:
        """Wait (at most WAIT_SECS) for the task to reach one of ``states``."""
        deadline = time.monotonic() + WAIT_SECS
        while True:
            found = self.task(task_id)
            if found["state"] in states:
                return found
            assert time.monotonic() < deadline, f"task stayed {found['state']}, not {states}"
            time.sleep(0.2)


def add_log(site: Site, task: dict[str, Any], stream: str, text: str) -> None:
    """Store one log row for ``task``'s latest attempt, as a worker would."""

    async def write() -> None:
        async with site.server.queue() as queue:
            rt = await queue.runtime()
            record = LogRecord(
                UUID(task["id"]), task["tenant"], max(1, task["retry_count"] + 1), stream,
                rt.clock.now(), text,
            )  # fmt: skip
            async with rt.store.transaction() as tx:
                await tx.insert_logs([record])

    # Playwright's sync API runs an event loop in this thread: write from another one.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, write()).result()


def _populate(site: Site) -> None:
    """Realistic work: issue tasks of a few types, one chain of dependencies, and flaky ones
    that dead-letter."""
    first = None
    for i in range(12):
        source_id = f"octo/shop#{100 + i}"
        made = site.submit(
            title=f"Fix checkout bug {100 + i}",
            task_type=DONE_TYPE,
            source="issue",
            source_id=source_id,
            priority=1 + i % 9,
            tenant="acme" if i % 3 else "globex",
            depends_on=[first] if first and i in (5, 7) else [],
        )
        if i == 1:
            first = made["id"]
        site.source_ids.append(source_id)
    for i in range(2):
        site.submit(title=f"Sync inventory {i}", task_type=DEAD_TYPE, max_retries=0, tenant="acme")


@pytest.fixture(scope="module", params=KINDS)
def site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    """A server and a worker on a fresh database of each kind, with tasks in it."""
    kind = request.param
    directory = tmp_path_factory.mktemp(f"dash-{kind}")
    settings = {"requests_per_minute": 0, "token_cache_secs": 1}
    with running_server(kind, directory, settings, WORKER_CONFIG) as server:
        log = (directory / "worker.log").open("wb")
        worker = subprocess.Popen(
            [
                *(AGENTQUEUE, "--db", server.db_url, "--config", str(server.config_path)),
                *("serve", "--no-api", "--concurrency", "4", "--id", f"worker-{kind}"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=clean_env(PYTHONUNBUFFERED="1"),
            cwd=directory,
        )
        try:
            site = Site(
                server,
                operator=server.api_token("operator", "acme", name="olivia"),
                submitter=server.api_token("submitter", "acme", name="sam"),
                source_ids=[],
                screens=tmp_path_factory.mktemp(f"screens-{kind}"),
            )
            _populate(site)
            yield site
        finally:
            worker.terminate()
            try:
                worker.wait(20)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(10)
            log.close()
        assert server.alive(), server.log()[-3000:]
        assert "Traceback" not in server.log(), server.log()[-3000:]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless, one per module."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"{CHROMIUM} is missing: the dashboard's browser tests need Debian's Chromium "
            "(apt-get install -y chromium; .ci/run installs it)"
        )
    with sync_playwright() as pw:
        found = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield found
        found.close()


def login(browser: Browser, site: Site, secret: str, **options: Any) -> Page:
    """A page of a fresh browser context logged in with ``secret`` through the login form."""
    context = browser.new_context(viewport={"width": 1360, "height": 900}, **options)
    page = context.new_page()
    page.goto(site.url + "/")
    assert "/login" in page.url
    page.fill("#token", secret)
    page.click("button[type=submit]")
    page.wait_for_url(site.url + "/")
    return page


@pytest.fixture(scope="module")
def admin_page(browser: Browser, site: Site) -> Iterator[Page]:
    """A page logged in as the admin, reused by the module's tests."""
    page = login(browser, site, site.server.admin_secret)
    yield page
    page.context.close()


def screenshot(site: Site, page: Page, name: str) -> Path:
    """Write a full-page screenshot under the test's directory; with AGENTQUEUE_SCREENSHOTS
    set to a directory, the overview and the task page are also copied there (from the
    PostgreSQL run) as dashboard-NAME.png."""
    path = site.screens / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    target = os.environ.get("AGENTQUEUE_SCREENSHOTS")
    if target and name in ("overview", "task") and site.server.kind == "postgres":
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / f"dashboard-{name}.png")
    return path


def until(check: Callable[[], bool], what: str) -> None:
    """Wait (at most WAIT_SECS) for ``check`` to hold."""
    deadline = time.monotonic() + WAIT_SECS
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.2)


__all__ = ["HOLD_PATTERN", "httpx"]
