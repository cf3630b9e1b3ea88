"""Python handlers (R16): functions registered per task_type, run in the worker's process.

``async def`` handlers run on the worker's event loop; plain functions run in a thread pool. A
handler gets its own task (with a private copy of the payload) and a :class:`TaskContext`; what it
returns is the task's result, and what it raises is a failure: retryable for timeouts, connection
errors and :class:`Retryable`, not retryable otherwise (raise :class:`Fatal` to say so).
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import functools
import inspect
import math
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from uuid import UUID

from ..domain.audit import canonical_json
from ..domain.models import Task
from ..domain.retry import exception_is_retryable
from ..domain.values import json_copy
from ..logsetup import mask
from .base import AttemptControl, AttemptEnd, AttemptResult, LogChunk, ToolCallRequest

Handler = Callable[[Task, "TaskContext"], Any]

MAX_RESULT_BYTES = 1024 * 1024
MAX_LOG_BYTES = 256 * 1024
MAX_TRACEBACK_CHARS = 32 * 1024
"""A handler's traceback kept with its attempt: its last 32 KiB at most."""


class Retryable(Exception):
    """Raise from a handler to fail the attempt and have it retried (retries permitting)."""

    retryable = True


class Fatal(Exception):
    """Raise from a handler to fail the task for good, without retries."""

    retryable = False


class WaitForTool(BaseException):
    """Raised by :meth:`TaskContext.call_tool` for a call without a result yet: the attempt
    ends and the task waits for the tool (a BaseException, so ``except Exception`` in a
    handler does not swallow it)."""

    def __init__(self, request: ToolCallRequest) -> None:
        super().__init__(request.name)
        self.request = request


class Yielded(BaseException):
    """Raised by :meth:`TaskContext.checkpoint` once the worker asked the attempt to yield:
    the task goes back to the queue with that checkpoint (not a retry)."""


_NONE = object()


class TaskContext:
    """What a running handler may use besides its task. Safe to use from any thread.

    Durable steps: ``checkpoint(state)`` keeps progress with the task, ``checkpoint_data`` is
    the last one kept, and ``await call_tool(name, args)`` returns the recorded result of the
    same call (same tool, same arguments) made on an earlier run, or ends the attempt until the
    call's result arrives; the handler then runs again from the top, with its checkpoint and the
    recorded results. A step guarded by the checkpoint runs once; a call is never made twice.
    """

    def __init__(
        self,
        task: Task,
        control: AttemptControl,
        request_heartbeat: Callable[[], None],
    ) -> None:
        self.task = task
        self.task_id: UUID = task.id
        self.tenant = task.tenant
        self.attempt = task.retry_count + 1
        self.idempotency_key = task.idempotency_key
        self.traceparent = task.traceparent
        """The W3C trace context of this attempt (its span's, with OpenTelemetry; else the
        one taken at submit), or None. With OpenTelemetry the span is also current."""
        self._control = control
        self._request_heartbeat = request_heartbeat
        self._lines: list[str] = []
        self._size = 0
        self._truncated = False
        self._lock = threading.Lock()
        self._checkpoint: Any = _NONE
        self._replay = [c for c in task.tool_calls if c.get("state") == "done"]
        self._replayed: set[int] = set()
        self._saving: asyncio.Task[bool] | None = None
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    # --- durable steps --------------------------------------------------------------------------

    @property
    def checkpoint_data(self) -> Any:
        """The progress last kept with ``checkpoint`` (this run's, else the task's), or None."""
        return self.task.checkpoint if self._checkpoint is _NONE else self._checkpoint

    @property
    def tool_results(self) -> dict[str, Any]:
        """Results of the tool calls answered so far, by call id."""
        return {c["id"]: c.get("result") for c in self._replay}

    @property
    def should_yield(self) -> bool:
        """True once the worker asks this attempt to give its slot to more urgent work: the
        next ``checkpoint()`` ends the attempt (the task is queued again, not as a retry)."""
        return self._control.yielding.is_set()

    def checkpoint(self, state: Any) -> None:
        """Keep ``state`` (JSON) as this task's progress: a later run gets it back as
        ``checkpoint_data``. Ends the attempt here if the worker asked it to yield."""
        try:
            canonical_json(state)
        except (TypeError, ValueError) as exc:
            raise Fatal(f"checkpoint: not JSON ({exc})") from None
        self._checkpoint = copy.deepcopy(state)
        save = self._control.save_checkpoint
        if save is not None and self._loop is not None:
            value = self._checkpoint
            self._loop.call_soon_threadsafe(lambda: self._start_save(save, value))
        if self.should_yield:
            raise Yielded()

    def _start_save(self, save: Callable[[Any], Awaitable[bool]], value: Any) -> None:
        previous = self._saving

        async def run() -> bool:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)  # saves land in order
            return await save(value)

        self._saving = asyncio.ensure_future(run())

    async def call_tool(
        self,
        name: str,
        args: Any = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the tool call's own, not this await's
    ) -> Any:
        """The result of tool ``name`` called with ``args`` (JSON).

        A call answered on an earlier run (same tool, same arguments; repeated calls match in
        the order they were made) returns its recorded result; otherwise the attempt ends here,
        freeing its slot, and the task waits for the result (``timeout`` seconds at most, else
        ``[tools] timeout_secs``: then it is retried, or dead-lettered). Async handlers only.
        """
        try:
            wanted = canonical_json(args)
        except (TypeError, ValueError) as exc:
            raise Fatal(f"call_tool args: not JSON ({exc})") from None
        for index, made in enumerate(self._replay):
            if (
                index not in self._replayed
                and made.get("name") == name
                and canonical_json(made.get("args")) == wanted
            ):
                self._replayed.add(index)
                return copy.deepcopy(made.get("result"))
        raise WaitForTool(ToolCallRequest(name, copy.deepcopy(args), timeout))

    def progress(self) -> tuple[Any, bool]:
        """The checkpoint kept by this run, and whether there is one."""
        return (None, False) if self._checkpoint is _NONE else (self._checkpoint, True)

    @property
    def payload(self) -> Any:
        """This task's own payload (a private copy)."""
        return self.task.payload

    @property
    def cancelled(self) -> bool:
        """True once the attempt must stop (cancelled, lease lost, worker shutting down)."""
        return self._control.cancel.is_set()

    def heartbeat(self) -> None:
        """Renew the lease now rather than at the next regular heartbeat."""
        self._request_heartbeat()

    def log(self, message: str) -> None:
        """Add a line to the task's logs (``agentqueue logs ID``)."""
        line = str(message)
        with self._lock:
            if self._size + len(line) + 1 > MAX_LOG_BYTES:
                self._truncated = True
                return
            self._lines.append(line)
            self._size += len(line) + 1

    def logs(self) -> tuple[LogChunk, ...]:
        """The lines logged so far."""
        with self._lock:
            if not self._lines and not self._truncated:
                return ()
            return (LogChunk("log", "\n".join(self._lines), self._truncated),)


DEADLINE_TICK_SECS = 0.05
"""The async handlers' deadlines are kept to this grain: an attempt is stopped within it after
its deadline."""


class Deadlines:
    """The deadlines of running async handlers, on one loop timer per tick of
    ``DEADLINE_TICK_SECS`` instead of one per attempt. A timer of its own per attempt
    (``asyncio.timeout``) costs a push onto the loop's heap of timers and, as the attempt
    ends, a cancelled entry there: with a thousand attempts under way, a tenth of the drain
    worker's CPU per task (0.89x and 0.91x of it with no deadline at all; 0.94x with these,
    ``benchmarks/drain_ab.py``, benchmarks/HISTORY.md). Here an attempt joins the set of its
    tick, and a tick's timer cancels the attempts still in it."""

    def __init__(self) -> None:
        self._due: dict[int, tuple[asyncio.TimerHandle, set[asyncio.Task[Any]]]] = {}
        self._fired: set[asyncio.Task[Any]] = set()

    def watch(self, deadline: float, task: asyncio.Task[Any]) -> int:
        """Cancel ``task`` once ``deadline`` (a ``time.monotonic()`` instant) has passed,
        within a tick; the tick, for :meth:`unwatch`."""
        tick = math.ceil(deadline / DEADLINE_TICK_SECS)
        entry = self._due.get(tick)
        if entry is None:
            delay = max(0.0, tick * DEADLINE_TICK_SECS - time.monotonic())
            handle = asyncio.get_running_loop().call_later(delay, self._fire, tick)
            entry = self._due[tick] = (handle, set())
        entry[1].add(task)
        return tick

    def unwatch(self, tick: int, task: asyncio.Task[Any]) -> bool:
        """Stop watching ``task``: True if its deadline passed and cancelled it (that cancel is
        withdrawn here, as ``asyncio.timeout`` withdraws its own)."""
        entry = self._due.get(tick)
        if entry is not None:
            entry[1].discard(task)
            if not entry[1]:
                entry[0].cancel()
                del self._due[tick]
        if task in self._fired:
            self._fired.discard(task)
            task.uncancel()
            return True
        return False

    @property
    def watched(self) -> int:
        """Attempts being watched (none once every attempt has ended)."""
        return sum(len(tasks) for _, tasks in self._due.values()) + len(self._fired)

    @property
    def timers(self) -> int:
        """Ticks with a timer set (none once every attempt has ended)."""
        return len(self._due)

    def _fire(self, tick: int) -> None:
        _, tasks = self._due.pop(tick, (None, set()))
        for task in tasks:
            if not task.done():
                self._fired.add(task)
                task.cancel()


def is_async_callable(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` gives a coroutine (an async function, partial or callable)."""
    target = fn.func if isinstance(fn, functools.partial) else fn
    return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)  # noqa: B004 - an async callable object
    )


class HandlerExecutor:
    """Runs the registered handlers of a queue."""

    name = "handlers"

    def __init__(
        self,
        handlers: Mapping[str, Handler],
        max_concurrent: int,
        request_heartbeat: Callable[[UUID], None] = lambda task_id: None,
    ) -> None:
        self._handlers = dict(handlers)
        self.task_types = frozenset(self._handlers)
        self.agents: frozenset[str] = frozenset()
        self.max_concurrent = max_concurrent
        self._request_heartbeat = request_heartbeat
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, max_concurrent), thread_name_prefix="agentqueue-handler"
        )
        self.deadlines = Deadlines()

    def close(self) -> None:
        """Stop the thread pool (threads still running a handler finish in the background)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def run(self, task: Task, control: AttemptControl) -> AttemptResult:
        """Run the handler of ``task.task_type`` until it returns, raises, times out or is
        cancelled."""
        handler = self._handlers[task.task_type]
        own = task.evolve(payload=json_copy(task.payload))
        ctx = TaskContext(own, control, lambda: self._request_heartbeat(task.id))
        if is_async_callable(handler):
            return await self._run_async(handler, own, ctx, control)
        return await self._run_in_thread(handler, own, ctx, control)

    async def _run_async(
        self, handler: Handler, task: Task, ctx: TaskContext, control: AttemptControl
    ) -> AttemptResult:
        # Runs in the attempt's own asyncio task: a stop cancels that task, and so does the
        # deadline (see Deadlines). No extra futures per attempt: this is the hot path.
        current = asyncio.current_task()
        assert current is not None
        control.on_stop(current.cancel)
        tick = self.deadlines.watch(control.deadline, current)
        timed_out = False
        try:
            try:
                value = await _call_async(handler, task, ctx)
            finally:
                timed_out = self.deadlines.unwatch(tick, current)
        except asyncio.CancelledError:
            if timed_out and not current.cancelling():
                return _timed_out(task, ctx)  # the deadline's cancel alone
            if not control.cancel.is_set():
                raise  # the worker itself is being torn down
            current.uncancel()
            return AttemptResult(AttemptEnd.CANCELLED, error=control.cancel_reason,
                                 logs=ctx.logs())  # fmt: skip
        except TimeoutError:
            return _timed_out(task, ctx)
        except (WaitForTool, Yielded) as signal:
            return _paused(signal, ctx)
        except Exception as exc:
            return _failure(exc, ctx)
        finally:
            control.off_stop(current.cancel)
        return _result(value, ctx)

    async def _run_in_thread(
        self, handler: Handler, task: Task, ctx: TaskContext, control: AttemptControl
    ) -> AttemptResult:
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, handler, task, ctx)
        work = loop.run_in_executor(self._pool, call)
        cancel_wait = asyncio.ensure_future(control.cancel.wait())
        try:
            done, _ = await asyncio.wait(
                {work, cancel_wait}, timeout=control.remaining(), return_when="FIRST_COMPLETED"
            )
        finally:
            cancel_wait.cancel()
        if work not in done:
            work.cancel()  # a thread cannot be stopped; its answer is ignored
            if control.cancel.is_set():
                return AttemptResult(AttemptEnd.CANCELLED, error=control.cancel_reason,
                                     logs=ctx.logs())  # fmt: skip
            return _timed_out(task, ctx)
        exc = work.exception()
        if isinstance(exc, (WaitForTool, Yielded)):
            return _paused(exc, ctx)
        if exc is not None:
            return _failure(exc, ctx)
        return _result(work.result(), ctx)


async def _call_async(handler: Handler, task: Task, ctx: TaskContext) -> Any:
    outcome = handler(task, ctx)
    if isinstance(outcome, Awaitable):
        return await outcome
    return outcome


def _paused(signal: BaseException, ctx: TaskContext) -> AttemptResult:
    checkpoint, kept = ctx.progress()
    if isinstance(signal, WaitForTool):
        return AttemptResult(
            AttemptEnd.WAITING_TOOL,
            tool_call=signal.request,
            checkpoint=checkpoint,
            checkpointed=kept,
            logs=ctx.logs(),
        )
    return AttemptResult(
        AttemptEnd.PREEMPTED, checkpoint=checkpoint, checkpointed=kept, logs=ctx.logs()
    )


def _timed_out(task: Task, ctx: TaskContext) -> AttemptResult:
    return AttemptResult(
        AttemptEnd.TIMED_OUT,
        error=f"attempt timed out after {task.timeout_secs}s",
        retryable=True,
        logs=ctx.logs(),
    )


def _failure(exc: BaseException, ctx: TaskContext) -> AttemptResult:
    message = str(exc) or type(exc).__name__
    return AttemptResult(
        AttemptEnd.FAILED,
        error=mask(f"{type(exc).__name__}: {message}")[:2000],
        retryable=exception_is_retryable(exc),
        logs=(*ctx.logs(), traceback_chunk(exc)),
    )


def traceback_chunk(exc: BaseException, limit: int = MAX_TRACEBACK_CHARS) -> LogChunk:
    """The exception's full traceback (chained causes too) as the attempt's ``traceback``
    stream, secrets masked; past ``limit`` characters only its end is kept (the frames nearest
    the raise and the exception itself), marked truncated."""
    text = mask("".join(traceback.format_exception(exc)))
    if len(text) <= limit:
        return LogChunk("traceback", text)
    cut = len(text) - limit
    return LogChunk("traceback", f"[{cut} characters cut]\n{text[cut:]}", truncated=True)


def _result(value: Any, ctx: TaskContext) -> AttemptResult:
    try:
        size = len(canonical_json(value).encode())
    except (TypeError, ValueError) as err:
        return AttemptResult(AttemptEnd.FAILED, error=f"result: not JSON ({err})", logs=ctx.logs())
    if size > MAX_RESULT_BYTES:
        return AttemptResult(
            AttemptEnd.FAILED,
            error=f"result: {size} bytes, over the limit of {MAX_RESULT_BYTES}",
            logs=ctx.logs(),
        )
    return AttemptResult(AttemptEnd.COMPLETED, result=value, logs=ctx.logs())
