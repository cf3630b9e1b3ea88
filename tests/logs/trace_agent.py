"""A command agent that answers with the TRACEPARENT it was given."""

import json
import os

print(json.dumps({"env_traceparent": os.environ.get("TRACEPARENT")}))
