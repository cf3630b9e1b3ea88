"""Command agents (R16): a configured command line run per attempt as a sandboxed subprocess.

Each attempt gets a fresh working directory, a scrubbed environment, resource limits and its own
process group, owned by the launcher in :mod:`agentqueue.executors.sandbox` (which also kills the
group if the worker dies). The task arrives as JSON on stdin and in ``task.json``; the result is
``result.json`` in the working directory, else the last non-blank line of stdout as JSON. The exit
code decides the outcome. Timeouts (R6) and cancels (R10) stop the whole process tree: SIGTERM to
the group, a grace period, then the launcher kills every descendant (SIGKILL to the group if it
cannot). When the agent exits by itself, whatever it left running is killed too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..config import AgentSettings
from ..domain.models import Task
from .base import AttemptControl, AttemptEnd, AttemptResult, LogChunk
from .capture import AgentProcess, LastLine

SANDBOX = Path(__file__).with_name("sandbox.py")
"""The launcher script, run with ``python -I -S`` so it starts fast and imports nothing of ours."""

MAX_RESULT_BYTES = 1024 * 1024
"""The largest result (its JSON text) an agent may return."""

RESULT_FILE = "result.json"
TASK_FILE = "task.json"

_LAUNCHER_KILL_SIGNAL = signal.SIGUSR1  # the sandbox's KILL_SIGNAL
_LAUNCHER_KILL_SECS = 0.5  # how long the launcher gets to kill the tree before SIGKILL
_DRAIN_SECS = 1.0  # how long output may keep arriving after the agent has ended
_ERROR_TAIL_LINES = 5
_ERROR_TAIL_CHARS = 500
_EXCERPT_CHARS = 80

_MEMORY_SIGNS = ("MemoryError", "Cannot allocate memory", "out of memory", "bad_alloc")
_OPEN_FILES_SIGNS = ("Too many open files",)


class _BadResult(Exception):
    """The agent's result cannot be accepted; the message says why."""


def agent_view(task: Task) -> dict[str, object]:
    """The task as an agent sees it: its own fields, without the lease token (the agent is
    not the executor; only the worker writes with the token)."""
    view = task.to_json()
    for private in ("lock_token", "locked_at", "heartbeat_at"):
        view.pop(private, None)
    return view


class CommandAgent:
    """An :class:`~agentqueue.executors.base.Executor` that runs ``settings.command`` per attempt.

    Working directories are made under ``settings.workdir`` if set, else ``workdir_root``.
    """

    def __init__(self, name: str, settings: AgentSettings, workdir_root: Path) -> None:
        self.name = name
        self.settings = settings
        self.task_types = frozenset(settings.task_types)
        self.max_concurrent = settings.max_concurrent
        root = Path(settings.workdir) if settings.workdir else Path(workdir_root)
        self.workdir_root = Path(os.path.abspath(root))
        # The agent starts in its working directory: a relative program path means the
        # worker's directory, where the configuration was written for.
        program, *args = settings.command
        if os.sep in program and not os.path.isabs(program):
            program = os.path.abspath(program)
        self.command = [program, *args]

    # --- the attempt ----------------------------------------------------------------------------

    async def run(self, task: Task, control: AttemptControl) -> AttemptResult:
        """Run one attempt of ``task``; never raises for anything the agent did."""
        started = time.monotonic()
        deadline = control.deadline
        if self.settings.timeout_secs is not None:
            deadline = min(deadline, started + self.settings.timeout_secs)
        # The message names the attempt's timeout (what a person configured), not the time left
        # of it when the agent started.
        limit = control.timeout_secs if control.timeout_secs is not None else deadline - started
        if self.settings.timeout_secs is not None:
            limit = min(limit, self.settings.timeout_secs)
        timeout_error = f"attempt timed out after {_seconds(limit)}"
        if control.cancel.is_set():
            return AttemptResult(AttemptEnd.CANCELLED, error=control.cancel_reason or "cancelled")
        if deadline <= started:
            return AttemptResult(AttemptEnd.TIMED_OUT, error=timeout_error, retryable=True)
        try:
            workdir = self._make_workdir(task)
        except OSError as exc:
            return AttemptResult(
                AttemptEnd.FAILED,
                error=f"cannot make a working directory under {self.workdir_root}: {exc}",
                retryable=True,
            )
        try:
            return await self._attempt(task, control, workdir, deadline, timeout_error)
        finally:
            if not self.settings.keep_workdir:
                await asyncio.to_thread(_remove_tree, workdir)

    async def _attempt(
        self,
        task: Task,
        control: AttemptControl,
        workdir: Path,
        deadline: float,
        timeout_error: str,
    ) -> AttemptResult:
        try:
            task_json = json.dumps(agent_view(task), ensure_ascii=False, default=str).encode()
            (workdir / TASK_FILE).write_bytes(task_json)
        except (OSError, ValueError) as exc:
            return AttemptResult(
                AttemptEnd.FAILED, error=f"cannot write {TASK_FILE}: {exc}", retryable=True
            )
        status_r, status_w = os.pipe()
        spec = {
            "command": self.command,
            "parent_pid": os.getpid(),
            "status_fd": status_w,
            "cpu_secs": self.settings.cpu_secs,
            "memory_bytes": (self.settings.memory_mb or 0) * 1024 * 1024 or None,
            "open_files": self.settings.open_files,
        }
        loop = asyncio.get_running_loop()
        agent = AgentProcess(loop, self.settings.max_output_bytes)
        try:
            transport, _ = await loop.subprocess_exec(
                lambda: agent,
                sys.executable,
                "-I",
                "-S",
                str(SANDBOX),
                json.dumps(spec),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=workdir,
                env=self._environment(task, workdir),
                start_new_session=True,
                pass_fds=(status_w,),
            )
        except OSError as exc:
            os.close(status_r)
            return AttemptResult(
                AttemptEnd.FAILED, error=f"cannot start the agent sandbox: {exc}", retryable=True
            )
        finally:
            os.close(status_w)

        try:
            stdin = transport.get_pipe_transport(0)
            if isinstance(stdin, asyncio.WriteTransport):
                # Buffered by the event loop; an agent that never reads it is not waited for.
                stdin.write(task_json)
                stdin.close()
            stopped = await self._supervise(transport, agent, control, deadline)
            await asyncio.wait([agent.output_closed], timeout=_DRAIN_SECS)
        except BaseException:
            # Cancelled from outside: the tree must not outlive the attempt.
            _abandon(transport, agent)
            os.close(status_r)
            raise
        # A descendant that escaped the group may still hold the pipes: stop listening to it.
        transport.close()
        status = _read_status(status_r)
        if status is None and stopped is None:
            # The launcher died before its own clean-up (killed from outside): what is left of
            # its group keeps the group id alive, so it still names only this attempt's tree.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(transport.get_pid(), signal.SIGKILL)
        logs = agent.logs()
        if stopped is AttemptEnd.CANCELLED:
            reason = control.cancel_reason or "cancelled"
            return AttemptResult(AttemptEnd.CANCELLED, error=reason, logs=logs)
        if stopped is AttemptEnd.TIMED_OUT:
            return AttemptResult(
                AttemptEnd.TIMED_OUT, error=timeout_error, retryable=True, logs=logs
            )
        return self._outcome(status, transport.get_returncode(), workdir, agent, logs)

    async def _supervise(
        self,
        transport: asyncio.SubprocessTransport,
        agent: AgentProcess,
        control: AttemptControl,
        deadline: float,
    ) -> AttemptEnd | None:
        """Wait for the agent; stop it at the deadline or on cancel. None if it ended by itself."""
        cancelled = asyncio.create_task(control.cancel.wait())
        waits: set[asyncio.Future[Any]] = {agent.exited, cancelled}
        try:
            done, _ = await asyncio.wait(
                waits,
                timeout=max(0.0, deadline - time.monotonic()),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if agent.exited in done:
                return None
            if cancelled in done:
                await _stop(transport, agent, control.cancel_grace_secs, None)
                return AttemptEnd.CANCELLED
            # A cancel during the grace period cuts it short.
            await _stop(transport, agent, self._kill_grace(control), cancelled)
            return AttemptEnd.TIMED_OUT
        finally:
            cancelled.cancel()

    def _kill_grace(self, control: AttemptControl) -> float:
        if "kill_grace_secs" in self.settings.model_fields_set:
            return self.settings.kill_grace_secs
        return control.kill_grace_secs

    # --- set-up ---------------------------------------------------------------------------------

    def _make_workdir(self, task: Task) -> Path:
        self.workdir_root.mkdir(parents=True, exist_ok=True)
        prefix = f"{task.id}-{task.retry_count + 1}-"
        workdir = Path(tempfile.mkdtemp(prefix=prefix, dir=self.workdir_root))
        (workdir / ".home").mkdir()
        (workdir / ".tmp").mkdir()
        return workdir

    def _environment(self, task: Task, workdir: Path) -> dict[str, str]:
        """Only what the agent needs: nothing of the worker's environment leaks unless allowed."""
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": str(workdir / ".home"),
            "TMPDIR": str(workdir / ".tmp"),
            "LANG": "C.UTF-8",
        }
        # Allowed variables may replace the four above, never the AGENTQUEUE_ ones below.
        env.update({name: os.environ[name] for name in self.settings.env if name in os.environ})
        env.update(
            AGENTQUEUE_TASK_ID=str(task.id),
            AGENTQUEUE_TENANT=task.tenant,
            AGENTQUEUE_TASK_TYPE=task.task_type,
            AGENTQUEUE_ATTEMPT=str(task.retry_count + 1),
            AGENTQUEUE_TASK_FILE=str(workdir / TASK_FILE),
            AGENTQUEUE_RESULT_FILE=str(workdir / RESULT_FILE),
            AGENTQUEUE_WORKDIR=str(workdir),
        )
        return env

    # --- outcome --------------------------------------------------------------------------------

    def _outcome(
        self,
        status: dict[str, Any] | None,
        returncode: int | None,
        workdir: Path,
        agent: AgentProcess,
        logs: tuple[LogChunk, ...],
    ) -> AttemptResult:
        def failed(error: str, retryable: bool = False) -> AttemptResult:
            return AttemptResult(AttemptEnd.FAILED, error=error, retryable=retryable, logs=logs)

        stderr_tail = agent.stderr.tail_text()
        tail = _error_tail(stderr_tail)
        if status is None:
            ended = _describe_returncode(returncode)
            return failed(f"the agent sandbox ended without a status ({ended}){tail}")
        if "error" in status:
            return failed(str(status["error"]))
        hint = self._limit_hint(status, stderr_tail)
        if "signal" in status:
            return failed(f"agent killed by {_signal_name(status['signal'])}{hint}{tail}")
        code = status.get("exit")
        if code in self.settings.success_exit_codes:
            try:
                return AttemptResult(
                    AttemptEnd.COMPLETED, result=self._result(workdir, agent.last_line), logs=logs
                )
            except _BadResult as exc:
                return failed(str(exc))
        retryable = code in self.settings.retryable_exit_codes
        return failed(f"exit code {code}{hint}{tail}", retryable)

    def _limit_hint(self, status: dict[str, Any], stderr_tail: str) -> str:
        """Name the resource limit that most likely ended the agent, as ' (...)' or ''."""
        s = self.settings
        sig = status.get("signal")
        cpu_used = float(status.get("cpu_secs") or 0.0)
        if s.cpu_secs and (
            sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_used >= s.cpu_secs)
        ):
            return f" (CPU time limit of {s.cpu_secs}s exceeded)"
        if s.memory_mb and any(sign in stderr_tail for sign in _MEMORY_SIGNS):
            return f" (memory limit of {s.memory_mb} MiB reached)"
        if any(sign in stderr_tail for sign in _OPEN_FILES_SIGNS):
            return f" (open file limit of {s.open_files} reached)"
        return ""

    def _result(self, workdir: Path, last_line: LastLine) -> Any:
        """The agent's result: result.json if it wrote one, else its last line of stdout."""
        text = _read_result_file(workdir / RESULT_FILE)
        if text is not None:
            if len(text) > MAX_RESULT_BYTES:
                raise _BadResult(f"{RESULT_FILE} is larger than 1 MiB ({len(text)} bytes)")
            try:
                return _parse_json(text)
            except ValueError as exc:
                raise _BadResult(f"{RESULT_FILE} is not valid JSON: {exc}") from None
        if last_line.too_long:
            raise _BadResult(
                "the last line of the agent's output is longer than max_output_bytes "
                f"({self.settings.max_output_bytes} bytes)"
            )
        if last_line.line is None:
            return None
        line = last_line.line
        if len(line) > MAX_RESULT_BYTES:
            raise _BadResult(f"the agent's result is larger than 1 MiB ({len(line)} bytes)")
        try:
            return _parse_json(line)
        except ValueError as exc:
            excerpt = line.decode("utf-8", "replace").strip()
            if len(excerpt) > _EXCERPT_CHARS:
                excerpt = excerpt[:_EXCERPT_CHARS] + "…"
            raise _BadResult(
                f"the agent's output was not JSON: last line {excerpt!r} ({exc})"
            ) from None


# --- process helpers ------------------------------------------------------------------------------


def _signal_group(transport: asyncio.SubprocessTransport, sig: int) -> None:
    # The launcher leads the group and is not yet reaped, so its pid still names this group.
    if transport.get_returncode() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(transport.get_pid(), sig)


def _kill_tree(transport: asyncio.SubprocessTransport) -> None:
    # The launcher kills the tree, descendants that left the group included.
    if transport.get_returncode() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(transport.get_pid(), _LAUNCHER_KILL_SIGNAL)


def _abandon(transport: asyncio.SubprocessTransport, agent: AgentProcess) -> None:
    """Kill the tree without waiting for it; SIGKILL the group a little later if need be."""
    _kill_tree(transport)
    # Closing the transport kills the launcher at once, before it could kill the tree: wait.
    agent.exited.add_done_callback(lambda _: transport.close())
    loop = asyncio.get_running_loop()
    loop.call_later(_LAUNCHER_KILL_SECS, _signal_group, transport, signal.SIGKILL)


async def _stop(
    transport: asyncio.SubprocessTransport,
    agent: AgentProcess,
    grace: float,
    cut_short: asyncio.Task[Any] | None,
) -> None:
    """SIGTERM the process group, wait up to ``grace`` seconds, then kill the whole tree."""
    _signal_group(transport, signal.SIGTERM)
    _signal_group(transport, signal.SIGCONT)  # a stopped agent must run to see its SIGTERM
    waits: set[asyncio.Future[Any]] = {agent.exited}
    if cut_short is not None:
        waits.add(cut_short)
    if grace > 0:
        await asyncio.wait(waits, timeout=grace, return_when=asyncio.FIRST_COMPLETED)
    if not agent.exited.done():
        _kill_tree(transport)
        await asyncio.wait([agent.exited], timeout=_LAUNCHER_KILL_SECS)
    if not agent.exited.done():  # the launcher could not: SIGKILL the group
        _signal_group(transport, signal.SIGKILL)
        await asyncio.wait([agent.exited])


def _read_status(fd: int) -> dict[str, Any] | None:
    """The launcher's status line: it has exited, so the pipe holds all it will ever say."""
    data = b""
    try:
        os.set_blocking(fd, False)
        while chunk := os.read(fd, 65536):
            data += chunk
    except BlockingIOError:
        pass
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        status = json.loads(data)
    except ValueError:
        return None
    return status if isinstance(status, dict) else None


def _read_result_file(path: Path) -> bytes | None:
    """result.json's bytes (at most one more than allowed), or None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _BadResult(f"cannot read {RESULT_FILE}: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _BadResult(f"{RESULT_FILE} is not a regular file")
        data = b""
        while len(data) <= MAX_RESULT_BYTES and (chunk := os.read(fd, 65536)):
            data += chunk
        return data
    except OSError as exc:
        raise _BadResult(f"cannot read {RESULT_FILE}: {exc.strerror}") from None
    finally:
        os.close(fd)


def _parse_json(text: bytes) -> Any:
    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    return json.loads(text, parse_constant=no_constants)


def _remove_tree(path: Path) -> None:
    """Remove a working directory, even one whose agent took its own permissions away."""
    shutil.rmtree(path, ignore_errors=True)
    if not os.path.lexists(path):
        return
    with contextlib.suppress(OSError):
        os.chmod(path, stat.S_IRWXU)
    for dirpath, dirnames, _ in os.walk(path):
        for name in dirnames:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(dirpath, name), stat.S_IRWXU)
    shutil.rmtree(path, ignore_errors=True)


# --- messages -------------------------------------------------------------------------------------


def _seconds(secs: float) -> str:
    secs = round(max(0.0, secs), 1)
    if secs >= 10 or secs == int(secs):
        return f"{secs:.0f}s"
    return f"{secs:.1f}s"


def _signal_name(number: Any) -> str:
    try:
        return signal.Signals(int(number)).name
    except (TypeError, ValueError):
        return f"signal {number}"


def _describe_returncode(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by {_signal_name(-code)}"
    return f"exit code {code}"


def _error_tail(text: str) -> str:
    """The last few lines of stderr, short, as ': ...' or ''."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    tail = "\n".join(lines[-_ERROR_TAIL_LINES:])
    if len(tail) > _ERROR_TAIL_CHARS:
        tail = "…" + tail[-_ERROR_TAIL_CHARS:]
    return f": {tail}" if tail else ""
