"""A task's prompt over HTTP (R25): ``GET /v1/tasks/{id}/prompt`` renders the server's
``[prompts]`` template for the task, ``Client.prompt`` and ``agentqueue --api show --prompt``
read it, a task no template applies to answers null (the CLI says so), and a template that
cannot be rendered for the task is a 422 naming ``prompt`` and the template."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from http_server import AGENTQUEUE, KINDS, ApiServer, clean_env, running_server

from agentqueue import Client

PROMPTS = """
[prompts.bugfix]
template = "Fix {{ title }} (P{{ priority }}) for {{ tenant }}: {{ payload.body }}\\n"
"""


@pytest.fixture(scope="module", params=KINDS)
def prompt_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    directory: Path = tmp_path_factory.mktemp(f"prompt-{request.param}")
    with running_server(request.param, directory, {}, PROMPTS) as server:
        yield server


def show_prompt(server: ApiServer, task_id: str, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGENTQUEUE, "--api", server.url, "show", "--prompt", task_id, *more],
        capture_output=True, text=True, timeout=60,
        env=clean_env(AGENTQUEUE_TOKEN=server.admin_secret),
    )  # fmt: skip


def test_the_prompt_over_http_the_client_and_the_cli(prompt_server: ApiServer) -> None:
    with Client(prompt_server.url, prompt_server.admin_secret) as client:
        fix = client.submit(title="the login", task_type="bugfix", payload={"body": "500s"})
        plain = client.submit(title="no template", task_type="docs")
        bare = client.submit(title="no body", task_type="bugfix")
        expected = "Fix the login (P5) for default: 500s\n"
        assert client.prompt(fix.task.id) == expected
        assert client.prompt(plain.task.id) is None

    with prompt_server.client(prompt_server.admin_secret) as http:
        answer = http.get(f"/v1/tasks/{fix.task.id}/prompt")
        assert answer.status_code == 200
        assert answer.json() == {"task_id": str(fix.task.id), "prompt": expected}
        refused = http.get(f"/v1/tasks/{bare.task.id}/prompt")
        assert refused.status_code == 422
        assert refused.json()["errors"] == [
            {"field": "prompt", "message": "prompts.bugfix: 'dict object' has no attribute 'body'"}
        ]

    shown = show_prompt(prompt_server, str(fix.task.id))
    assert (shown.returncode, shown.stdout) == (0, expected)
    as_json = show_prompt(prompt_server, str(plain.task.id), "--json")
    assert json.loads(as_json.stdout) == {"task_id": str(plain.task.id), "prompt": None}
    none = show_prompt(prompt_server, str(plain.task.id))
    assert none.returncode == 1
    assert none.stderr.startswith(f"error: no prompt template applies to task {plain.task.id}")
