"""Deliverers as real processes, on each backend: a worker and a second deliverer at once never
send one delivery twice at the same moment; a deliverer SIGKILLed mid-send and started again
loses nothing; a deliverer killed while GitHub holds its POST (the comment already stored) is
followed by one that finds the marker and posts nothing more. Waits are generous bounds on
events, never timings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from delivery_receivers import (
    SECRET,
    SECRET_ENV,
    TOKEN,
    TOKEN_ENV,
    FakeGitHub,
    Receiver,
    wait_for,
)

from agentqueue import Queue
from agentqueue.config import load_settings
from agentqueue.domain.deliveries import CALLBACK_KIND, GITHUB_REPLY_KIND

HERE = Path(__file__).parent
AGENTQUEUE = str(Path(sys.executable).with_name("agentqueue"))
CONFIG = """
[callbacks]
secret_env = "{secret_env}"
allow_private = true
timeout_secs = 2
backoff_first_secs = 0.1
backoff_max_secs = 0.5

[github]
api_url = "{api_url}"
token_env = "{token_env}"
timeout_secs = 4
backoff_first_secs = 0.1
backoff_max_secs = 0.5

[scheduler]
tick_secs = 0.5

[worker]
poll_secs = 0.5
"""


class Procs:
    """The ``agentqueue`` processes of one test; any left running are stopped."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.folder = folder
        self.env = env
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with (self.folder / f"{name}.log").open("wb") as out:
            proc = subprocess.Popen(
                [AGENTQUEUE, *args], cwd=HERE, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        self.procs.append((name, proc))
        return proc

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        for _, proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for _, proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    fake = FakeGitHub()
    yield fake
    fake.close()


@pytest.fixture
def setup(
    db_url: str, tmp_path: Path, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Queue, Procs]]:
    config = tmp_path / "agentqueue.toml"
    config.write_text(
        CONFIG.format(secret_env=SECRET_ENV, token_env=TOKEN_ENV, api_url=github.api_url)
    )
    monkeypatch.setenv(SECRET_ENV, SECRET)
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    env = {**os.environ, "AGENTQUEUE_DB": db_url, "AGENTQUEUE_CONFIG": str(config),
           "AGENTQUEUE_LOG_LEVEL": "INFO"}  # fmt: skip
    procs = Procs(tmp_path, env)
    queue = Queue(db_url, settings=load_settings(config))
    try:
        yield queue, procs
    finally:
        procs.stop()
        queue.close()


def ended(queue: Queue, n: int, **fields: object) -> None:
    """``n`` tasks submitted, claimed and completed here (their deliveries stored)."""
    for i in range(n):
        extra = {k: (v.format(i=i + 1) if isinstance(v, str) else v) for k, v in fields.items()}
        queue.submit(title=f"task {i}", task_type="docs", **extra)
        [task] = queue.claim(1, "test")
        queue.complete(task.id, task.lock_token, {"n": i})


def recorded(queue: Queue, kind: str, n: int) -> bool:
    return len(queue.deliveries(kind=kind, state="delivered", limit=500)) == n


def test_a_worker_and_a_second_deliverer_never_send_one_delivery_at_once(
    setup: tuple[Queue, Procs], receiver: Receiver
) -> None:
    queue, procs = setup
    receiver.hold_secs = 0.2
    receiver.fail_first = 2  # three tries each, by whichever deliverer leases it
    procs.spawn("worker", "worker", "--app", "delivery_app:queue", "--concurrency", "8")
    procs.spawn("deliverer", "scheduler", "--id", "second")
    for _ in range(15):
        queue.submit(title="hook", task_type="callback-test", callback_url=receiver.url())
    wait_for(lambda: len(receiver.delivered_ids()) == 15, 120, "15 callbacks delivered")
    wait_for(lambda: recorded(queue, CALLBACK_KIND, 15), 60, "15 deliveries recorded")
    assert receiver.overlaps == []
    assert set(receiver.successes().values()) == {1}
    assert all(a.verified for a in receiver.arrivals)
    assert "agentqueue-deliver" not in procs.log("worker")  # no loop died


def test_a_deliverer_killed_mid_send_and_started_again_loses_nothing(
    setup: tuple[Queue, Procs], receiver: Receiver
) -> None:
    queue, procs = setup
    receiver.hold_secs, receiver.hold_count = 30.0, 3  # the first three hang
    ended(queue, 10, callback_url=receiver.url())
    first = procs.spawn("deliverer1", "scheduler", "--id", "d1")
    wait_for(lambda: receiver.in_flight() >= 3, 60, "the first deliverer sending")
    first.send_signal(signal.SIGKILL)
    first.wait()
    procs.spawn("deliverer2", "scheduler", "--id", "d2")
    wait_for(lambda: len(receiver.delivered_ids()) == 10, 120, "every callback delivered")
    wait_for(lambda: recorded(queue, CALLBACK_KIND, 10), 60, "every delivery recorded")
    # (The receiver still holds the killed deliverer's hung requests open: overlaps with them
    # are not two live senders, so they are not checked here.)


def test_a_deliverer_killed_while_github_holds_its_post_never_posts_twice(
    setup: tuple[Queue, Procs], github: FakeGitHub
) -> None:
    queue, procs = setup
    github.hold_posts = 1
    ended(queue, 3, source="issue", source_id="octo/hello#{i}")
    first = procs.spawn("deliverer1", "scheduler", "--id", "d1")
    wait_for(lambda: github.held == 1, 60, "a POST stored and held open")
    first.send_signal(signal.SIGKILL)
    first.wait()
    procs.spawn("deliverer2", "scheduler", "--id", "d2")
    wait_for(lambda: recorded(queue, GITHUB_REPLY_KIND, 3), 120, "every reply recorded")
    for n in (1, 2, 3):
        assert len(github.all_comments(f"octo/hello#{n}")) == 1
    assert github.posts() == 3


def test_a_worker_until_idle_delivers_before_it_exits(
    setup: tuple[Queue, Procs], receiver: Receiver
) -> None:
    queue, procs = setup
    for _ in range(5):
        queue.submit(title="hook", task_type="callback-test", callback_url=receiver.url())
    worker = procs.spawn(
        "worker", "worker", "--until-idle", "--no-scheduler", "--app", "delivery_app:queue"
    )
    worker.wait(timeout=120)
    assert worker.returncode == 0, procs.log("worker")
    # Checked at once, not waited for: the exiting worker sent them.
    assert len(receiver.delivered_ids()) == 5
    assert recorded(queue, CALLBACK_KIND, 5)


def test_a_stopping_deliverer_releases_what_it_holds(
    setup: tuple[Queue, Procs], receiver: Receiver
) -> None:
    """SIGTERM while a callback hangs: the delivery is handed back, due at once (the next
    deliverer need not wait for the lease to lapse)."""
    queue, procs = setup
    receiver.hold_secs, receiver.hold_count = 30.0, 1
    ended(queue, 1, callback_url=receiver.url())
    first = procs.spawn("deliverer1", "scheduler", "--id", "d1")
    wait_for(lambda: receiver.in_flight() >= 1, 60, "the deliverer sending")
    [row] = queue.deliveries()
    assert row.leased and row.next_attempt_at > datetime.now(UTC)
    first.terminate()
    first.wait(timeout=60)
    [row] = queue.deliveries()
    assert not row.leased and row.next_attempt_at <= datetime.now(UTC)
    assert row.attempts == 0  # released, not counted as a try
