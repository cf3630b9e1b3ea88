"""The agentqueue command on both backends: JSON output, exit codes, and bad input."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from datetime import UTC
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from agentqueue import Queue, TaskState
from agentqueue.cli import main
from agentqueue.store.migrate import latest_version


def cli(db: str, *args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
    runner = CliRunner()
    return runner.invoke(
        main, ["--db", db, "--actor", "tester", *args], input=input, env=env, catch_exceptions=False
    )


def ok_json(db: str, *args: str) -> Any:
    result = cli(db, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def total(db: str) -> int:
    return int(ok_json(db, "stats")["total"])


def test_submit_with_every_flag_round_trips_through_show(db_url: str, tmp_path: Path) -> None:
    parent = ok_json(db_url, "submit", "--title", "parent", "--type", "docs")
    payload_file = tmp_path / "payload.json"
    payload_file.write_text('{"issue": 12, "body": "login fails"}')
    created = ok_json(
        db_url,
        "submit",
        "--title", "Fix login",
        "--type", "bugfix",
        "--priority", "P0",
        "--payload", f"@{payload_file}",
        "--tenant", "acme",
        "--source", "issue",
        "--source-id", "octo/repo#12",
        "--assignee", "fixer",
        "--idempotency-key", "fix-12",
        "--callback-url", "https://example.com/hook",
        "--timeout", "90",
        "--max-retries", "2",
        "--run-after", "2030-01-01T00:00:00Z",
        "--requested-by", "alice",
    )  # fmt: skip
    assert created["created"] is True
    shown = ok_json(db_url, "show", created["id"])
    assert shown["title"] == "Fix login" and shown["task_type"] == "bugfix"
    assert shown["priority"] == 0 and shown["payload"] == {"issue": 12, "body": "login fails"}
    assert shown["tenant"] == "acme" and shown["source"] == "issue"
    assert shown["source_id"] == "octo/repo#12" and shown["assignee"] == "fixer"
    assert shown["idempotency_key"] == "fix-12"
    assert shown["callback_url"] == "https://example.com/hook"
    assert shown["timeout_secs"] == 90 and shown["max_retries"] == 2
    assert shown["run_after"].startswith("2030-01-01T00:00:00")
    assert shown["requested_by"] == "alice" and shown["state"] == "pending"
    assert shown["retry_count"] == 0 and shown["depends_on"] == []

    dependent = ok_json(
        db_url, "submit", "--title", "after", "--type", "docs", "--depends-on", parent["id"]
    )
    assert ok_json(db_url, "show", dependent["id"])["depends_on"] == [parent["id"]]


def test_second_submit_of_a_live_source_prints_the_existing_task(db_url: str) -> None:
    args = (
        "submit",
        "--title",
        "t",
        "--type",
        "bugfix",
        "--source",
        "issue",
        "--source-id",
        "o/r#1",
    )
    first = ok_json(db_url, *args)
    second = ok_json(db_url, *args)
    assert second["created"] is False and second["id"] == first["id"]
    assert second["matched_by"] == "source"
    human = cli(db_url, *args)
    assert human.exit_code == 0 and f"exists {first['id']}" in human.stdout
    assert total(db_url) == 1


def test_list_events_and_stats_json_use_spec_field_names(db_url: str) -> None:
    for i in range(3):
        ok_json(db_url, "submit", "--title", f"t{i}", "--type", "docs" if i else "review")
    listed = ok_json(db_url, "list")
    assert isinstance(listed, list) and len(listed) == 3
    for field in ("id", "state", "priority", "retry_count", "assignee", "source_id", "task_type"):
        assert field in listed[0]
    assert [t["title"] for t in listed] == ["t2", "t1", "t0"]
    assert [t["title"] for t in ok_json(db_url, "list", "--type", "review")] == ["t0"]
    assert ok_json(db_url, "list", "--state", "executing") == []
    assert len(ok_json(db_url, "list", "--state", "queued")) == 3  # admitted as submitted

    events = ok_json(db_url, "events", listed[0]["id"])
    assert [(e["seq"], e["from"], e["to"]) for e in events] == [
        (1, None, "pending"),
        (2, "pending", "queued"),
    ]
    assert [e["actor"] for e in events] == ["tester", "scheduler"]

    stats = ok_json(db_url, "stats")
    assert set(stats["by_state"]) == {s.value for s in TaskState}
    assert stats["by_state"]["queued"] == 3 and stats["total"] == 3


def test_list_pages_with_the_printed_cursor(db_url: str) -> None:
    for i in range(5):
        ok_json(db_url, "submit", "--title", f"t{i}", "--type", "docs")
    first = cli(db_url, "list", "--limit", "3")
    assert first.exit_code == 0
    cursor = first.stdout.strip().splitlines()[-1].split("--cursor ")[1]
    rest = ok_json(db_url, "list", "--limit", "3", "--cursor", cursor)
    assert [t["title"] for t in rest] == ["t1", "t0"]


def test_a_script_pages_list_json_with_after_the_last_id_it_saw(db_url: str) -> None:
    for i in range(5):
        ok_json(db_url, "submit", "--title", f"t{i}", "--type", "docs" if i % 2 else "review")
    seen: list[str] = []
    after: list[str] = []
    while True:
        page = ok_json(db_url, "list", "--type", "docs", "--type", "review", "--limit", "2", *after)
        assert isinstance(page, list)
        if not page:
            break
        seen += [t["title"] for t in page]
        after = ["--after", page[-1]["id"]]
    assert seen == [t["title"] for t in ok_json(db_url, "list")] == ["t4", "t3", "t2", "t1", "t0"]
    # Filters hold across pages: the docs after t3 are t1 only.
    docs = ok_json(db_url, "list", "--type", "docs")
    assert [t["title"] for t in docs] == ["t3", "t1"]
    rest = ok_json(db_url, "list", "--type", "docs", "--after", docs[0]["id"])
    assert [t["title"] for t in rest] == ["t1"]
    both = cli(db_url, "list", "--after", docs[0]["id"], "--cursor", "5")
    assert both.exit_code == 2 and "after" in both.output
    unknown = cli(db_url, "list", "--after", "00000000-0000-0000-0000-000000000000")
    assert unknown.exit_code != 0 and "no task" in unknown.output


def test_list_filters_by_source_id_assignee_labels_and_creation_time(db_url: str) -> None:
    def submit(title: str, *flags: str) -> Any:
        return ok_json(db_url, "submit", "--title", title, "--type", "docs", *flags)

    first = submit("first", "--source", "issue", "--source-id", "o/r#1", "--label", "db")
    second = submit("second", "--assignee", "alice", "--label", "db", "--label", "python")
    third = submit("third", "--assignee", "alice", "--label", "python")

    def titles(*flags: str) -> list[str]:
        return [t["title"] for t in ok_json(db_url, "list", *flags)]

    assert titles("--source-id", "o/r#1") == ["first"]
    assert titles("--assignee", "alice") == ["third", "second"]
    assert titles("--label", "db") == ["second", "first"]
    assert titles("--label", "python", "--label", "db") == ["second"]
    assert titles("--assignee", "alice", "--label", "db", "--source", "api") == ["second"]
    assert titles("--created-after", second["created_at"]) == ["third", "second"]
    assert titles("--created-before", second["created_at"]) == ["first"]
    window = ("--created-after", first["created_at"], "--created-before", third["created_at"])
    assert titles(*window) == ["second", "first"]
    assert titles(*window, "--assignee", "alice") == ["second"]
    assert titles("--created-after", "+1h") == []


def test_cancel_and_dead_letter_actions_are_audited_with_actor_and_reason(db_url: str) -> None:
    task = ok_json(db_url, "submit", "--title", "cancel me", "--type", "docs")
    cancelled = ok_json(db_url, "cancel", task["id"], "--reason", "duplicate work")
    assert cancelled["state"] == "cancelled"
    last = ok_json(db_url, "events", task["id"])[-1]
    assert (last["to"], last["actor"], last["reason"]) == ("cancelled", "tester", "duplicate work")
    again = cli(db_url, "cancel", task["id"])
    assert again.exit_code == 1 and "cancelled" in again.stderr

    with Queue(db_url) as q:
        dead = q.submit(title="doomed", task_type="docs", max_retries=0).task
        q.admit()
        [claimed] = q.claim(1, "w")
        assert claimed.lock_token is not None
        q.fail(claimed.id, claimed.lock_token, "boom")
    assert [t["id"] for t in ok_json(db_url, "dlq", "list")] == [str(dead.id)]
    assert ok_json(db_url, "dlq", "review", str(dead.id))["state"] == "manual_review"
    requeued = ok_json(db_url, "dlq", "requeue", str(dead.id), "--reason", "fixed config")
    assert requeued["state"] == "queued" and requeued["retry_count"] == 0
    archive_queued = cli(db_url, "dlq", "archive", str(dead.id))
    assert archive_queued.exit_code == 1 and "queued" in archive_queued.stderr


def test_dlq_requeue_hands_the_task_to_a_new_assignee(db_url: str) -> None:
    with Queue(db_url) as q:
        dead = q.submit(title="doomed", task_type="docs", max_retries=0, assignee="alice").task
        q.admit()
        [claimed] = q.claim(1, "w")
        assert claimed.lock_token is not None
        q.fail(claimed.id, claimed.lock_token, "boom")
    bad = cli(db_url, "dlq", "requeue", str(dead.id), "--assignee", "bob smith")
    assert bad.exit_code == 2 and "assignee" in bad.stderr
    human = cli(db_url, "dlq", "requeue", str(dead.id), "--assignee", "bob", "--reason", "x")
    assert human.exit_code == 0, human.output
    assert f"requeued {dead.id} to bob by tester (now queued)" in human.stdout
    shown = ok_json(db_url, "show", str(dead.id))
    assert (shown["state"], shown["assignee"], shown["agent"]) == ("queued", "bob", None)
    last = ok_json(db_url, "events", str(dead.id))[-1]
    assert (last["action"], last["actor"], last["reason"]) == ("requeue", "tester", "x")
    assert last["data"]["assignee"] == "bob" and last["data"]["previous_assignee"] == "alice"


def test_verify_exits_1_naming_the_tampered_event(db_url: str) -> None:
    task = ok_json(db_url, "submit", "--title", "audited", "--type", "docs")
    ok_json(db_url, "cancel", task["id"])
    good = cli(db_url, "verify")
    assert good.exit_code == 0 and "ok: 1 tasks, 3 events" in good.stdout

    if db_url.startswith("sqlite"):
        with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
            conn.execute("DROP TRIGGER aq_events_no_update")
            conn.execute("UPDATE aq_events SET actor = 'mallory' WHERE seq = 2")
    else:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("SET session_replication_role = replica")
            conn.execute("UPDATE aq_events SET actor = 'mallory' WHERE seq = 2")
    bad = cli(db_url, "verify")
    assert bad.exit_code == 1
    assert f"task {task['id']} event 2" in bad.stderr


BAD_INPUTS = [
    (["submit", "--title", "t", "--type", "docs", "--priority", "12"], "priority"),
    (["submit", "--title", "t", "--type", "docs", "--payload", "{nope"], "payload"),
    (["submit", "--title", "t", "--type", "docs", "--timeout", "soon"], "timeout_secs"),
    (["submit", "--title", "t", "--type", "docs", "--run-after", "tomorrow"], "run_after"),
    (["submit", "--title", "t", "--type", "docs", "--priority", "P0"], "idempotency_key"),
    (["submit", "--title", "t", "--type", "docs", "--source", "fax"], "source"),
    (["submit", "--title", "t", "--type", "docs", "--depends-on", "not-an-id"], "depends_on"),
    (["submit", "--type", "docs"], "title"),
    (["list", "--state", "sleeping"], "--state"),
    (["list", "--created-after", "yesterday"], "created_after"),
    (["list", "--created-before", "2026-02-30"], "created_before"),
    (["list", "--created-after", "2026-03-02", "--created-before", "2026-03-01"], "created_after"),
    (["show", "12345"], "id"),
    (["events", "zzz"], "id"),
    (["cancel", "not-a-uuid"], "id"),
]


@pytest.mark.parametrize(("args", "field"), BAD_INPUTS, ids=[f for _, f in BAD_INPUTS])
def test_bad_input_exits_2_naming_the_field_and_writes_nothing(
    db_url: str, args: list[str], field: str
) -> None:
    result = cli(db_url, *args)
    assert result.exit_code == 2, result.output
    assert field in result.stderr
    assert "Traceback" not in result.output
    assert total(db_url) == 0


def test_payload_over_the_limit_is_refused(db_url: str, tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"blob": "x" * (1024 * 1024)}))
    result = cli(db_url, "submit", "--title", "t", "--type", "docs", "--payload", f"@{big}")
    assert result.exit_code == 2
    assert "payload" in result.stderr and "over the limit of 1048576 bytes" in result.stderr
    assert total(db_url) == 0


def test_bulk_file_with_one_bad_task_names_it_and_writes_none(db_url: str, tmp_path: Path) -> None:
    lines = [
        {"title": "a", "task_type": "docs"},
        {"title": "b", "task_type": "docs", "titel": "typo"},
        {"title": "c", "task_type": "docs", "priority": 12},
    ]
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines))
    result = cli(db_url, "submit", "--file", str(path))
    assert result.exit_code == 2
    assert "tasks[1].titel: unknown field" in result.stderr
    assert "tasks[2].priority" in result.stderr
    assert total(db_url) == 0

    path.write_text(
        json.dumps([{"title": "a", "task_type": "docs"}, {"title": "b", "task_type": "x"}])
    )
    made = ok_json(db_url, "submit", "--file", str(path))
    assert [t["created"] for t in made] == [True, True]
    assert total(db_url) == 2


def test_unknown_id_exits_1(db_url: str) -> None:
    result = cli(db_url, "show", "01a229da-7e53-73d9-abe1-c033e7b3ead4")
    assert result.exit_code == 1 and "no task" in result.stderr


def test_bad_config_exits_2_naming_the_setting(db_url: str, tmp_path: Path) -> None:
    config = tmp_path / "agentqueue.toml"
    config.write_text("[queue]\nlease_ttl = 5\n")
    result = cli(db_url, "--config", str(config), "stats")
    assert result.exit_code == 2 and "queue.lease_ttl: unknown setting" in result.stderr
    config.write_text("[queue\n")
    result = cli(db_url, "--config", str(config), "stats")
    assert result.exit_code == 2 and "not valid TOML" in result.stderr


def test_environment_overrides_the_config_file(db_url: str, tmp_path: Path) -> None:
    config = tmp_path / "agentqueue.toml"
    config.write_text("[task_types.docs]\ntimeout_secs = 45\n")
    made = ok_json(db_url, "--config", str(config), "submit", "--title", "t", "--type", "docs")
    assert made["timeout_secs"] == 45
    env = {"AGENTQUEUE_TASK_TYPES__DOCS__TIMEOUT_SECS": "50"}
    result = cli(db_url, "--config", str(config), "submit", "--title", "u", "--type", "docs",
                 "--json", env=env)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["timeout_secs"] == 50


def test_migrate_reports_what_it_applied(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'fresh.db'}"
    latest = latest_version("sqlite")
    every = ", ".join(str(v) for v in range(1, latest + 1))
    first = cli(db, "migrate")
    assert first.exit_code == 0
    assert f"applied migrations {every}; schema at version {latest}" in first.stdout
    second = cli(db, "migrate")
    assert second.exit_code == 0 and f"already at version {latest}" in second.stdout


def test_the_installed_command_reads_agentqueue_db_and_exits_2_on_bad_input(tmp_path: Path) -> None:
    env = {"AGENTQUEUE_DB": f"sqlite:///{tmp_path / 'env.db'}", "PATH": "/usr/bin:/bin"}
    exe = Path(sys.executable).with_name("agentqueue")
    made = subprocess.run(
        [exe, "submit", "--title", "from env", "--type", "docs", "--json"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["title"] == "from env"
    assert (tmp_path / "env.db").exists()
    bad = subprocess.run(
        [exe, "submit", "--title", "x", "--type", "docs", "--priority", "12"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "priority" in bad.stderr and "Traceback" not in bad.stderr


def test_approve_and_reject_by_an_approver_only_and_both_in_events(
    db_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "guard.toml"
    config.write_text(
        '[approval]\napprovers = ["lead"]\n\n[[guardrails]]\nname = "data_deletion"\n'
        'pattern = "删除|删掉|drop table|rm -rf"\n'
    )
    conf = ("--config", str(config))
    held = ok_json(db_url, *conf, "submit", "--title", "请删掉旧表", "--type", "bugfix")
    assert (held["state"], held["hold"]) == ("blocked", "approval")
    assert "data_deletion" in held["state_reason"]
    shown = cli(db_url, *conf, "show", held["id"])
    assert "data_deletion" in shown.stdout

    refused = cli(db_url, *conf, "approve", held["id"], "--reason", "ok")  # actor: tester
    assert refused.exit_code == 1 and "tester is not an approver" in refused.stderr
    no_reason = cli(db_url, *conf, "approve", held["id"])
    assert no_reason.exit_code == 2 and "--reason" in no_reason.output
    approved = CliRunner().invoke(
        main,
        ["--db", db_url, *conf, "--actor", "lead", "approve", held["id"], "--reason", "backed up"],
    )
    assert approved.exit_code == 0, approved.output
    assert "approved" in approved.stdout and "lead" in approved.stdout
    last = ok_json(db_url, *conf, "events", held["id"])[-1]
    assert (last["action"], last["actor"], last["reason"]) == ("approve", "lead", "backed up")

    other = ok_json(db_url, *conf, "submit", "--title", "rm -rf /srv", "--type", "bugfix")
    rejected = CliRunner().invoke(
        main, ["--db", db_url, *conf, "--actor", "lead", "reject", other["id"], "--reason", "no"]
    )
    assert rejected.exit_code == 0, rejected.output
    last = ok_json(db_url, *conf, "events", other["id"])[-1]
    assert (last["action"], last["to"], last["actor"]) == ("reject", "cancelled", "lead")


def test_agents_lists_capabilities_and_load_against_the_cap(db_url: str, tmp_path: Path) -> None:
    config = tmp_path / "agents.toml"
    config.write_text(
        '[agents.fixer]\ncommand = ["true"]\ntask_types = ["bugfix"]\nlabels = ["python"]\n'
        'max_concurrent = 2\n\n[agents.writer]\ncommand = ["true"]\ntask_types = ["docs"]\n'
    )
    conf = ("--config", str(config))
    for i in range(3):
        ok_json(db_url, *conf, "submit", "--title", f"bug {i}", "--type", "bugfix")
    with Queue(db_url, config=config) as q:
        q.admit()
    listed = ok_json(db_url, *conf, "agents")
    assert listed == [
        {"name": "fixer", "task_types": ["bugfix"], "labels": ["python"], "max_concurrent": 2,
         "admitted": 2},
        {"name": "writer", "task_types": ["docs"], "labels": [], "max_concurrent": 1,
         "admitted": 0},
    ]  # fmt: skip
    shown = cli(db_url, *conf, "agents")
    assert shown.exit_code == 0 and "fixer" in shown.stdout and "python" in shown.stdout


def test_empty_tables_say_so_and_json_stays_an_empty_array(db_url: str) -> None:
    for args, line in (
        (("list",), "no tasks match"),
        (("list", "--state", "failed"), "no tasks match"),
        (("dlq", "list"), "no tasks in dead_letter or manual_review"),
        (("agents",), "no agents configured"),
    ):
        shown = cli(db_url, *args)
        assert shown.exit_code == 0 and shown.stdout == line + "\n", (args, shown.output)
        assert ok_json(db_url, *args) == []


def test_dlq_list_shows_the_last_error_cut_to_one_line_and_times_say_utc(db_url: str) -> None:
    with Queue(db_url) as q:
        dead = q.submit(title="doomed", task_type="docs", max_retries=0).task
        q.admit()
        [claimed] = q.claim(1, "w")
        assert claimed.lock_token is not None
        q.fail(claimed.id, claimed.lock_token, "disk full:\n" + "x" * 200)
    shown = cli(db_url, "dlq", "list")
    assert shown.exit_code == 0, shown.output
    header, row = shown.stdout.splitlines()
    assert "LAST ERROR" in header and str(dead.id) in row
    assert row.endswith("disk full: " + "x" * 48 + "…"), row
    created = dead.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert created in row
    assert created in cli(db_url, "list").stdout


def test_token_expiry_is_printed_like_every_other_time(db_url: str) -> None:
    made = cli(db_url, "tokens", "create", "--name", "ci", "--role", "submitter", "--expires", "1d")
    assert made.exit_code == 0, made.output
    first = made.stdout.splitlines()[0]
    assert first.startswith("token ci (submitter, default; expires ") and first.endswith(" UTC)"), (
        first
    )
    until = first.removeprefix("token ci (submitter, default; expires ").removesuffix(")")
    row = next(line for line in cli(db_url, "tokens", "list").stdout.splitlines() if "ci" in line)
    assert row.endswith(until), row
