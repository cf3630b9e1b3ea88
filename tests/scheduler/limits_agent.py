"""A command agent for the limits test: it records when it runs, sleeps, and fails with the
retryable exit code 75 on the first attempt of a task whose payload says "flaky"."""

import json
import os
import sys
import time

task = json.load(sys.stdin)
payload = task["payload"]


def record(what: str) -> None:
    with open(payload["record"], "a") as out:
        out.write(f"{task['id']} {task['task_type']} {what} {time.time():.6f}\n")


record("start")
time.sleep(float(payload.get("sleep", 0.25)))
record("end")
if payload.get("flaky") and task["retry_count"] == 0:
    sys.exit(75)
print(json.dumps({"pid": os.getpid()}))
