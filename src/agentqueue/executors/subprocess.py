"""Command agents (R16): a configured command line run per attempt as a sandboxed subprocess.

Each attempt gets a fresh working directory, a scrubbed environment, resource limits and its own
process group, owned by the launcher in :mod:`agentqueue.executors.sandbox` (which also kills the
group if the worker dies). The task arrives as JSON on stdin and in ``task.json``; when a
``[prompts]`` template applies to it (:mod:`agentqueue.prompts`), its rendering is ``prompt.md``
(named by ``AGENTQUEUE_PROMPT``) and ``"prompt"`` in that JSON, and a template that cannot be
rendered fails the attempt naming it. The result is ``result.json`` in the working directory,
else the last non-blank line of stdout (protocol lines aside) as JSON; one that names a field of
the task's envelope (:mod:`agentqueue.domain.envelope`) is refused. The exit code decides the
outcome. Timeouts (R6) and cancels (R10) stop the whole
process tree: SIGTERM to the group, a grace period, then the launcher kills every descendant
(SIGKILL to the group if it cannot). When the agent exits by itself, whatever it left running is
killed too.

Resumable work (R9, R11): the agent finds its task's last checkpoint in ``checkpoint.json`` and the
tool calls made so far, with their results, in ``tool_results.json``. A stdout line that is a JSON
object with the single key ``checkpoint`` saves progress at once; one with the single key ``reply``
sends the task's reply at once (a mail's answer: the worker records it, since an isolated agent
has no database to write to; one per attempt); one with the single key ``tool_call`` asks for a
tool, and the agent then exits with a success code: the task waits for the
tool without holding a slot and a later attempt resumes. When the worker asks an attempt to yield
its slot, the agent gets SIGUSR1 and ``yield_grace_secs`` to print a checkpoint and exit; the
attempt then ends preempted, however the agent exits. Every outcome carries the latest checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import json
import logging
import math
import os
import re
import select
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..config import AgentSettings
from ..domain.envelope import agent_view, envelope_problem
from ..domain.limits import JSONLimitError, parse_json
from ..domain.models import Task
from ..prompts import PromptError, Prompts
from .base import AttemptControl, AttemptEnd, AttemptResult, LogChunk, ToolCallRequest
from .capture import AgentProcess, LastLine
from .isolation import (
    Confinement,
    PidsCgroup,
    bwrap_command,
    default_user,
    landlock_ruleset,
    resolve,
)

log = logging.getLogger("agentqueue.worker")

SANDBOX = Path(__file__).with_name("sandbox.py")
"""The launcher script, run with ``python -I -S`` so it starts fast and imports nothing of ours."""

MAX_RESULT_BYTES = 1024 * 1024
"""The largest result (its JSON text) an agent may return."""

MAX_CHECKPOINT_BYTES = 1024 * 1024
"""The longest checkpoint line an agent may print."""

MAX_TOOL_TIMEOUT_SECS = 7 * 86_400
"""The longest timeout an agent may ask for a tool call."""

RESULT_FILE = "result.json"
TASK_FILE = "task.json"
CHECKPOINT_FILE = "checkpoint.json"
TOOL_RESULTS_FILE = "tool_results.json"
PROMPT_FILE = "prompt.md"

YIELD_SIGNAL = signal.SIGUSR1
"""Sent to the agent when the worker wants its slot back: checkpoint and exit."""

_TOOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
_TOOL_CALL_FIELDS = ("name", "args", "timeout_secs")
_SAVE_SETTLE_SECS = 10.0  # how long the end of an attempt waits for a checkpoint being saved

_LAUNCHER_KILL_SIGNAL = signal.SIGUSR1  # the sandbox's KILL_SIGNAL
_LAUNCHER_KILL_SECS = 0.5  # how long the launcher gets to kill the tree before SIGKILL
_DRAIN_SECS = 1.0  # how long output may keep arriving after the agent has ended
_ERROR_TAIL_LINES = 5
_ERROR_TAIL_CHARS = 500
_EXCERPT_CHARS = 80

_MEMORY_SIGNS = ("MemoryError", "Cannot allocate memory", "out of memory", "bad_alloc")
_OPEN_FILES_SIGNS = ("Too many open files",)
_PROCESS_SIGNS = ("Resource temporarily unavailable", "fork: retry", "Cannot fork")
_FILE_SIZE_SIGNS = ("File too large",)
_MIB = 1024 * 1024
_DISK_POLL_SECS = 0.2  # how often the working directory's size is checked
_SANDBOX_SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1]
WARM_LAUNCHERS = 4
"""At most this many launchers (and never more than the agent's ``max_concurrent``) are kept
started ahead of their attempts, per agent."""


@dataclasses.dataclass
class _Warm:
    """A launcher started ahead of its attempt (``sandbox.py --warm``), waiting for its SPEC."""

    loop: asyncio.AbstractEventLoop
    transport: asyncio.SubprocessTransport
    agent: AgentProcess
    spec_w: int
    status_r: int
    cgroup: PidsCgroup | None

    def usable(self, loop: asyncio.AbstractEventLoop) -> bool:
        return self.loop is loop and self.transport.get_returncode() is None

    def ready(self) -> bool:
        """Whether it has armed itself and waits (it said so on the status pipe)."""
        readable, _, _ = select.select([self.status_r], [], [], 0)
        return bool(readable)

    def readiness(self) -> asyncio.Future[None]:
        """Done when it is ready (or gone): the status pipe has something to read."""
        done: asyncio.Future[None] = self.loop.create_future()

        def readable() -> None:
            self.loop.remove_reader(self.status_r)
            if not done.done():
                done.set_result(None)

        self.loop.add_reader(self.status_r, readable)
        return done

    def stop_watching(self) -> None:
        self.loop.remove_reader(self.status_r)

    def discard(self, keep_cgroup: bool = False) -> None:
        """Let it go: it reads no SPEC and exits; its cgroup goes with it unless kept."""
        for fd in (self.spec_w, self.status_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(Exception):
            self.transport.close()  # kills it if it has not gone yet
        if self.cgroup is not None and not keep_cgroup:
            with contextlib.suppress(OSError):
                self.cgroup.remove()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.close(fd)


class _BadResult(Exception):
    """The agent's result cannot be accepted; the message says why."""


class _BadProtocolLine(Exception):
    """A protocol line cannot be accepted; the message names the field and says why."""


class AgentProtocol:
    """What an agent said in protocol lines on stdout: its checkpoints, its reply and its tool
    call.

    :meth:`line` is called from the output reader, so it never waits: a checkpoint is saved by
    a background task, at most one save at a time, always ending with the latest checkpoint; a
    reply is sent by another. The first bad line (or a reply refused) is kept in ``error`` and
    sets ``failed``.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        save: Callable[[Any], Awaitable[bool]] | None = None,
        send_reply: Callable[[Any], Awaitable[str | None]] | None = None,
    ) -> None:
        self.checkpoint: Any = None
        self.checkpointed = False
        self.tool_call: ToolCallRequest | None = None
        self.error: str | None = None
        self.failed: asyncio.Future[None] = loop.create_future()
        self._loop = loop
        self._save = save
        self._saving: asyncio.Task[None] | None = None
        self._unsaved = False
        self._send_reply = send_reply
        self._replying: asyncio.Task[None] | None = None

    def line(self, line: bytes) -> bool:
        """Handle ``line`` if it is a protocol line (True), else leave it alone (False)."""
        try:
            message = _parse_json(line)
        except (ValueError, RecursionError):
            return False
        if not isinstance(message, dict) or len(message) != 1:
            return False
        ((key, value),) = message.items()
        if key not in ("checkpoint", "tool_call", "reply"):
            return False
        if self.error is not None:
            return True  # the attempt has failed already; later lines change nothing
        try:
            if key == "checkpoint":
                if len(line) > MAX_CHECKPOINT_BYTES:
                    raise _BadProtocolLine(
                        f"checkpoint: larger than 1 MiB ({len(line)} bytes on its line)"
                    )
                self._checkpoint(value)
            elif key == "reply":
                self._reply(value)
            else:
                if self.tool_call is not None:
                    raise _BadProtocolLine(
                        "tool_call: a second tool call in one attempt (one call per attempt: "
                        "exit after asking, and resume from the checkpoint with its result)"
                    )
                self.tool_call = _tool_call(value)
        except _BadProtocolLine as exc:
            self.error = str(exc)
            self.failed.set_result(None)
        return True

    def carried(self, result: AttemptResult) -> AttemptResult:
        """``result`` with the latest checkpoint, for the worker to keep with the task."""
        if not self.checkpointed:
            return result
        return dataclasses.replace(result, checkpoint=self.checkpoint, checkpointed=True)

    async def settle(self, wait_secs: float) -> None:
        """Wait (up to ``wait_secs``) until the latest checkpoint is saved and the reply sent:
        the outcome written next is judged on them (a mail's timeout looks for its reply)."""
        for what, job in (("a checkpoint", self._saving), ("the reply", self._replying)):
            if job is None or job.done():
                continue
            await asyncio.wait([job], timeout=wait_secs)
            if not job.done():
                log.warning("%s was not saved within %.0fs; the attempt ends", what, wait_secs)
                job.cancel()

    def abandon(self) -> None:
        """Stop saving (the attempt was torn down from outside)."""
        for job in (self._saving, self._replying):
            if job is not None:
                job.cancel()

    def _reply(self, value: Any) -> None:
        if self._replying is not None:
            raise _BadProtocolLine("reply: a second reply in one attempt (one reply per task)")
        if self._send_reply is None:
            raise _BadProtocolLine("reply: this executor records no replies")
        self._replying = self._loop.create_task(self._send(self._send_reply, value))

    async def _send(self, send: Callable[[Any], Awaitable[str | None]], value: Any) -> None:
        try:
            refused = await send(value)
        except Exception:
            # Not recorded (the database away, say): the task is judged without it.
            log.exception("sending a reply failed")
            return
        if refused is not None and self.error is None:
            self.error = refused
            self.failed.set_result(None)

    def _checkpoint(self, value: Any) -> None:
        self.checkpoint, self.checkpointed = value, True
        if self._save is None:
            return
        self._unsaved = True
        if self._saving is None or self._saving.done():
            self._saving = self._loop.create_task(self._save_latest(self._save))

    async def _save_latest(self, save: Callable[[Any], Awaitable[bool]]) -> None:
        # Checkpoints printed during a save are not saved one by one: the loop picks the
        # latest when the save returns.
        while self._unsaved:
            self._unsaved = False
            try:
                await save(self.checkpoint)
            except Exception:
                # The attempt's result carries the checkpoint too: the worker keeps it then.
                log.exception("saving a checkpoint failed")


def _tool_call(value: Any) -> ToolCallRequest:
    """A tool_call line's request, checked."""
    if not isinstance(value, dict):
        raise _BadProtocolLine(
            f"tool_call: must be an object with {', '.join(_TOOL_CALL_FIELDS)}, "
            f"not {_excerpt(value)}"
        )
    for key in value:
        if key not in _TOOL_CALL_FIELDS:
            raise _BadProtocolLine(
                f"tool_call.{key[:_EXCERPT_CHARS]}: unknown field "
                f"(known: {', '.join(_TOOL_CALL_FIELDS)})"
            )
    if "name" not in value:
        raise _BadProtocolLine("tool_call.name: required")
    name = value["name"]
    if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
        raise _BadProtocolLine(
            "tool_call.name: must be 1-64 characters, letters, digits and _.:- and starting "
            f"with a letter or digit, not {_excerpt(name)}"
        )
    timeout = value.get("timeout_secs")
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 < timeout <= MAX_TOOL_TIMEOUT_SECS
    ):
        raise _BadProtocolLine(
            f"tool_call.timeout_secs: must be a positive number of seconds, at most "
            f"{MAX_TOOL_TIMEOUT_SECS} (7 days), not {_excerpt(timeout)}"
        )
    return ToolCallRequest(name, value.get("args"), None if timeout is None else float(timeout))


def tool_results(task: Task) -> dict[str, dict[str, Any]]:
    """The task's tool calls as an agent reads them: by call id, each its name, args, state and
    result."""
    calls: dict[str, dict[str, Any]] = {}
    for call in task.tool_calls:
        if isinstance(call, dict) and call.get("id") is not None:
            calls[str(call["id"])] = {
                "name": call.get("name"),
                "args": call.get("args"),
                "state": call.get("state"),
                "result": call.get("result"),
            }
    return calls


async def _start_launcher(
    loop: asyncio.AbstractEventLoop,
    agent: AgentProcess,
    args: list[str],
    *,
    cwd: str | Path,
    env: dict[str, str],
    pass_fds: tuple[int, ...],
) -> asyncio.SubprocessTransport:
    """The launcher (``python -I -S sandbox.py ARGS``) in a session of its own, its stdin,
    stdout and stderr piped to ``agent``: started ahead (``--warm``) or for one attempt."""
    transport, _ = await loop.subprocess_exec(
        lambda: agent,
        sys.executable,
        "-I",
        "-S",
        str(SANDBOX),
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=env,
        start_new_session=True,
        pass_fds=pass_fds,
    )
    return transport


class CommandAgent:
    """An :class:`~agentqueue.executors.base.Executor` that runs ``settings.command`` per attempt.

    Working directories are made under ``settings.workdir`` if set, else ``workdir_root``.
    """

    def __init__(
        self,
        name: str,
        settings: AgentSettings,
        workdir_root: Path,
        confinement: Confinement | None = None,
        prompts: Prompts | None = None,
        warm: bool = False,
    ) -> None:
        """``warm``: keep launchers started ahead of attempts (a worker does; whoever asks for
        them must :meth:`close` the agent before its event loop ends)."""
        self.name = name
        self.settings = settings
        self.prompts = prompts if prompts else None
        if confinement is None:
            # Built alone (not by a worker): the defaults, without the worker's own files.
            confinement, fallback = resolve(name, settings, user=default_user())
            if fallback is not None:
                log.warning("agent %s runs without a sandbox: %s", name, fallback)
        self.confinement = confinement
        self._net_filter = confinement.net_filter
        self.task_types = frozenset(settings.task_types)
        self.agents = frozenset({name})
        self.max_concurrent = settings.max_concurrent
        root = Path(settings.workdir) if settings.workdir else Path(workdir_root)
        self.workdir_root = Path(os.path.abspath(root))
        # The agent starts in its working directory: a relative program path means the
        # worker's directory, where the configuration was written for.
        program, *args = settings.command
        if os.sep in program and not os.path.isabs(program):
            program = os.path.abspath(program)
        self.command = [program, *args]
        # Launchers started ahead of their attempts.
        self._warm: list[_Warm] = []
        self._warming = 0
        self._starting: set[asyncio.Task[None]] = set()
        self._warm_size = min(max(self.max_concurrent, 2), WARM_LAUNCHERS) if warm else 0
        self._warm_count = 0

    def close(self) -> None:
        """Let go of what the agent shares with the worker's other agents: the network filter's
        cgroup, removed with its last user, and the launchers started ahead (the worker calls
        this when it stops)."""
        self._warm_size = 0
        for starting in self._starting:
            starting.cancel()
        warm, self._warm = self._warm, []
        for launcher in warm:
            launcher.discard()
        net_filter, self._net_filter = self._net_filter, None
        if net_filter is not None:
            net_filter.release()

    # --- launchers started ahead ----------------------------------------------------------------

    async def warm_up(self, within: float = 10.0) -> int:
        """Start the launchers kept ahead (if this agent keeps any) and wait, at most
        ``within`` seconds, until each is ready; how many are."""
        if self._warm_size:
            self._fill(asyncio.get_running_loop())
            await asyncio.gather(*self._starting)
            waits = [w.readiness() for w in self._warm if not w.ready()]
            if waits:
                await asyncio.wait(waits, timeout=within)
            for w in self._warm:
                w.stop_watching()
        return sum(1 for w in self._warm if w.ready())

    def _fill(self, loop: asyncio.AbstractEventLoop) -> None:
        while len(self._warm) + self._warming < self._warm_size:
            self._warming += 1
            starting = loop.create_task(self._start_warm(loop))
            self._starting.add(starting)
            starting.add_done_callback(self._starting.discard)

    def _take_warm(self) -> _Warm | None:
        """A launcher started ahead for this loop, if one is ready; more are started behind it."""
        loop = asyncio.get_running_loop()
        taken = None
        while self._warm and taken is None:
            launcher = self._warm.pop(0)
            if launcher.usable(loop):
                taken = launcher
            else:
                launcher.discard()
        self._fill(loop)
        return taken

    async def _start_warm(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start one launcher ahead: it arms itself, joins the attempt's cgroups and waits."""
        cgroup = None
        fds: list[int] = []
        try:
            self._warm_count += 1
            cgroup = await asyncio.to_thread(
                PidsCgroup.make,
                f"warm-{id(self):x}-{self._warm_count}",
                # The launcher is in the group too, beside the agent's processes.
                self.settings.max_processes + 1,
            )
            net_filter = self.confinement.net_filter
            join = [p for p in (cgroup and cgroup.procs, net_filter and net_filter.procs) if p]
            deny = self.confinement.deny_ports
            # The worker's one ruleset (made once), enforced by the launcher as it warms up.
            landlock = landlock_ruleset(deny) if deny else None
            spec_r, spec_w = os.pipe()
            status_r, status_w = os.pipe()
            fds = [spec_r, spec_w, status_r, status_w]
            warm = {
                "parent_pid": os.getpid(),
                "spec_fd": spec_r,
                "status_fd": status_w,
                "join": join,
                "landlock_fd": landlock,
            }
            agent = AgentProcess(loop, self.settings.max_output_bytes)
            transport = await _start_launcher(
                loop,
                agent,
                ["--warm", json.dumps(warm)],
                cwd="/",
                env={},
                pass_fds=(spec_r, status_w) if landlock is None else (spec_r, status_w, landlock),
            )
            os.close(spec_r)
            os.close(status_w)
            fds = []
            launcher = _Warm(loop, transport, agent, spec_w, status_r, cgroup)
            if self._warm_size:
                self._warm.append(launcher)
            else:  # closed meanwhile
                launcher.discard()
            cgroup = None
        except Exception as exc:
            # Attempts start cold instead; nothing is lost but their start-up time.
            log.debug("agent %s: no launcher started ahead: %s", self.name, exc)
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            if cgroup is not None:
                with contextlib.suppress(OSError):
                    await asyncio.to_thread(cgroup.remove)
        finally:
            self._warming -= 1

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
        if control.yielding.is_set():  # nothing ran, so nothing to checkpoint
            return AttemptResult(AttemptEnd.PREEMPTED)
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
        cpu_secs = self.settings.cpu_secs or max(1, math.ceil(limit))
        warm = self._take_warm() if self._warm_size else None
        if warm is not None:
            cgroup = warm.cgroup
        else:
            cgroup = await asyncio.to_thread(
                PidsCgroup.make, workdir.name, self.settings.max_processes
            )
        result: AttemptResult | None = None
        try:
            result = await self._attempt(
                task, control, workdir, deadline, timeout_error, cpu_secs, cgroup, warm
            )
            return result
        finally:
            if cgroup is not None:
                await asyncio.to_thread(cgroup.remove)
            keep = self.confinement.keep_workdirs
            if keep == "never" or (
                keep == "failed" and result is not None and result.end is AttemptEnd.COMPLETED
            ):
                await asyncio.to_thread(_remove_tree, workdir)

    async def _attempt(
        self,
        task: Task,
        control: AttemptControl,
        workdir: Path,
        deadline: float,
        timeout_error: str,
        cpu_secs: int,
        cgroup: PidsCgroup | None,
        warm: _Warm | None = None,
    ) -> AttemptResult:
        view: dict[str, Any] = agent_view(task)
        prompt = None
        if self.prompts is not None:
            try:
                prompt = self.prompts.render_task(task)
            except PromptError as exc:
                # The template, not the task, is wrong: another attempt renders the same.
                return AttemptResult(AttemptEnd.FAILED, error=f"prompt: {exc}")
            if prompt is not None:
                view["prompt"] = prompt
        inputs: dict[str, Any] = {
            TASK_FILE: view,
            CHECKPOINT_FILE: task.checkpoint,
            TOOL_RESULTS_FILE: tool_results(task),
        }
        task_json = b""
        if prompt is not None:
            try:
                (workdir / PROMPT_FILE).write_text(prompt, encoding="utf-8")
            except (OSError, ValueError) as exc:
                return AttemptResult(
                    AttemptEnd.FAILED, error=f"cannot write {PROMPT_FILE}: {exc}", retryable=True
                )
        for name, value in inputs.items():
            try:
                data = json.dumps(value, ensure_ascii=False, default=str).encode()
                (workdir / name).write_bytes(data)
            except (OSError, ValueError, TypeError) as exc:
                return AttemptResult(
                    AttemptEnd.FAILED, error=f"cannot write {name}: {exc}", retryable=True
                )
            if name == TASK_FILE:
                task_json = data
        confinement = self.confinement
        disk_bytes = self.settings.disk_mb * _MIB
        command = self.command
        if confinement.bwrap:
            command = bwrap_command(
                confinement,
                self.command,
                workdir=workdir,
                workdir_root=self.workdir_root,
                tmp_bytes=disk_bytes,
            )
        user = confinement.user
        landlock = landlock_ruleset(confinement.deny_ports) if confinement.deny_ports else None
        net_filter = confinement.net_filter
        spec = {
            "command": command,
            "program": self.command[0] if confinement.bwrap else None,
            "parent_pid": os.getpid(),
            "status_fd": -1,  # set below
            "cpu_secs": cpu_secs,
            "memory_bytes": (self.settings.memory_mb or 0) * _MIB or None,
            "open_files": self.settings.open_files,
            "file_bytes": disk_bytes,
            # RLIMIT_NPROC counts every process of the user: only without a cgroup, and only
            # for a user of the agents' own.
            "processes": self.settings.max_processes if cgroup is None and user else None,
            "cgroup_procs": cgroup.procs if cgroup is not None else None,
            "net_cgroup_procs": net_filter.procs if net_filter is not None else None,
            "landlock_fd": landlock,
            # Under bwrap as root, the sandbox changes the user (see bwrap_command).
            "user": list(user) if user and not confinement.bwrap else None,
            "ignore_signals": [int(s) for s in _SANDBOX_SIGNALS] if confinement.bwrap else None,
        }
        loop = asyncio.get_running_loop()
        disk = _DiskWatch(loop, workdir, disk_bytes)
        protocol = AgentProtocol(loop, control.save_checkpoint, control.send_reply)
        env = self._environment(task, workdir, prompt is not None)
        started = await self._hand_over(warm, spec, workdir, env, protocol) if warm else None
        if started is not None:
            transport, agent, status_r = started
        else:
            status_r, status_w = os.pipe()
            spec["status_fd"] = status_w
            agent = AgentProcess(loop, self.settings.max_output_bytes, protocol.line)
            try:
                transport = await _start_launcher(
                    loop,
                    agent,
                    [json.dumps(spec)],
                    cwd=workdir,
                    env=env,
                    pass_fds=(status_w,) if landlock is None else (status_w, landlock),
                )
            except OSError as exc:
                os.close(status_r)
                return AttemptResult(
                    AttemptEnd.FAILED,
                    error=f"cannot start the agent sandbox: {exc}",
                    retryable=True,
                )
            finally:
                os.close(status_w)

        try:
            stdin = transport.get_pipe_transport(0)
            if isinstance(stdin, asyncio.WriteTransport):
                # Buffered by the event loop; an agent that never reads it is not waited for.
                stdin.write(task_json)
                stdin.close()
            watching = loop.create_task(disk.watch())
            try:
                stopped = await self._supervise(
                    transport, agent, protocol, control, deadline, disk.exceeded
                )
            finally:
                watching.cancel()
            await asyncio.wait([agent.output_closed], timeout=_DRAIN_SECS)
        except BaseException:
            # Cancelled from outside: the tree must not outlive the attempt.
            _abandon(transport, agent)
            protocol.abandon()
            os.close(status_r)
            raise
        # A descendant that escaped the group may still hold the pipes: stop listening to it.
        transport.close()
        status = _read_status(status_r)
        if status is not None:
            status["cpu_limit"] = cpu_secs
            exit_code = status.get("exit")
            if confinement.bwrap and isinstance(exit_code, int) and 128 < exit_code <= 192:
                # bubblewrap reports an agent killed by a signal as 128 + its number.
                status["signal"] = status.pop("exit") - 128
        if status is None and stopped is None:
            # The launcher died before its own clean-up (killed from outside): what is left of
            # its group keeps the group id alive, so it still names only this attempt's tree.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(transport.get_pid(), signal.SIGKILL)
        try:
            # The worker writes the outcome next: a save still running must not land after it.
            await protocol.settle(_SAVE_SETTLE_SECS)
        except BaseException:
            protocol.abandon()
            raise
        if disk.error is not None:
            return protocol.carried(
                AttemptResult(AttemptEnd.FAILED, error=disk.error, logs=agent.logs())
            )
        ending = self._ending(
            stopped, status, transport, workdir, agent, protocol, control, timeout_error
        )
        return protocol.carried(ending)

    def _ending(
        self,
        stopped: AttemptEnd | None,
        status: dict[str, Any] | None,
        transport: asyncio.SubprocessTransport,
        workdir: Path,
        agent: AgentProcess,
        protocol: AgentProtocol,
        control: AttemptControl,
        timeout_error: str,
    ) -> AttemptResult:
        """The attempt's outcome once the agent has ended (``stopped`` says why, if it did not
        end by itself)."""
        logs = agent.logs()
        if stopped is AttemptEnd.CANCELLED:
            reason = control.cancel_reason or "cancelled"
            return AttemptResult(AttemptEnd.CANCELLED, error=reason, logs=logs)
        if stopped is AttemptEnd.TIMED_OUT:
            return AttemptResult(
                AttemptEnd.TIMED_OUT, error=timeout_error, retryable=True, logs=logs
            )
        if protocol.error is not None:
            # A broken protocol line is a bug in the agent: running it again would not help.
            return AttemptResult(AttemptEnd.FAILED, error=protocol.error, logs=logs)
        if stopped is AttemptEnd.PREEMPTED:
            exit_code = status.get("exit") if status is not None else None
            if protocol.tool_call is not None and exit_code in self.settings.success_exit_codes:
                # It asked for a tool and exited as the protocol says: waiting frees the slot
                # too, and resumes where it left off rather than redoing the step.
                return AttemptResult(
                    AttemptEnd.WAITING_TOOL, tool_call=protocol.tool_call, logs=logs
                )
            # Whatever its exit code: an agent that yielded has not finished its work.
            return AttemptResult(AttemptEnd.PREEMPTED, logs=logs)
        return self._outcome(status, transport.get_returncode(), workdir, agent, protocol, logs)

    async def _supervise(
        self,
        transport: asyncio.SubprocessTransport,
        agent: AgentProcess,
        protocol: AgentProtocol,
        control: AttemptControl,
        deadline: float,
        disk_full: asyncio.Future[None],
    ) -> AttemptEnd | None:
        """Wait for the agent; stop it at the deadline, on cancel, on a bad protocol line or
        when its directory outgrows its disk limit, and ask it to yield when the worker wants
        its slot back. None if it ended by itself; FAILED if it was stopped for a bad protocol
        line or its disk use."""
        cancelled = asyncio.create_task(control.cancel.wait())
        yielding = asyncio.create_task(control.yielding.wait())
        waits: set[asyncio.Future[Any]] = {
            agent.exited,
            cancelled,
            yielding,
            protocol.failed,
            disk_full,
        }
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
            if protocol.failed in done or disk_full in done:
                await _stop(
                    transport, agent, 0.0 if disk_full in done else control.cancel_grace_secs, None
                )
                return AttemptEnd.FAILED
            if yielding in done:
                return await self._yield(transport, agent, control, deadline, cancelled)
            # A cancel during the grace period cuts it short.
            await _stop(transport, agent, self._kill_grace(control), cancelled)
            return AttemptEnd.TIMED_OUT
        finally:
            cancelled.cancel()
            yielding.cancel()

    async def _yield(
        self,
        transport: asyncio.SubprocessTransport,
        agent: AgentProcess,
        control: AttemptControl,
        deadline: float,
        cancelled: asyncio.Task[Any],
    ) -> AttemptEnd:
        """Ask the agent to checkpoint and exit (R11); stop it if it has not within the grace.
        A cancel or the deadline during the grace wins as usual."""
        if transport.get_returncode() is None:  # its pid still names this group
            await asyncio.to_thread(_signal_agents, transport.get_pid(), YIELD_SIGNAL)
        _signal_group(transport, signal.SIGCONT)  # a stopped agent must run to see it
        remaining = max(0.0, deadline - time.monotonic())
        done, _ = await asyncio.wait(
            {agent.exited, cancelled},
            timeout=min(control.yield_grace_secs, remaining),
            return_when=asyncio.FIRST_COMPLETED,
        )
        if agent.exited in done:
            return AttemptEnd.PREEMPTED
        if cancelled in done:
            await _stop(transport, agent, control.cancel_grace_secs, None)
            return AttemptEnd.CANCELLED
        if remaining <= control.yield_grace_secs:  # the deadline came first
            await _stop(transport, agent, self._kill_grace(control), cancelled)
            return AttemptEnd.TIMED_OUT
        await _stop(transport, agent, self._kill_grace(control), cancelled)
        return AttemptEnd.PREEMPTED

    def _kill_grace(self, control: AttemptControl) -> float:
        if "kill_grace_secs" in self.settings.model_fields_set:
            return self.settings.kill_grace_secs
        return control.kill_grace_secs

    # --- set-up ---------------------------------------------------------------------------------

    def _make_workdir(self, task: Task) -> Path:
        user = self.confinement.user
        if not self.workdir_root.is_dir():
            self.workdir_root.mkdir(parents=True, exist_ok=True)
            if user is not None:  # its user reaches its own directory, never lists the others
                os.chmod(self.workdir_root, 0o711)
        prefix = f"{task.id}-{task.retry_count + 1}-"
        workdir = Path(tempfile.mkdtemp(prefix=prefix, dir=self.workdir_root))
        (workdir / ".home").mkdir()
        (workdir / ".tmp").mkdir()
        if user is not None:
            for path in (workdir, workdir / ".home", workdir / ".tmp"):
                os.chown(path, *user)
        return workdir

    async def _hand_over(
        self,
        warm: _Warm,
        spec: dict[str, Any],
        workdir: Path,
        env: dict[str, str],
        protocol: AgentProtocol,
    ) -> tuple[asyncio.SubprocessTransport, AgentProcess, int] | None:
        """Give a launcher started ahead its SPEC; None if it is gone (start one cold)."""
        spec = {**spec, "cwd": str(workdir), "env": env}
        try:
            # A SPEC longer than a pipe holds is read by the launcher as it is written.
            await asyncio.to_thread(_write_all, warm.spec_w, json.dumps(spec).encode())
        except OSError as exc:
            log.debug("agent %s: the launcher started ahead is gone: %s", self.name, exc)
            warm.discard(keep_cgroup=True)  # the attempt's group still: a cold start joins it
            return None
        warm.agent.last_line.bind(protocol.line)
        return warm.transport, warm.agent, warm.status_r

    def _environment(self, task: Task, workdir: Path, prompted: bool = False) -> dict[str, str]:
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
            AGENTQUEUE_CHECKPOINT=str(workdir / CHECKPOINT_FILE),
            AGENTQUEUE_TOOL_RESULTS=str(workdir / TOOL_RESULTS_FILE),
            AGENTQUEUE_WORKDIR=str(workdir),
        )
        if prompted:
            env["AGENTQUEUE_PROMPT"] = str(workdir / PROMPT_FILE)
        if task.idempotency_key:
            # Irreversible actions (a payment, a deletion) can be made idempotent downstream.
            env["AGENTQUEUE_IDEMPOTENCY_KEY"] = task.idempotency_key
        if task.traceparent:
            # W3C trace context: the attempt's span (or the submit's context without one).
            env["TRACEPARENT"] = task.traceparent
        return env

    # --- outcome --------------------------------------------------------------------------------

    def _outcome(
        self,
        status: dict[str, Any] | None,
        returncode: int | None,
        workdir: Path,
        agent: AgentProcess,
        protocol: AgentProtocol,
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
            if protocol.tool_call is not None:
                return AttemptResult(
                    AttemptEnd.WAITING_TOOL, tool_call=protocol.tool_call, logs=logs
                )
            try:
                result = self._result(workdir, agent.last_line)
            except _BadResult as exc:
                return failed(str(exc))
            problem = envelope_problem(result)
            if problem is not None:  # like a malformed result: the same agent would say it again
                return failed(problem)
            return AttemptResult(AttemptEnd.COMPLETED, result=result, logs=logs)
        retryable = code in self.settings.retryable_exit_codes
        return failed(f"exit code {code}{hint}{tail}", retryable)

    def _limit_hint(self, status: dict[str, Any], stderr_tail: str) -> str:
        """Name the resource limit that most likely ended the agent, as ' (...)' or ''."""
        s = self.settings
        sig = status.get("signal")
        cpu_used = float(status.get("cpu_secs") or 0.0)
        cpu_limit = status.get("cpu_limit") or s.cpu_secs
        if cpu_limit and (
            sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_used >= cpu_limit)
        ):
            return f" (CPU time limit of {cpu_limit}s exceeded)"
        if sig == signal.SIGXFSZ or any(sign in stderr_tail for sign in _FILE_SIZE_SIGNS):
            return f" (disk limit of {s.disk_mb} MiB: no file may be larger)"
        if s.memory_mb and any(sign in stderr_tail for sign in _MEMORY_SIGNS):
            return f" (memory limit of {s.memory_mb} MiB reached)"
        if any(sign in stderr_tail for sign in _OPEN_FILES_SIGNS):
            return f" (open file limit of {s.open_files} reached)"
        if any(sign in stderr_tail for sign in _PROCESS_SIGNS):
            return f" (process limit of {s.max_processes} reached)"
        return ""

    def _result(self, workdir: Path, last_line: LastLine) -> Any:
        """The agent's result: result.json if it wrote one, else its last line of stdout."""
        text = _read_result_file(workdir / RESULT_FILE)
        if text is not None:
            if len(text) > MAX_RESULT_BYTES:
                raise _BadResult(f"{RESULT_FILE} is larger than 1 MiB ({len(text)} bytes)")
            try:
                return _parse_json(text)
            except JSONLimitError as exc:
                raise _BadResult(f"{RESULT_FILE}: {exc}") from None
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
        except JSONLimitError as exc:
            raise _BadResult(f"the agent's result (its last line): {exc}") from None
        except ValueError as exc:
            excerpt = line.decode("utf-8", "replace").strip()
            if len(excerpt) > _EXCERPT_CHARS:
                excerpt = excerpt[:_EXCERPT_CHARS] + "…"
            raise _BadResult(
                f"the agent's output was not JSON: last line {excerpt!r} ({exc})"
            ) from None


# --- process helpers ------------------------------------------------------------------------------


class _DiskWatch:
    """Checks the size of an attempt's working directory; ``exceeded`` is set (and ``error``
    says by how much) when it outgrows ``limit`` bytes."""

    def __init__(self, loop: asyncio.AbstractEventLoop, path: Path, limit: int) -> None:
        self.path = path
        self.limit = limit
        self.exceeded: asyncio.Future[None] = loop.create_future()
        self.error: str | None = None

    async def watch(self) -> None:
        while True:
            used = await asyncio.to_thread(_disk_usage, self.path, self.limit)
            if used > self.limit:
                self.error = (
                    f"disk limit of {self.limit // _MIB} MiB exceeded: the agent wrote more than "
                    f"that in its working directory, and was stopped"
                )
                self.exceeded.set_result(None)
                return
            await asyncio.sleep(_DISK_POLL_SECS)


def _disk_usage(path: Path, stop_above: int) -> int:
    """Bytes allocated under ``path`` (counting stops once past ``stop_above``)."""
    total = 0
    stack = [str(path)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += st.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                if total > stop_above:
                    return total
    return total


def _signal_group(transport: asyncio.SubprocessTransport, sig: int) -> None:
    # The launcher leads the group and is not yet reaped, so its pid still names this group.
    if transport.get_returncode() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(transport.get_pid(), sig)


def _process_group(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return int(fields[2])  # after the command name: state, parent, process group
    except (OSError, ValueError, IndexError):
        return None


def _signal_agents(group: int, sig: int) -> None:
    """Send ``sig`` to every process of the attempt's group but the launcher that leads it.

    The launcher takes SIGUSR1 as its order to kill the tree, so the group cannot be signalled
    as a whole. Each process is pinned by a pidfd before its group is checked again, so a pid
    reused meanwhile is never signalled.
    """
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return
    for pid in pids:
        if pid == group or _process_group(pid) != group:
            continue
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as exc:
            if exc.errno == errno.ENOSYS:  # a kernel without pidfds: the plain way
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
            continue  # else it has ended
        try:
            if _process_group(pid) == group:
                signal.pidfd_send_signal(pidfd, sig)
        except OSError:
            pass  # it ended meanwhile
        finally:
            os.close(pidfd)


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
        status = parse_json(data)
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
    """An agent's JSON within the bounds of domain.limits; ValueError when not."""
    return parse_json(text)


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


def _excerpt(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    if len(text) > _EXCERPT_CHARS:
        text = text[:_EXCERPT_CHARS] + "…"
    return text


def _error_tail(text: str) -> str:
    """The last few lines of stderr, short, as ': ...' or ''."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    tail = "\n".join(lines[-_ERROR_TAIL_LINES:])
    if len(tail) > _ERROR_TAIL_CHARS:
        tail = "…" + tail[-_ERROR_TAIL_CHARS:]
    return f": {tail}" if tail else ""
