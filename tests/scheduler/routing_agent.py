"""A command agent for the routing tests: it records which agent ran which task, and when.

The configuration passes the agent's name as the only argument
(``command = [python, "routing_agent.py", "zhouyu"]``), so a test can tell the agents apart
although they all run this script. For each run it appends

- ``<task id> <agent name> start|end <unix time>`` to the file named by ``payload["record"]``;
- one JSON line to that file's name plus ``.seen``: the task id, the agent name, the
  ``AGENTQUEUE_IDEMPOTENCY_KEY`` environment variable (null when unset) and the task JSON's
  ``idempotency_key``, ``kind``, ``assignee`` and ``agent`` fields;

and sleeps ``payload["sleep"]`` seconds (0.05 by default) between start and end.
"""

import json
import os
import sys
import time

NAME = sys.argv[1]
task = json.load(sys.stdin)
payload = task["payload"]
record_file = str(payload["record"])


def record(what: str) -> None:
    """Append one start or end line for this run."""
    with open(record_file, "a", encoding="utf-8") as out:
        out.write(f"{task['id']} {NAME} {what} {time.time():.6f}\n")


record("start")
seen = {
    "id": task["id"],
    "agent_name": NAME,
    "env_idempotency_key": os.environ.get("AGENTQUEUE_IDEMPOTENCY_KEY"),
    "idempotency_key": task.get("idempotency_key"),
    "kind": task.get("kind"),
    "assignee": task.get("assignee"),
    "agent": task.get("agent"),
}
with open(record_file + ".seen", "a", encoding="utf-8") as out:
    out.write(json.dumps(seen, ensure_ascii=False) + "\n")
time.sleep(float(payload.get("sleep", 0.05)))
record("end")
print(json.dumps({"ran_on": NAME}))
