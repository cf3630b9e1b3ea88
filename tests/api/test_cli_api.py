"""The ``agentqueue`` executable with ``--api``: one-shot commands through a real server, the
token read from the environment only and never shown, and the commands that need a database
refusing."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from http_server import AGENTQUEUE, ApiServer, clean_env

from agentqueue.config import load_settings


def aq(
    server: ApiServer, *args: str, token: str | None = None, var: str = "AGENTQUEUE_TOKEN",
    **env: str,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run ``agentqueue --api URL ARGS`` with the token in ``var``; assert it never shows."""
    secret = server.admin_secret if token is None else token
    environ = clean_env(**{var: secret}, **env)
    done = subprocess.run(
        [AGENTQUEUE, "--api", server.url, *args],
        capture_output=True, text=True, timeout=120, env=environ, check=False,
    )  # fmt: skip
    assert secret not in done.stdout and secret not in done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done


def ok_json(server: ApiServer, *args: str, **kwargs: Any) -> Any:
    done = aq(server, *args, "--json", **kwargs)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_submit_show_and_cancel_through_the_server(client_server: ApiServer) -> None:
    made = aq(client_server, "submit", "--title", "Through the API", "--type", "cli-docs")
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("created ") and "(pending, priority P1)" in made.stdout
    task_id = made.stdout.split()[1]

    shown = ok_json(client_server, "show", task_id)
    assert (shown["title"], shown["requested_by"]) == ("Through the API", "admin")
    human = aq(client_server, "show", task_id)
    assert human.returncode == 0 and "Through the API" in human.stdout

    many = client_server.directory / "many.jsonl"
    many.write_text('{"title": "one", "task_type": "cli-docs"}\n{"title": "two"}\n')
    bulk = aq(client_server, "submit", "--file", str(many), "--type", "cli-docs")
    assert bulk.returncode == 0 and bulk.stdout.strip() == "2 created, 0 matched existing tasks"

    cancelled = aq(client_server, "--actor", "someone", "cancel", task_id, "--reason", "done")
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"cancelled {task_id} (now cancelled)"
    events = ok_json(client_server, "events", task_id)
    assert (events[-1]["action"], events[-1]["actor"]) == ("cancel", "admin")  # not --actor

    again = aq(client_server, "cancel", task_id)
    assert again.returncode == 1 and "cannot be cancelled" in again.stderr


def test_list_through_the_server(client_server: ApiServer) -> None:
    made = ok_json(client_server, "submit", "--title", "Listed", "--type", "cli-list")
    listed = aq(client_server, "list", "--type", "cli-list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [t["id"] for t in json.loads(listed.stdout)] == [made["id"]]
    table = aq(client_server, "list", "--type", "cli-list")
    assert made["id"] in table.stdout and "Listed" in table.stdout


def test_tokens_through_the_server_with_the_token_in_another_variable(
    client_server: ApiServer,
) -> None:
    made = aq(client_server, "tokens", "create", "--name", "cli-ci", "--role", "submitter",
              var="AQ_ADMIN", token=client_server.admin_secret)  # fmt: skip
    assert made.returncode == 2 and "AGENTQUEUE_TOKEN" in made.stderr  # not where it looks

    made = aq(client_server, "--token-env", "AQ_ADMIN", "tokens", "create", "--name", "cli-ci",
              "--role", "submitter", var="AQ_ADMIN")  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines()[0] == "token cli-ci (submitter, default; expires never)"
    secret = made.stdout.strip().splitlines()[-1]
    assert secret.startswith("aq_") and "shown only now" in made.stderr

    listed = ok_json(client_server, "tokens", "list")
    mine = next(t for t in listed if t["name"] == "cli-ci")
    assert mine["status"] == "active" and "secret" not in mine
    assert secret not in json.dumps(listed)

    theirs = aq(client_server, "submit", "--title", "By ci", "--type", "cli-ci", token=secret)
    assert theirs.returncode == 0, theirs.stderr
    denied = aq(client_server, "tokens", "list", token=secret)
    assert denied.returncode == 1 and "cannot do this" in denied.stderr

    revoked = aq(client_server, "tokens", "revoke", "cli-ci")
    assert revoked.returncode == 0 and revoked.stdout.strip() == "revoked token cli-ci"
    gone = aq(client_server, "stats", token=secret)
    assert gone.returncode == 1 and "revoked" in gone.stderr


def test_errors_through_the_server(client_server: ApiServer) -> None:
    bad = aq(client_server, "submit", "--title", "x", "--type", "cli-err", "--priority", "P7")
    assert bad.returncode == 2 and "priority" in bad.stderr
    missing = aq(client_server, "show", "00000000-0000-0000-0000-000000000001")
    assert missing.returncode == 1 and "no task" in missing.stderr
    wrong = "aq_abcdefghijkl_" + "w" * 43
    refused = aq(client_server, "stats", token=wrong)
    assert refused.returncode == 1 and "unknown token" in refused.stderr
    tenant = aq(client_server, "stats", "--tenant", "acme")
    assert tenant.returncode == 2 and "--tenant" in tenant.stderr


def test_a_missing_token_variable_is_named(client_server: ApiServer) -> None:
    done = subprocess.run(
        [AGENTQUEUE, "--api", client_server.url, "--token-env", "AQ_NOT_SET", "stats"],
        capture_output=True, text=True, timeout=120, env=clean_env(), check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "AQ_NOT_SET" in done.stderr and "not set" in done.stderr


@pytest.mark.parametrize("command", ["worker", "serve", "scheduler", "migrate", "api", "bench"])
def test_commands_that_need_a_database_refuse_the_api(command: str) -> None:
    flag = subprocess.run(
        [AGENTQUEUE, "--api", "http://127.0.0.1:9", command],
        capture_output=True, text=True, timeout=120, env=clean_env(), check=False,
    )  # fmt: skip
    assert flag.returncode == 2 and f"{command} works on a database" in flag.stderr
    assert "drop --api" in flag.stderr
    env = subprocess.run(
        [AGENTQUEUE, command],
        capture_output=True, text=True, timeout=120, check=False,
        env=clean_env(AGENTQUEUE_API="http://127.0.0.1:9"),
    )  # fmt: skip
    assert env.returncode == 2 and "drop AGENTQUEUE_API" in env.stderr


def test_a_server_that_is_not_there_is_said_so() -> None:
    done = subprocess.run(
        [AGENTQUEUE, "--api", "http://127.0.0.1:9", "stats"],
        capture_output=True, text=True, timeout=120, check=False,
        env=clean_env(AGENTQUEUE_TOKEN="aq_never_shown"),
    )  # fmt: skip
    assert done.returncode == 1 and "cannot reach the agentqueue API at" in done.stderr
    assert "aq_never_shown" not in done.stderr + done.stdout


def test_agentqueue_api_in_the_environment_is_not_the_api_section(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTQUEUE_API", "http://127.0.0.1:8077")
    monkeypatch.setenv("AGENTQUEUE_API__PORT", "9999")
    assert load_settings(None).api.port == 9999


async def test_callbacks_refused_and_deliveries_inspected_through_the_server(
    client_server: ApiServer, driver: Any
) -> None:
    """A callback_url to a private address is refused by the CLI and the API naming the field;
    a stored callback is listed, shown with its tries and retried through the CLI."""
    refused = aq(client_server, "submit", "--title", "t", "--type", "cli-cb",
                 "--callback-url", "http://169.254.169.254/latest")  # fmt: skip
    assert refused.returncode == 2 and "callback_url" in refused.stderr
    with client_server.client(client_server.admin_secret) as http:
        answer = http.post("/v1/tasks", json={"title": "t", "task_type": "cli-cb",
                                              "callback_url": "http://10.0.0.1/cb"})  # fmt: skip
    assert answer.status_code == 422 and "callback_url" in answer.text

    made = ok_json(client_server, "submit", "--title", "Hooked", "--type", "cli-cb",
                   "--callback-url", "https://hooks.example.com/cb?token=cli-secret")  # fmt: skip
    await driver.admit()
    [task] = await driver.claim(1, "w", ["cli-cb"])
    assert str(task.id) == made["id"]
    await driver.complete(task.id, task.lock_token, "ok")  # no deliverer runs here: it waits
    [row] = ok_json(client_server, "deliveries", "list", "--task", made["id"])
    assert (row["kind"], row["state"], row["attempts"]) == ("callback", "pending", 0)
    assert "cli-secret" not in json.dumps(row)
    shown = ok_json(client_server, "deliveries", "show", str(row["id"]))
    assert shown["tries"] == [] and shown["body"]["type"] == "task.completed"
    human = aq(client_server, "deliveries", "show", str(row["id"]))
    assert human.returncode == 0 and "callback" in human.stdout
    retried = aq(client_server, "deliveries", "retry", str(row["id"]))
    assert retried.returncode == 0 and "due now" in retried.stdout
    missing = aq(client_server, "deliveries", "show", "999999")
    assert missing.returncode != 0 and "no delivery" in missing.stderr
    table = aq(client_server, "deliveries", "list", "--kind", "callback", "--state", "pending")
    assert made["id"] in table.stdout


def test_show_through_the_server_says_why_a_task_waits(client_server: ApiServer) -> None:
    paused = aq(client_server, "pause", "cli-waits")
    assert paused.returncode == 0, paused.stderr
    made = ok_json(client_server, "submit", "--title", "Waits", "--type", "cli-waits")
    shown = ok_json(client_server, "show", made["id"])
    assert [r["code"] for r in shown["waiting"]] == ["paused"]
    human = aq(client_server, "show", made["id"])
    assert "task type 'cli-waits' is paused" in human.stdout
    assert aq(client_server, "resume", "cli-waits").returncode == 0
