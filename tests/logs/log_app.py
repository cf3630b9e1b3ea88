"""A worker app for the log tests: one handler that fails (logging secrets on the way), one that
completes."""

import logging
import os

from agentqueue import AsyncQueue

queue = AsyncQueue(os.environ["AQ_TEST_APP_DB"])
SECRET = os.environ["AQ_TEST_SERVICE_TOKEN"]
log = logging.getLogger("log_app")


def lookup(payload):
    return payload["issue"]


@queue.handler("boom")
def boom(task, ctx):
    log.warning("calling the service with %s", SECRET, extra={"note": f"key {SECRET}"})
    try:
        lookup(task.payload)
    except KeyError as exc:
        where = "https://bot:hidden-pw-42@api.test/"
        raise RuntimeError(f"service refused {SECRET} at {where}") from exc


@queue.handler("fine")
async def fine(task, ctx):
    return {"ok": True}
