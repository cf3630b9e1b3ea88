"""A stand-in worker process for the executor tests: runs one CommandAgent attempt.

Run as ``python host.py CONFIG_JSON`` where CONFIG_JSON has ``settings`` (AgentSettings fields),
``workdir_root`` and ``deadline_secs``. Prints one JSON line: the attempt's end, result, error,
the sizes of its logs, and this process's peak memory before and after the attempt.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

from agentqueue.config import AgentSettings
from agentqueue.domain.models import Task
from agentqueue.domain.states import TaskState
from agentqueue.executors.base import AttemptControl
from agentqueue.executors.isolation import resolve
from agentqueue.executors.subprocess import CommandAgent


def _task() -> Task:
    now = datetime.now(UTC)
    return Task(
        id=uuid4(),
        tenant="default",
        source="api",
        source_id=None,
        title="host",
        task_type="bugfix",
        payload={},
        priority=5,
        state=TaskState.EXECUTING,
        max_retries=3,
        retry_count=0,
        timeout_secs=60,
        created_at=now,
        updated_at=now,
        eligible_at=now,
        requested_by="test",
    )


async def _main(config: dict[str, object]) -> None:
    settings = AgentSettings.model_validate(config["settings"])
    # Unsandboxed agents run as this process's user: they write the test's files.
    confinement = resolve("host-agent", settings, user=None)[0]
    agent = CommandAgent(
        "host-agent", settings, Path(str(config["workdir_root"])), confinement=confinement
    )
    before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    control = AttemptControl(deadline=time.monotonic() + float(str(config["deadline_secs"])))
    result = await agent.run(_task(), control)
    after_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report = {
        "end": result.end.value,
        "result": result.result,
        "error": result.error,
        "logs": {c.stream: [len(c.text.encode()), c.truncated] for c in result.logs},
        "maxrss_before_kb": before_kb,
        "maxrss_after_kb": after_kb,
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    asyncio.run(_main(json.loads(sys.argv[1])))
