"""A deliverer process through a PostgreSQL stop: it says so once, keeps going, and sends a
callback stored after the server is back; a callback that failed before the stop is retried
after it. The server is a private instance of this module's own (never the shared one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from delivery_receivers import SECRET, SECRET_ENV, Receiver, wait_for

from agentqueue import Queue
from agentqueue.config import load_settings
from agentqueue.domain.deliveries import CALLBACK_KIND
from pg_instance import PgInstance

AGENTQUEUE = str(Path(sys.executable).with_name("agentqueue"))
CONFIG = f"""
[callbacks]
secret_env = "{SECRET_ENV}"
allow_private = true
timeout_secs = 2
backoff_first_secs = 3
backoff_max_secs = 3
"""


def _ended(queue: Queue, url: str) -> None:
    queue.submit(title="hook", task_type="docs", callback_url=url)
    [task] = queue.claim(1, "test")
    queue.complete(task.id, task.lock_token, "done")


def test_the_deliverer_survives_the_database_going_away(
    pg: PgInstance, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = pg.create_database("aq_delivery_outage")
    config = tmp_path / "agentqueue.toml"
    config.write_text(CONFIG)
    monkeypatch.setenv(SECRET_ENV, SECRET)
    receiver = Receiver(fail_first=1)  # each callback's first try fails: a retry is due later
    log = tmp_path / "deliverer.log"
    env = {**os.environ, "AGENTQUEUE_DB": url, "AGENTQUEUE_CONFIG": str(config),
           "AGENTQUEUE_LOG_LEVEL": "INFO"}  # fmt: skip
    queue = Queue(url, settings=load_settings(config))
    proc = None
    try:
        _ended(queue, receiver.url())
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [AGENTQUEUE, "scheduler", "--id", "deliverer"], env=env, stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        wait_for(lambda: receiver.requests() >= 1, 60, "the first try (which fails)")
        queue.close()
        pg.stop()
        wait_for(lambda: "; deliveries again in" in log.read_text(), 60, "the deliverer meeting it")
        pg.start()
        queue = Queue(url, settings=load_settings(config))
        wait_for(lambda: len(receiver.delivered_ids()) == 1, 60, "the retry after the outage")
        _ended(queue, receiver.url("/second"))
        wait_for(lambda: len(receiver.delivered_ids()) == 2, 60, "a callback stored after it")
        wait_for(
            lambda: len(queue.deliveries(kind=CALLBACK_KIND, state="delivered")) == 2,
            60,
            "both recorded",
        )
        assert proc.poll() is None, log.read_text()
        text = log.read_text()
        assert "Traceback" not in text and "died" not in text
        assert text.count("database unavailable") <= 10
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)
        queue.close()
        receiver.close()
        if not pg.running():
            pg.start()
