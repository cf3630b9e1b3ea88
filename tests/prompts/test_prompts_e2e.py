"""Prompt templates and the envelope rule with real command agents and a real worker process,
on SQLite and PostgreSQL (R25).

A bugfix task made by the GitHub intake from a fixture delivery, and a mail, each reach their
agent with the prompt their template says, byte for byte (golden files), as the file
AGENTQUEUE_PROMPT names and as ``prompt`` in the task JSON; ``show --prompt`` prints the same.
A template that reads what the task does not have fails the attempt naming the template. A
result that names the task's own fields (``priority``, ``assignee``) is refused: the task keeps
them and says why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentqueue import AsyncQueue, TaskState
from agentqueue.service import intake

HERE = Path(__file__).parent
AGENT = HERE / "prompt_agent.py"
EXAMPLES = HERE.parents[1] / "examples" / "agents"
BUGFIX_TEMPLATE = EXAMPLES / "prompts" / "bugfix.md.j2"
CODER = "import sys; print(open(sys.argv[1]).read().upper(), end='')"
"""A stand-in for a coding agent: it reads the prompt file it is given and shouts it back."""
DOCS_TEMPLATE = "Document {{ title }}.\n"
GOLDEN = HERE / "golden"
FIXTURES = HERE.parent / "api" / "fixtures" / "github"
AGENTQUEUE = Path(sys.executable).with_name("agentqueue")
SECRET = "prompt-test-secret-5b1e"
TIMEOUT = 90.0


def write_config(tmp_path: Path) -> Path:
    config = tmp_path / "agentqueue.toml"
    agent = f"[{json.dumps(sys.executable)}, {json.dumps(str(AGENT))}]"
    coder = [sys.executable, str(EXAMPLES / "prompt_runner.py"), sys.executable, "-c", CODER]
    coder.append("{prompt}")
    config.write_text(
        f"""
[scheduler]
tick_secs = 0.2

[worker]
poll_secs = 0.2
workdir = {json.dumps(str(tmp_path / "runs"))}

[prompts.bugfix]
file = {json.dumps(str(BUGFIX_TEMPLATE))}

[prompts.mail]
file = {json.dumps(str(HERE / "templates" / "mail.md.j2"))}

[prompts.docs]
template = {json.dumps(DOCS_TEMPLATE)}

[agents.coder]
command = {json.dumps(coder)}
task_types = ["docs"]

[agents.fixer]
command = {agent}
task_types = ["bugfix"]

[agents.reviewer]
command = {agent}
task_types = ["note"]

[[intake.github]]
repository = "Codertocat/*"
tenant = "gh"
secret_env = "AQ_TEST_PROMPT_SECRET"
labels = {{ "bug" = "bugfix" }}
"""
    )
    return config


def run_worker(db_url: str, config: Path) -> str:
    """``agentqueue worker --scheduler --until-idle``: every task is run, then it exits."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQUEUE_")}
    done = subprocess.run(
        [str(AGENTQUEUE), "--db", db_url, "--config", str(config), "worker", "--scheduler",
         "--until-idle"],
        capture_output=True, text=True, timeout=TIMEOUT, env=environ,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr


def cli(db_url: str, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQUEUE_")}
    return subprocess.run(
        [str(AGENTQUEUE), "--db", db_url, "--config", str(config), *args],
        capture_output=True, text=True, timeout=60, env=environ,
    )  # fmt: skip


async def deliver(queue: AsyncQueue, fixture: str) -> dict[str, Any]:
    """Send the fixture delivery through the GitHub intake, signed as GitHub signs it."""
    import hashlib
    import hmac

    body = (FIXTURES / f"{fixture}.json").read_bytes()
    signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "x-hub-signature-256": signature,
        "x-github-event": fixture.split(".", 1)[0],
        "x-github-delivery": "3f1c2a6e-0000-4000-8000-000000000001",
        "content-type": "application/json",
    }
    answer = await intake.receive(
        await queue.runtime(), headers, body, env={"AQ_TEST_PROMPT_SECRET": SECRET}
    )
    assert answer.status in (200, 201, 202), answer
    return answer.body


async def test_the_prompt_is_what_the_template_says_and_the_envelope_stays(
    db_url: str, tmp_path: Path
) -> None:
    config = write_config(tmp_path)
    async with AsyncQueue(db_url, config=config) as queue:
        await deliver(queue, "issues.labeled")
        (bugfix,) = (await queue.list(tenant="gh", task_type="bugfix")).items
        mail = (
            await queue.submit(
                title="Is the login fix ready?",
                task_type="note",
                source="mail",
                assignee="reviewer",
                requested_by="fixer",
                payload={"lines": ["The release waits on it.", "Say when."]},
            )
        ).task
        meddler = (
            await queue.submit(
                title="Fix the typo",
                task_type="note",
                priority=3,
                payload={"envelope": {"priority": 0, "assignee": "mallory", "words": 3}},
            )
        ).task

        bare = (await queue.submit(title="No issue behind it", task_type="bugfix")).task
        docs = (await queue.submit(title="the intake", task_type="docs")).task

        run_worker(db_url, config)

        for task, golden in ((bugfix, "bugfix.md"), (mail, "mail.md")):
            done = await queue.get(task.id)
            assert done.state is TaskState.COMPLETED, done.error
            expected = (GOLDEN / golden).read_text(encoding="utf-8")
            assert done.result["prompt_file"] == expected
            assert done.result == {
                "prompt_file": expected,
                "prompt_json": expected,
                "in_workdir": True,
            }
            shown = cli(db_url, config, "show", "--prompt", str(task.id))
            assert shown.returncode == 0, shown.stderr
            assert shown.stdout == expected

        coded = await queue.get(docs.id)  # examples/agents/prompt_runner.py ran the stand-in
        assert coded.state is TaskState.COMPLETED, coded.error
        assert coded.result == {"exit_code": 0, "output_tail": "DOCUMENT THE INTAKE.\n"}

        unrendered = await queue.get(bare.id)  # the template reads payload.author: it has none
        assert unrendered.state is TaskState.FAILED and unrendered.retry_count == 0
        assert unrendered.error == (
            f"prompt: prompts.bugfix ({BUGFIX_TEMPLATE}): 'dict object' has no attribute 'author'"
        )

        refused = await queue.get(meddler.id)
        assert refused.state is TaskState.FAILED
        assert refused.retry_count == 0  # not retried: the same agent would say it again
        assert refused.priority == 3 and refused.assignee is None and refused.result is None
        assert refused.error is not None
        assert refused.error.startswith("result.assignee (and priority): names a field")
        assert "the task was left as it was" in refused.error
