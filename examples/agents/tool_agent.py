"""An example resumable command agent: one search per attempt, then its result.

Each attempt reads its progress from the checkpoint file and the tool calls made so far, with
their results, from the tool results file; does the next step; prints a checkpoint line; and asks
for the next tool call, then exits 0. The task waits for the tool without holding a slot, and the
next attempt resumes from the checkpoint. The last step prints the result instead.
"""

import json
import os
import sys

QUERIES = ["login bug", "session timeout", "password reset"]

with open(os.environ["AGENTQUEUE_CHECKPOINT"]) as f:
    step = (json.load(f) or {"step": 0})["step"]
with open(os.environ["AGENTQUEUE_TOOL_RESULTS"]) as f:
    found = [call["result"] for call in json.load(f).values() if call["state"] == "done"]
if step == len(QUERIES):
    print(json.dumps({"found": found}))
    sys.exit(0)
print(f"step {step + 1}: searching for {QUERIES[step]!r}", file=sys.stderr)
print(json.dumps({"checkpoint": {"step": step + 1}}), flush=True)
call = {"name": "search", "args": {"q": QUERIES[step]}, "timeout_secs": 300}
print(json.dumps({"tool_call": call}))
