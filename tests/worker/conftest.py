"""Real worker processes against each backend."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from worker_helpers import FAST_CONFIG

from agentqueue import AsyncQueue

HERE = Path(__file__).parent
AGENTQUEUE = Path(sys.executable).with_name("agentqueue")


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    """A config with short leases and fast retries, so crash recovery happens in seconds."""
    path = tmp_path / "agentqueue.toml"
    path.write_text(FAST_CONFIG)
    return path


@pytest.fixture
def record_file(tmp_path: Path) -> Path:
    """Where the test handlers write one line per execution."""
    return tmp_path / "executions.log"


class WorkerProcess:
    """``agentqueue worker`` as a child process."""

    def __init__(self, proc: subprocess.Popen[str], log: Path) -> None:
        self.proc = proc
        self.log = log

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout=timeout)

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


@pytest.fixture
def start_worker(
    db_url: str, config_file: Path, record_file: Path, tmp_path: Path
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start real worker processes; any still running at the end are killed."""
    started: list[WorkerProcess] = []

    def start(*args: str, config: Path | None = None, **env: str) -> WorkerProcess:
        log = tmp_path / f"worker-{len(started)}.log"
        environ = {
            **os.environ,
            "AGENTQUEUE_DB": db_url,
            "AQ_TEST_RECORD": str(record_file),
            "AGENTQUEUE_LOG_LEVEL": "INFO",
            **env,
        }
        environ.pop("AGENTQUEUE_CONFIG", None)
        with log.open("w") as out:
            proc = subprocess.Popen(
                [str(AGENTQUEUE), "--db", db_url, "--config", str(config or config_file),
                 "worker", "--app", "worker_app:queue", *args],
                cwd=HERE, env=environ, stdout=out, stderr=subprocess.STDOUT, text=True,
                start_new_session=True,  # a group of its own, as a service manager starts it
            )  # fmt: skip
        worker = WorkerProcess(proc, log)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait()


@pytest.fixture
async def live_queue(db_url: str, config_file: Path) -> AsyncIterator[AsyncQueue]:
    """An AsyncQueue on the wall clock, with the same settings as the workers."""
    q = AsyncQueue(db_url, config=config_file)
    await q.open()
    yield q
    await q.close()


__all__ = ["WorkerProcess"]
