"""A command agent for the worker end-to-end tests, driven by its task's payload.

payload keys (all optional): "pids": file to append "agent PID" to; "grandchild": file to append
"grandchild PID" to, from a forked child that ignores SIGTERM and sleeps; "ignore_term": ignore
SIGTERM; "sleep": seconds; "flood": bytes of output before the last line; "garbage": end with a
line that is not JSON; "bad_result_file": write an invalid result.json; "exit": exit code.
Otherwise it prints {"task_id", "task_tenant", "payload"} as its result.
"""

import json
import os
import signal
import sys
import time


def append(path: str, line: str) -> None:
    with open(path, "a") as out:
        out.write(line + "\n")


task = json.load(sys.stdin)
p = task["payload"]
if p.get("ignore_term"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if p.get("pids"):
    append(p["pids"], f"agent {os.getpid()}")
if p.get("grandchild") and os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    append(p["grandchild"], f"grandchild {os.getpid()}")
    time.sleep(120)
    os._exit(0)
if p.get("sleep"):
    time.sleep(float(p["sleep"]))
if p.get("flood"):
    line = "x" * 1023 + "\n"
    for _ in range(int(p["flood"]) // 1024):
        sys.stdout.write(line)
if p.get("bad_result_file"):
    with open(os.environ["AGENTQUEUE_RESULT_FILE"], "w") as out:
        out.write("{not json")
if p.get("garbage"):
    print("all done, no JSON here")
    sys.exit(0)
if "exit" in p:
    sys.exit(int(p["exit"]))
print(json.dumps({"task_id": task["id"], "task_tenant": task["tenant"], "payload": p}))
