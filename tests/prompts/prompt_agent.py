"""A command agent for the prompt tests: it answers with the prompt it was given, as the file
AGENTQUEUE_PROMPT names and as ``prompt`` in its task JSON on stdin. With ``envelope`` in its
payload, it answers that object instead (a result naming the task's own fields)."""

import json
import os
import sys

task = json.loads(sys.stdin.read())
envelope = (task.get("payload") or {}).get("envelope")
if envelope is not None:
    print(json.dumps(envelope))
    sys.exit(0)
path = os.environ.get("AGENTQUEUE_PROMPT")
with open(path, encoding="utf-8") as f:
    from_file = f.read()
print(
    json.dumps(
        {
            "prompt_file": from_file,
            "prompt_json": task.get("prompt"),
            "in_workdir": os.path.dirname(path) == os.environ["AGENTQUEUE_WORKDIR"],
        }
    )
)
