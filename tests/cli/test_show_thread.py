"""``agentqueue submit --in-reply-to`` and ``agentqueue show`` on a mail thread, on both
backends: the reply comes from the recipient, a bad one is refused naming the field, and
``show`` lists the thread (text and ``--json``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

AGENTQUEUE = str(Path(sys.executable).with_name("agentqueue"))


def aq(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQUEUE_")}
    return subprocess.run(
        [AGENTQUEUE, "--db", db_url, *args],
        capture_output=True, text=True, timeout=60, env=environ, check=False,
    )  # fmt: skip


def mail(db_url: str, sender: str, to: str, *more: str) -> subprocess.CompletedProcess[str]:
    return aq(
        db_url, "--actor", sender, "submit", "--source", "mail", "--type", "mail",
        "--assignee", to, "--title", "Which index?", *more,
    )  # fmt: skip


def test_a_thread_from_the_command_line(db_url: str) -> None:
    sent = mail(db_url, "alice", "bob")
    assert sent.returncode == 0, sent.stderr
    first = sent.stdout.split()[1]
    answered = mail(db_url, "bob", "alice", "--in-reply-to", first)
    assert answered.returncode == 0, answered.stderr
    reply = answered.stdout.split()[1]

    stranger = mail(db_url, "carol", "alice", "--in-reply-to", first)
    assert stranger.returncode != 0
    assert "requested_by: a reply to" in stranger.stderr and "'bob', not 'carol'" in stranger.stderr
    bad = mail(db_url, "bob", "alice", "--in-reply-to", "not-an-id")
    assert bad.returncode != 0 and "in_reply_to" in bad.stderr

    shown = aq(db_url, "show", reply)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    at = lines.index("thread")
    assert lines[at + 1].split()[:4] == [first, "alice", "->", "bob"]
    assert lines[at + 2].split()[:5] == ["*", reply, "bob", "->", "alice"]
    as_json = json.loads(aq(db_url, "show", first, "--json").stdout)
    assert [t["id"] for t in as_json["thread"]] == [first, reply]
    alone = json.loads(mail(db_url, "alice", "dave", "--json").stdout)
    assert "thread" not in json.loads(aq(db_url, "show", alone["id"], "--json").stdout)
