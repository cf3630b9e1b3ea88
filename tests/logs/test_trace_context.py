"""OpenTelemetry (the otel extra): the trace context taken at submit is kept with the task, each
attempt runs in a span that is its child, the handler sees that span, and a command agent gets it
as TRACEPARENT. Spans are read from the SDK's in-memory exporter; both backends."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentqueue import AsyncQueue, InvalidInput, TaskState, tracing
from worker_run import run_until_ended

AGENT = Path(__file__).with_name("trace_agent.py")
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
SUBMITTED = f"00-{TRACE_ID}-{PARENT_ID}-01"


class _WhileTesting(SimpleSpanProcessor):
    """Exports spans only while a test that reads them runs (the provider stays set for the
    rest of the process: the global provider can be set once)."""

    active = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.active:
            super().on_end(span)


_exporter = InMemorySpanExporter()
_processor = _WhileTesting(_exporter)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The SDK set up in this test process, its spans in memory while the test runs."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if not getattr(provider, "_aq_test_exporter", False):
        provider.add_span_processor(_processor)
        provider._aq_test_exporter = True  # type: ignore[attr-defined]
    _exporter.clear()
    _processor.active = True
    tracing.look_again()  # an earlier test's worker may have found none a moment ago
    yield _exporter
    _processor.active = False
    _exporter.clear()


def _task(task_type: str) -> dict[str, Any]:
    return {"title": task_type, "task_type": task_type, "traceparent": SUBMITTED}


def _traceparent(context: Any) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "agentqueue.toml"
    path.write_text(
        f"""
[worker]
poll_secs = 0.2
workdir = "{tmp_path / "runs"}"

[agents.tracer]
command = ["{sys.executable}", "{AGENT}"]
task_types = ["traced_agent"]
"""
    )
    return path


async def test_attempt_spans_are_children_of_the_submitted_context(
    db_url: str, tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    queue = AsyncQueue(db_url, config=_config(tmp_path))
    seen: dict[str, Any] = {}

    @queue.handler("traced")
    async def traced(task: Any, ctx: Any) -> None:
        seen[str(task.id)] = (trace.get_current_span().get_span_context(), ctx.traceparent)

    try:
        handled = (await queue.submit(_task("traced"))).task
        by_agent = (await queue.submit(_task("traced_agent"))).task
        with trace.get_tracer("caller").start_as_current_span("caller") as caller:
            inherited = (await queue.submit({"title": "c", "task_type": "traced"})).task
        caller_ctx = caller.get_span_context()
        assert handled.traceparent == SUBMITTED
        assert inherited.traceparent == _traceparent(caller_ctx)
        assert (await queue.get(handled.id)).traceparent == SUBMITTED  # stored, read back

        ids = [t.id for t in (handled, by_agent, inherited)]
        await run_until_ended(queue, ids, concurrency=4, run_scheduler=True)
        agent_task = await queue.get(by_agent.id)
        assert [(await queue.get(t.id)).state for t in (handled, inherited)] == [
            TaskState.COMPLETED, TaskState.COMPLETED,
        ]  # fmt: skip
        assert agent_task.state is TaskState.COMPLETED, agent_task.error
    finally:
        await queue.close()

    attempts = {
        s.attributes["agentqueue.task_id"]: s
        for s in spans.get_finished_spans()
        if s.name.startswith("agentqueue.attempt")
    }
    for task in (handled, by_agent):
        span = attempts[str(task.id)]
        assert span.parent is not None and span.parent.span_id == int(PARENT_ID, 16)
        assert span.context.trace_id == int(TRACE_ID, 16)
    handler_span = attempts[str(handled.id)].context
    # The handler ran with its attempt's span current, and was told its context.
    current, told = seen[str(handled.id)]
    assert current.span_id == handler_span.span_id and told == _traceparent(handler_span)
    agent_span = attempts[str(by_agent.id)].context
    assert agent_task.result == {"env_traceparent": _traceparent(agent_span)}
    inherited_span = attempts[str(inherited.id)]
    assert inherited_span.context.trace_id == caller_ctx.trace_id
    assert inherited_span.parent is not None
    assert inherited_span.parent.span_id == caller_ctx.span_id


async def test_a_bad_traceparent_is_refused_naming_the_field(db_url: str) -> None:
    queue = AsyncQueue(db_url)
    try:
        for bad in ("00-xyz", f"ff-{TRACE_ID}-{PARENT_ID}-01", f"00-{'0' * 32}-{PARENT_ID}-01"):
            with pytest.raises(InvalidInput) as caught:
                await queue.submit({"title": "t", "task_type": "x", "traceparent": bad})
            assert caught.value.fields == ["traceparent"]
    finally:
        await queue.close()


def test_without_opentelemetry_tasks_run_and_keep_their_traceparent(tmp_path: Path) -> None:
    """Submit, run a worker and log its transitions in a process where OpenTelemetry cannot be
    imported (as without the extra): nothing tries to, the task's traceparent is kept and
    handed to the handler."""
    script = f"""
import asyncio, logging, sys
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ImportError("blocked")
sys.meta_path.insert(0, Blocker())
from agentqueue import AsyncQueue
from agentqueue.logsetup import configure
configure("json", "INFO")
seen = []
async def main():
    q = AsyncQueue("sqlite:///{tmp_path / "q.db"}")
    @q.handler("x")
    async def x(task, ctx):
        seen.append(ctx.traceparent)
    t = (await q.submit({{"title": "t", "task_type": "x", "traceparent": "{SUBMITTED}"}})).task
    w = q.worker(concurrency=1)
    run = asyncio.create_task(w.run())
    for _ in range(300):
        if (await q.get(t.id)).state.terminal:
            break
        await asyncio.sleep(0.05)
    w.stop()
    await run
    await q.close()
asyncio.run(main())
assert seen == ["{SUBMITTED}"], seen
assert not [m for m in sys.modules if m.startswith("opentelemetry")]
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.stdout.strip() == "ok", done.stderr


@pytest.mark.parametrize("on", [True, False])
def test_a_worker_imports_opentelemetry_as_it_starts_not_in_its_first_attempt(
    tmp_path: Path, on: bool
) -> None:
    """With spans on (the default, the extra installed), a started worker has imported
    OpenTelemetry's API before any task arrives, so the first attempt's dispatch does not wait
    for the import; with ``[logging] opentelemetry = false`` nothing imports it."""
    script = f"""
import asyncio, sys
from agentqueue import AsyncQueue
from agentqueue.config import Settings
async def main():
    q = AsyncQueue("sqlite:///{tmp_path / "q.db"}",
                   settings=Settings(logging={{"opentelemetry": {on}}}))
    @q.handler("x")
    async def x(task, ctx):
        pass
    w = q.worker(concurrency=1)
    run = asyncio.create_task(w.run())
    await asyncio.wait_for(w.started.wait(), 30)
    print("opentelemetry.trace" in sys.modules)
    w.stop()
    await run
    await q.close()
asyncio.run(main())
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.stdout.strip() == str(on), done.stderr


def test_submit_traceparent_option_is_kept_and_a_bad_one_refused(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from agentqueue.cli import main

    db = f"sqlite:///{tmp_path / 'cli.db'}"
    base = ["--db", db, "submit", "--title", "t", "--type", "x", "--json"]
    done = CliRunner().invoke(main, [*base, "--traceparent", SUBMITTED])
    assert done.exit_code == 0, done.output
    assert '"traceparent": "' + SUBMITTED + '"' in done.output
    bad = CliRunner().invoke(main, [*base, "--traceparent", "00-abc"])
    assert bad.exit_code == 2 and "traceparent: must be a W3C traceparent" in bad.output


async def test_spans_are_off_with_logging_opentelemetry_false(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    from agentqueue.config import Settings

    settings = Settings(logging={"opentelemetry": False})  # type: ignore[arg-type]
    queue = AsyncQueue(f"sqlite:///{tmp_path / 'off.db'}", settings=settings)
    told: list[str | None] = []

    @queue.handler("quiet")
    async def quiet(task: Any, ctx: Any) -> None:
        told.append(ctx.traceparent)

    try:
        task = (await queue.submit(_task("quiet"))).task
        await run_until_ended(queue, [task.id], concurrency=1)
    finally:
        await queue.close()
    assert told == [SUBMITTED]  # the task's own context, handed on as submitted
    assert not [s for s in spans.get_finished_spans() if s.name.startswith("agentqueue.")]


@pytest.mark.parametrize("how", ["wait", "look_again"])
def test_a_tracer_provider_set_after_the_worker_looked_is_used_from_the_next_look(
    how: str,
) -> None:
    """Whether a tracer provider is set is asked once per ``PROVIDER_LOOK_SECS`` while none is
    (every attempt would ask): a provider set later is used from the next look on, or at once
    after ``look_again``. In a process of its own (the provider can be set once)."""
    script = f"""
import sys, time
sys.path.insert(0, {str(Path(__file__).parent.parent / "domain")!r})
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from agentqueue import tracing
from task_factory import make_task
t = make_task()
assert tracing.start_attempt(t, True) is None  # no provider yet
trace.set_tracer_provider(TracerProvider())
assert tracing.start_attempt(t, True) is None, "looked again at once"
if {how!r} == "wait":
    time.sleep(tracing.PROVIDER_LOOK_SECS + 0.2)
else:
    tracing.look_again()
span = tracing.start_attempt(t, True)
assert span is not None, "a provider set a while ago is not used"
span.end("completed")
assert tracing.start_attempt(t, False) is None  # off stays off
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.stdout.strip() == "ok", done.stderr
