"""An example command agent: reads its task as JSON on stdin, prints progress to stderr, and
prints its result as JSON on the last line of stdout. Exit 0 completes the task, exit 75 asks
for a retry, any other code fails it."""

import json
import sys

task = json.load(sys.stdin)
text = task["payload"].get("text", "")
print(f"counting words of task {task['id']} for tenant {task['tenant']}", file=sys.stderr)
if task["payload"].get("flaky") and task["retry_count"] == 0:
    print("the upstream service is busy; try again", file=sys.stderr)
    sys.exit(75)
print(json.dumps({"words": len(text.split()), "title": task["title"]}))
