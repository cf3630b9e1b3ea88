"""Mail threads through a real server (R25): ``GET /v1/tasks/{id}/thread`` and ``agentqueue
--api URL show ID`` list a mail and its replies; a reply from someone who was not the mail's
recipient is refused naming the field."""

from __future__ import annotations

import json

from http_server import ApiServer
from test_cli_api import aq

from agentqueue import AsyncQueue


async def test_a_thread_through_the_server(client_server: ApiServer) -> None:
    async with AsyncQueue(client_server.db_url) as q:
        first = await q.submit(
            title="Which index?", task_type="mail", source="mail", assignee="bob",
            requested_by="alice",
        )  # fmt: skip
        reply = await q.submit(
            title="Re: Which index?", task_type="mail", source="mail", assignee="alice",
            requested_by="bob", in_reply_to=str(first.task.id),
        )  # fmt: skip
    ids = [str(first.task.id), str(reply.task.id)]

    with client_server.client(client_server.admin_secret) as http:
        answer = http.get(f"/v1/tasks/{ids[1]}/thread")
        assert answer.status_code == 200, answer.text
        items = answer.json()["items"]
        assert [t["id"] for t in items] == ids
        assert [t["in_reply_to"] for t in items] == [None, ids[0]]
        # Through the API a submit comes from the token's name: not the recipient.
        refused = http.post(
            "/v1/tasks",
            json={
                "title": "Re", "task_type": "mail", "source": "mail", "assignee": "alice",
                "in_reply_to": ids[0],
            },
        )  # fmt: skip
        assert refused.status_code == 422, refused.text
        assert "requested_by" in refused.text and "recipient 'bob'" in refused.text

    shown = aq(client_server, "show", ids[0])
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    at = lines.index("thread")
    assert lines[at + 1].split()[:5] == ["*", ids[0], "alice", "->", "bob"]
    assert lines[at + 2].split()[:4] == [ids[1], "bob", "->", "alice"]
    as_json = json.loads(aq(client_server, "show", ids[1], "--json").stdout)
    assert [t["id"] for t in as_json["thread"]] == ids and as_json["in_reply_to"] == ids[0]
