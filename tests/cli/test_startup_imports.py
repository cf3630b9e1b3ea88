"""Start-up (the command's budget): ``agentqueue --help`` and ``agentqueue list`` on SQLite load
none of the heavy modules they do not use. Checked by what a fresh interpreter has loaded, not
by timing (``agentqueue bench startup`` measures the time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HEAVY = ("fastapi", "uvicorn", "starlette", "httpx", "jinja2", "psycopg", "psycopg_pool",
         "croniter", "tqdm", "rich", "prometheus_client", "regex", "hypothesis")  # fmt: skip
"""Libraries neither command needs."""
HELP_ONLY = ("asyncio", "sqlite3", "pydantic", "pydantic_settings", "agentqueue.store.base",
             "agentqueue.domain.states", "agentqueue.domain.models", "agentqueue.domain.audit",
             "agentqueue.domain.deliveries", "agentqueue.domain.waiting",
             "agentqueue.supervise")  # fmt: skip
"""What ``--help`` and a bare ``import agentqueue.cli`` need no more than the heavy libraries:
the event loop, the database driver, the configuration's validation and the rules of the
domain load when a command runs."""
LIST_NEVER = ("pydantic", "pydantic_core", "pydantic_settings", "importlib.metadata",
              "importlib.resources", "zipfile", "agentqueue.config", "agentqueue.spec",
              "agentqueue.pipelines", "agentqueue.executors.inprocess",
              "agentqueue.service.actions", "agentqueue.service.execution",
              "agentqueue.service.submit")  # fmt: skip
"""What ``list`` with no configuration file and no override does not load: the settings are the
defaults, built when first read (agentqueue.unconfigured), and ``list`` reads none of them, so
neither the configuration's models nor pydantic are loaded (pydantic-settings is not a
dependency); the queue's operations other than the reads are loaded when first called; the
store's SQL files are read from the package's directory (importlib.resources, which loads
zipfile and the compressors, only for a package run from a zip archive)."""
OURS = (
    "agentqueue.api",
    "agentqueue.worker",
    "agentqueue.scheduler",
    "agentqueue.delivery",
    "agentqueue.client.http",
    "agentqueue.executors.subprocess",
    "agentqueue.dashboard",
)
"""Parts of agentqueue neither command needs."""

PROBE = """
import json, sys
sys.argv = ["agentqueue", *json.loads(sys.argv[1])]
from agentqueue.cli import main
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def loaded(*args: str, **env: str) -> set[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQUEUE_")}
    environ.update(env)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(args))],
        capture_output=True, text=True, timeout=60, env=environ,
    )  # fmt: skip
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def heavy(modules: set[str]) -> list[str]:
    return sorted(
        m for m in modules
        if m.split(".")[0] in HEAVY or any(m == o or m.startswith(o + ".") for o in OURS)
    )  # fmt: skip


def test_help_loads_no_heavy_module() -> None:
    modules = loaded("--help")
    assert heavy(modules) == []
    assert "agentqueue.queue" not in modules and "agentqueue.config" not in modules
    assert sorted(modules & set(HELP_ONLY)) == []


def test_importing_the_command_loads_no_heavy_module() -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQUEUE_")}
    probe = "import json, sys, agentqueue.cli; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=environ
    )
    modules = set(json.loads(done.stdout))
    assert "agentqueue.cli.shell" in modules
    assert heavy(modules) == []
    assert sorted(modules & {*HELP_ONLY, "agentqueue.queue", "agentqueue.config"}) == []


def test_list_on_sqlite_loads_no_heavy_module(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'small.db'}"
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(f'{{"title": "t{i}", "task_type": "docs"}}\n' for i in range(5)))
    subprocess.run(
        [sys.executable, "-m", "agentqueue.cli", "--db", url, "submit", "--file", str(tasks)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    modules = loaded("--db", url, "list")
    assert "agentqueue.store.sqlite.dialect" in modules  # it did read the database
    assert heavy(modules) == []
    assert sorted(modules & set(LIST_NEVER)) == []
    # Only the task commands' module: the others are imported when their command is used.
    assert sorted(m for m in modules if m.startswith("agentqueue.cli.")) == [
        "agentqueue.cli.shell",
        "agentqueue.cli.tasks",
    ]
    assert "agentqueue.bench.cli" not in modules


def test_the_other_reads_load_no_configuration_either(tmp_path: Path) -> None:
    """``stats``, ``events``, ``logs``, ``dlq list``, ``deliveries list`` and ``show`` of a task
    that has ended read no setting either (README, Progress and start-up), so they load neither
    pydantic nor the configuration; ``show`` of a task that waits does (its reasons ask its
    pipeline's routing), and loads them then."""
    url = f"sqlite:///{tmp_path / 'small.db'}"
    submitted = subprocess.run(
        [sys.executable, "-m", "agentqueue.cli", "--db", url, "submit", "--title", "t",
         "--type", "docs", "--json"],
        check=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    task = json.loads(submitted.stdout)["id"]
    for command in (["stats"], ["events", task], ["logs", task], ["dlq", "list"],
                    ["deliveries", "list"]):  # fmt: skip
        modules = loaded("--db", url, *command)
        assert "agentqueue.store.sqlite.dialect" in modules, command
        assert sorted(modules & set(LIST_NEVER)) == [], command
    assert {"agentqueue.config", "pydantic"} <= loaded("--db", url, "show", task)
    subprocess.run(
        [sys.executable, "-m", "agentqueue.cli", "--db", url, "cancel", task],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    modules = loaded("--db", url, "show", task)
    assert "agentqueue.service.threads" in modules  # it did read the task's thread
    assert sorted(modules & set(LIST_NEVER)) == []


def test_the_command_table_names_every_command_of_every_module() -> None:
    """Every command a module defines is in the table under its own name, and nothing else is:
    a command added to a module and not to the table would be missing from the CLI."""
    import importlib

    from agentqueue.cli import COMMANDS, main

    defined = {}
    for module in ("tasks", "people", "operations", "deliveries", "tokens", "processes"):
        for command in importlib.import_module(f"agentqueue.cli.{module}").COMMANDS:
            defined[command.name] = f".{module}"
    defined["bench"] = "..bench.cli"
    assert {name: where for name, (where, _) in COMMANDS.items()} == defined
    ctx = main.make_context("agentqueue", ["list"])
    for name in COMMANDS:
        command = main.get_command(ctx, name)
        assert command is not None and command.name == name


def test_list_with_the_database_in_the_environment_loads_no_configuration(
    tmp_path: Path,
) -> None:
    """AGENTQUEUE_DB sets a text setting, and an agent's own variables set none: the defaults
    still apply, and are never built."""
    url = f"sqlite:///{tmp_path / 'small.db'}"
    modules = loaded("list", AGENTQUEUE_DB=url, AGENTQUEUE_TASK_ID="x", AGENTQUEUE_ACTOR="me")
    assert "agentqueue.store.sqlite.dialect" in modules
    assert sorted(modules & set(LIST_NEVER)) == []


def test_list_with_a_setting_in_the_environment_validates_it(tmp_path: Path) -> None:
    """A variable that sets a setting is read and validated as the queue is built, so a bad one
    fails the command at once, naming it."""
    url = f"sqlite:///{tmp_path / 'small.db'}"
    modules = loaded("--db", url, "list", AGENTQUEUE_QUEUE__LEASE_TTL_SECS="12")
    assert {"agentqueue.config", "pydantic"} <= modules
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQUEUE_")}
    done = subprocess.run(
        [sys.executable, "-m", "agentqueue.cli", "--db", url, "list"],
        capture_output=True, text=True, timeout=60,
        env={**environ, "AGENTQUEUE_QUEUE__LEASE_TTL_SECS": "soon"},
    )  # fmt: skip
    assert done.returncode != 0
    assert "queue.lease_ttl_secs" in done.stderr


def test_the_store_reads_its_sql_files_from_a_zip_archive_too(tmp_path: Path) -> None:
    """Run from a zip archive (no directory to read), the store finds its named queries and
    migrations through importlib.resources, the same ones as from the directory."""
    import zipfile

    import agentqueue
    from agentqueue.store.migrate import available
    from agentqueue.store.sqlfile import named_queries

    package = Path(agentqueue.__file__).parent
    archive = tmp_path / "agentqueue.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in package.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                zf.write(path, Path("agentqueue") / path.relative_to(package))
    probe = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import agentqueue; "
        "from agentqueue.store.sqlfile import named_queries; "
        "from agentqueue.store.migrate import available; "
        "print(json.dumps([agentqueue.__file__, sorted(named_queries('sqlite')), "
        "[m.version for m in available('postgres')]]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(archive)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    where, queries, versions = json.loads(done.stdout)
    assert ".zip" in where
    assert queries == sorted(named_queries("sqlite"))
    assert versions == [m.version for m in available("postgres")]


WORKER_NEVER = ("croniter", "dateutil", "pydantic.plugin._loader", "importlib.metadata")
"""What a worker with no configuration file and no cron schedule does not load: croniter (and
dateutil under it) is imported when a schedule's expression is first read, and no validator or
serializer is built for the default settings (the secrets of the configuration are found by
walking it, ``config.plain``), so pydantic never searches for its plugins."""


def test_a_worker_with_no_schedule_and_no_config_loads_no_cron_or_validator(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'worker.db'}"
    modules = loaded(
        "--db", url, "worker", "--app", "agentqueue.bench.noop_app:queue", "--until-idle",
        AQ_BENCH_APP_DB=url,
    )  # fmt: skip
    assert "agentqueue.worker.runner" in modules and "agentqueue.scheduler.loop" in modules
    assert sorted(m for m in modules if m.split(".")[0] in WORKER_NEVER or m in WORKER_NEVER) == []
    # The drain benchmark's app is written as a user writes one: of the benchmarks it loads the
    # name of its task type alone, so the worker measured starts as a user's would.
    assert sorted(m for m in modules if m.startswith("agentqueue.bench")) == [
        "agentqueue.bench",
        "agentqueue.bench.names",
        "agentqueue.bench.noop_app",
    ]
