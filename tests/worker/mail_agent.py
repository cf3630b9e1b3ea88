"""A command agent for the pipeline hook tests (mail replies, a kind with its own hooks),
driven by its task's payload.

payload keys (all optional): "record": file to append "<task id> run" to at each start;
"reply": print a {"reply": {...}} line (the mail's answer) first; "hang": then sleep until the
attempt's timeout stops it; "claim_reply_to": end with {"reply_to": <this mail's id>};
"claim_reply_id": end with {"reply_id": <that id>}; "claim_reply_id_file": wait for that file
and claim the id it holds; "result": end with that JSON value. Otherwise it ends with {}.
"""

import json
import os
import sys
import time

task = json.load(sys.stdin)
p = task["payload"]
if p.get("record"):
    with open(p["record"], "a") as out:
        out.write(f"{task['id']} run\n")
if p.get("reply"):
    print(json.dumps({"reply": {"payload": {"text": f"answer to {task['title']}"}}}), flush=True)
if p.get("hang"):
    time.sleep(600)
if p.get("claim_reply_to"):
    print(json.dumps({"reply_to": task["id"]}))
elif p.get("claim_reply_id"):
    print(json.dumps({"reply_id": p["claim_reply_id"]}))
elif p.get("claim_reply_id_file"):
    path = p["claim_reply_id_file"]
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    with open(path) as f:
        print(json.dumps({"reply_id": f.read().strip()}))
elif "result" in p:
    print(json.dumps(p["result"]))
else:
    print("{}")
