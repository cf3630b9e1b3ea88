"""Commands on tasks: submit, list, show, events, logs, tool-result."""

from __future__ import annotations

from typing import Any

import click

from ..domain.errors import InvalidInput
from ..domain.priority import priority_name
from ..ids import parse_task_id
from .shell import (
    EXIT_BAD_INPUT,
    STATES,
    _id,
    emit_json,
    event_rows,
    fail,
    parse_when,
    print_page,
    progress,
    read_json_arg,
    read_task_file,
    run,
    run_db,
    show_task,
)


@click.command()
@click.option("--title", help="What to do, in a line.")
@click.option("--type", "task_type", help="Task type: bugfix, feature, review, test, docs, ...")
@click.option("--priority", help="0-9 (0 highest) or P0/P1/P2. Default 5.")
@click.option("--payload", help="JSON context for the agent, or @file.json (@- for stdin).")
@click.option("--tenant", help="Owner of the task.")
@click.option("--source", help="issue, pr, api, cron, manual or mail. Default api.")
@click.option("--source-id", help="Id at the source, e.g. octo/repo#12 (dedup key).")
@click.option("--assignee", help="Agent that should do it (for mail: the recipient).")
@click.option("--label", multiple=True, help="Capability the agent must have (repeatable).")
@click.option("--kind", help="Pipeline: task or mail (default: mail for --source mail).")
@click.option("--depends-on", multiple=True, help="Task id that must complete first (repeatable).")
@click.option("--idempotency-key", help="Same key, same task (required for P0).")
@click.option("--callback-url", help="Gets a signed POST when the task ends (see Callbacks).")
@click.option("--timeout", help="Seconds per attempt (default by task type).")
@click.option("--max-retries", help="Automatic retries (default 3; at most 3 for P0).")
@click.option("--run-after", help="Not before: ISO 8601 time or +30s/+5m/+2h/+1d.")
@click.option("--requested-by", help="Who asked for it (default: --actor); for mail, the sender.")
@click.option(
    "--in-reply-to", help="Mail: the mail this one answers (sent by its recipient; a thread)."
)
@click.option(
    "--traceparent",
    help="W3C trace context (00-<trace id>-<span id>-<flags>): each attempt's span is its "
    "child; command agents get it as TRACEPARENT (env TRACEPARENT).",
    envvar="TRACEPARENT",
)
@click.option(
    "--file",
    "task_file",
    help="Submit many: a JSON object, array or JSON lines of task fields (- for stdin).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the task(s) as JSON.")
@click.pass_context
def submit(ctx: click.Context, /, task_file: str | None, as_json: bool, **flags: Any) -> None:
    """Submit a task (or many with --file). Prints the task, or the live one it matched."""
    fields = _submit_fields(flags)
    if task_file is not None:
        try:
            items = read_task_file(task_file)
        except InvalidInput as exc:
            fail(str(exc), EXIT_BAD_INPUT)
        if not all(isinstance(item, dict) for item in items):
            fail("file: every task must be a JSON object of task fields", EXIT_BAD_INPUT)
        items = [{**fields, **item} for item in items]
        # Through a server the file goes in one request: progress only on a database.
        on_db = ctx.find_root().obj["api"] is None
        with progress(len(items) if on_db else 0, "task", "submitting") as step:
            if step is None:
                results = run(ctx, lambda q: q.submit_many(items))
            else:
                results = run_db(ctx, lambda q: q.submit_many(items, progress=step))
        if as_json:
            emit_json([r.to_json() for r in results])
        else:
            created = sum(r.created for r in results)
            click.echo(f"{created} created, {len(results) - created} matched existing tasks")
        return
    for required in ("title", "task_type"):
        if required not in fields:
            flag = "--type" if required == "task_type" else "--title"
            fail(f"{required}: required (give {flag})", EXIT_BAD_INPUT)
    result = run(ctx, lambda q: q.submit(fields))
    if as_json:
        emit_json(result.to_json())
    elif result.created:
        click.echo(
            f"created {result.task.id} ({result.task.state.value}, "
            f"priority {priority_name(result.task.priority)})"
        )
    else:
        click.echo(
            f"exists {result.task.id} ({result.task.state.value}; "
            f"same {result.matched_by.replace('_', ' ') if result.matched_by else 'key'})"
        )


def _submit_fields(flags: dict[str, Any]) -> dict[str, Any]:
    """Turn submit's flags into task fields; only the flags given."""
    try:
        fields: dict[str, Any] = {}
        for name in (
            "title",
            "task_type",
            "priority",
            "tenant",
            "source",
            "source_id",
            "assignee",
            "kind",
            "idempotency_key",
            "callback_url",
            "requested_by",
            "traceparent",
        ):
            if flags.get(name) is not None:
                fields[name] = flags[name]
        if flags.get("payload") is not None:
            fields["payload"] = read_json_arg(flags["payload"], "payload")
        if flags.get("label"):
            fields["labels"] = list(flags["label"])
        if flags.get("in_reply_to") is not None:
            fields["in_reply_to"] = str(parse_task_id(flags["in_reply_to"], "in_reply_to"))
        if flags.get("depends_on"):
            fields["depends_on"] = [
                str(parse_task_id(d, "depends_on")) for d in flags["depends_on"]
            ]
        for flag, field in (("timeout", "timeout_secs"), ("max_retries", "max_retries")):
            if flags.get(flag) is not None:
                try:
                    fields[field] = int(flags[flag])
                except ValueError:
                    raise InvalidInput(
                        f"must be a whole number, got {flags[flag]!r}", field
                    ) from None
        if flags.get("run_after") is not None:
            fields["run_after"] = parse_when(flags["run_after"], "run_after")
        return fields
    except InvalidInput as exc:
        fail(str(exc), EXIT_BAD_INPUT)


@click.command("list")
@click.option(
    "--state", multiple=True, type=click.Choice(STATES), help="Only this state (repeatable)."
)
@click.option("--type", "task_type", multiple=True, help="Only this task type (repeatable).")
@click.option("--tenant", help="Only this tenant.")
@click.option("--source", multiple=True, help="Only this source (repeatable).")
@click.option("--source-id", help="Only tasks with this source_id.")
@click.option("--assignee", help="Only tasks with this assignee.")
@click.option("--label", multiple=True, help="Only tasks with this label (repeatable: every one).")
@click.option("--created-after", help="Created at or after: ISO 8601 time or +30s/+5m/+2h/+1d.")
@click.option("--created-before", help="Created before: ISO 8601 time or +30s/+5m/+2h/+1d.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
@click.option("--cursor", help="Continue from a previous page's next_cursor.")
@click.option(
    "--after", "after_id", metavar="ID", help="The tasks after this one (the last id seen)."
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.pass_context
def list_cmd(
    ctx: click.Context,
    state: tuple[str, ...],
    task_type: tuple[str, ...],
    tenant: str | None,
    source: tuple[str, ...],
    source_id: str | None,
    assignee: str | None,
    label: tuple[str, ...],
    created_after: str | None,
    created_before: str | None,
    limit: int,
    cursor: str | None,
    after_id: str | None,
    as_json: bool,
) -> None:
    """List tasks, newest first. Page with --cursor (from the table's "more:" line) or, in
    scripts, --after the last id seen."""
    try:
        after = None if created_after is None else parse_when(created_after, "created_after")
        before = None if created_before is None else parse_when(created_before, "created_before")
    except InvalidInput as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    page = run(
        ctx,
        lambda q: q.list(
            state=state or None,
            task_type=task_type or None,
            source=source or None,
            tenant=tenant,
            source_id=source_id,
            assignee=assignee,
            label=label or None,
            created_after=after,
            created_before=before,
            limit=limit,
            cursor=cursor,
            after=after_id,
        ),
    )
    print_page(page, as_json)


@click.command()
@click.argument("task_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--prompt",
    "prompt",
    is_flag=True,
    help="Print the prompt its command agent is given ([prompts] rendered with the task now).",
)
@click.pass_context
def show(ctx: click.Context, task_id: str, as_json: bool, prompt: bool) -> None:
    """Show one task, unless it has ended why it waits (``waiting``), and the thread it is in,
    if it is in one (a mail and its replies: ``thread``)."""
    tid = _id(task_id)
    if prompt:
        text = run(ctx, lambda q: q.prompt(tid))
        if as_json:
            emit_json({"task_id": str(tid), "prompt": text})
        elif text is None:
            fail(f"no prompt template applies to task {tid} (see [prompts] in the configuration)")
        else:
            click.echo(text, nl=False)
        return

    async def read(q: Any) -> tuple[Any, Any, Any]:
        task, reasons = await q.waiting(tid)
        return task, reasons, await q.thread(tid)

    task, reasons, thread = run(ctx, read)
    in_thread = len(thread) > 1
    if as_json:
        data = task.to_json()
        if reasons:
            data["waiting"] = [r.to_json() for r in reasons]
        if in_thread:
            data["thread"] = [t.to_json() for t in thread]
        emit_json(data)
    else:
        show_task(task)
        for reason in reasons:
            click.echo(f"{'waiting'.ljust(len('idempotency_key'))}  {reason.text}")
        if in_thread:
            click.echo("thread")
            for t in thread:
                mark = "*" if t.id == task.id else " "
                click.echo(
                    f"  {mark} {t.id}  {t.requested_by} -> {t.assignee}  {t.state.value}  {t.title}"
                )


@click.command("tool-result")
@click.argument("task_id", metavar="TASK")
@click.argument("call_id", metavar="CALL")
@click.option(
    "--result", "result_json", required=True, help="The result as JSON, or @file.json (@- stdin)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the task as JSON.")
@click.pass_context
def tool_result(
    ctx: click.Context, task_id: str, call_id: str, result_json: str, as_json: bool
) -> None:
    """Answer tool call CALL of waiting task TASK: the task is queued again and resumes from
    its checkpoint. A call that is no longer awaited is refused (exit 1)."""
    try:
        result = read_json_arg(result_json, "result")
    except InvalidInput as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    tid = _id(task_id)
    actor = ctx.find_root().obj["actor"]
    task = run(ctx, lambda q: q.submit_tool_result(tid, call_id, result, actor=actor))
    if as_json:
        emit_json(task.to_json())
    else:
        click.echo(f"{task.id}  {task.state.value}  (result for {call_id} taken)")


@click.command()
@click.argument("task_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of events.")
@click.pass_context
def events(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """Show a task's audit events."""
    tid = _id(task_id)
    found = run(ctx, lambda q: q.events(tid))
    if as_json:
        emit_json([e.to_json() for e in found])
    else:
        event_rows(found)


@click.command()
@click.argument("task_id", metavar="ID")
@click.option(
    "--stream",
    type=click.Choice(["stdout", "stderr", "log", "traceback"]),
    help="Only this stream (traceback: a handler's exception, kept with its attempt).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of log records.")
@click.pass_context
def logs(ctx: click.Context, task_id: str, stream: str | None, as_json: bool) -> None:
    """Show the captured output of a task's attempts, and the traceback of each attempt a
    handler's exception ended."""
    tid = _id(task_id)
    records = [r for r in run(ctx, lambda q: q.logs(tid)) if stream is None or r.stream == stream]
    if as_json:
        emit_json([r.to_json() for r in records])
        return
    for record in records:
        mark = " (truncated)" if record.truncated else ""
        click.echo(f"--- attempt {record.attempt} {record.stream}{mark} ---")
        click.echo(record.text.rstrip("\n"))


COMMANDS = (
    submit,
    list_cmd,
    show,
    tool_result,
    events,
    logs,
)
"""The commands this module adds to ``agentqueue``."""
