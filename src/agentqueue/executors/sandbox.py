"""The launcher of one command agent attempt: it owns the attempt's process group.

The worker runs ``python -I -S sandbox.py SPEC`` in a new session (so this process leads the
process group), with the agent's scrubbed environment, working directory and pipes. The launcher

* asks the kernel for a signal when the worker dies (``PR_SET_PDEATHSIG``) and then kills the
  whole group, so an agent never outlives its worker and runs its task twice;
* forks the agent with default signal dispositions, no core dumps and the resource limits of
  SPEC, and gives it ``PR_SET_PDEATHSIG=SIGKILL`` in case the launcher itself is killed;
* waits for the agent (the worker's SIGTERM is meant for the agent, so the launcher ignores it),
  writes one JSON status line to the status descriptor, then kills whatever the agent left
  behind, itself included: everything in the group, and, as the subreaper of the tree, every
  descendant that left the group too;
* on SIGUSR1 from the worker (a timeout or cancel whose grace has run out) kills the same way
  at once.

A launcher can also be started ahead of its attempt, *warm*: ``sandbox.py --warm WARM`` where
WARM is a JSON object with ``parent_pid``, ``status_fd``, ``spec_fd``, ``join`` (the
``cgroup.procs`` files it joins at once, so that the agent it forks is born in them) and
``landlock_fd`` (enforced at once, on itself and so on the agent). It arms itself as below,
joins, says it is ready (a newline on ``status_fd``) and waits for SPEC on ``spec_fd`` (read to
its end; nothing at all: it exits). SPEC then also gives the agent's working directory ``cwd``
and environment ``env``. The interpreter's start, the cgroup joins and the Landlock domain (each
some milliseconds to tens of them) are then paid before the attempt, not during it.

SPEC is a JSON object: ``command`` (argv list), ``parent_pid``, ``status_fd``, and optional
``cpu_secs``, ``memory_bytes``, ``open_files``, ``file_bytes`` (the largest file it may write),
``program`` (the agent's program when ``command`` runs it through a sandbox: checked first, so
that a missing one is reported as such), ``processes`` (RLIMIT_NPROC, for an agent whose user
runs nothing else), ``cgroup_procs`` (the
``cgroup.procs`` file of the attempt's pids cgroup, joined first), ``net_cgroup_procs`` (that of
the worker's cgroup v2 network filter, joined too: see :mod:`agentqueue.executors.netfilter`;
a failure to join fails the start), ``landlock_fd`` (a
Landlock ruleset the worker made, enforced on the agent: the TCP ports it may connect to),
``user`` ([uid, gid] to run as: supplementary groups dropped, then the group and the user)
and ``ignore_signals`` (signal numbers ignored across exec: the bubblewrap between the launcher
and the agent must survive the signals the worker sends the group; it gives them back to the
agent). The status is one of
``{"exit": code, ...}``, ``{"signal": number, ...}`` (with ``cpu_secs`` and ``maxrss_kb`` of
the agent) or
``{"error": message}`` when the agent could not be started.

Standard library only, and never ``agentqueue``: this module is run as a script and must start
fast.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
import sys

TYPE_CHECKING = False  # typing itself would slow the start-up
if TYPE_CHECKING:
    from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PARENT_DEATH_SIGNAL = signal.SIGHUP
KILL_SIGNAL = signal.SIGUSR1  # from the worker: kill the whole tree now
SPAWN_FAILED_EXIT = 127
_KILL_ROUNDS = 1000

_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> None:
    zero = ctypes.c_ulong(0)
    if _libc.prctl(option, ctypes.c_ulong(value), zero, zero, zero) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def _children() -> list[int]:
    try:
        with open(f"/proc/self/task/{os.getpid()}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _kill_everything() -> None:
    """SIGKILL every descendant, even one that left the process group, then the group itself.

    Killing and reaping the launcher's children makes their children (orphans, whichever group
    they are in) its children, because it is their subreaper; repeat until none are left.
    """
    for _ in range(_KILL_ROUNDS):
        children = _children()
        if not children:
            break
        for pid in children:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in children:
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)
    os.killpg(0, signal.SIGKILL)  # the launcher itself, and anything left in the group
    os._exit(1)  # not reached


def _limit(kind: int, soft: int, hard: int) -> None:
    _, current_hard = resource.getrlimit(kind)
    if current_hard != resource.RLIM_INFINITY:
        # An unprivileged process cannot raise its hard limit; keep the stricter one.
        hard = min(hard, current_hard)
        soft = min(soft, hard)
    resource.setrlimit(kind, (soft, hard))


_SYS_LANDLOCK_RESTRICT_SELF = 446
PR_SET_NO_NEW_PRIVS = 38


def _restrict(ruleset_fd: int) -> None:
    """Enforce the Landlock ruleset ``ruleset_fd`` (made once by the worker) on this process and
    everything it starts."""
    syscall = _libc.syscall
    syscall.restype = ctypes.c_long
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    if syscall(_SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset_fd), 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"Landlock: cannot restrict the agent: {os.strerror(err)}")
    os.close(ruleset_fd)


def _find_program(name: str, env: dict[str, str] | None = None) -> None:
    """Fail as ``exec`` would when ``name`` (the agent's program, run through the sandbox)
    cannot be run, looked for on the PATH of ``env`` (default: the launcher's own)."""
    if "/" in name:
        candidates = [name]
    else:
        path = (os.environ if env is None else env).get("PATH", os.defpath)
        candidates = [os.path.join(d or ".", name) for d in path.split(os.pathsep)]
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return
    if "/" in name and os.path.exists(name):
        raise PermissionError(13, os.strerror(13))
    raise FileNotFoundError(2, os.strerror(2))


def _exec_agent(spec: dict[str, Any], launcher_pid: int, report_fd: int) -> None:
    """In the forked child: become the agent, or report why not and exit."""
    try:
        for sig in signal.valid_signals():
            if sig in (signal.SIGKILL, signal.SIGSTOP):
                continue
            with contextlib.suppress(OSError, ValueError):
                signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        # A process is in one group of each hierarchy: the pids group is cgroup v1's, the
        # network filter's cgroup v2's, so joining one leaves it in the other.
        for procs in (spec.get("cgroup_procs"), spec.get("net_cgroup_procs")):
            if procs:
                with open(procs, "w") as f:
                    f.write(str(os.getpid()))
        _limit(resource.RLIMIT_CORE, 0, 0)
        if spec.get("cpu_secs"):
            # SIGXCPU at the soft limit; the kernel's SIGKILL one second later if it is ignored.
            _limit(resource.RLIMIT_CPU, spec["cpu_secs"], spec["cpu_secs"] + 1)
        if spec.get("memory_bytes"):
            _limit(resource.RLIMIT_AS, spec["memory_bytes"], spec["memory_bytes"])
        if spec.get("open_files"):
            _limit(resource.RLIMIT_NOFILE, spec["open_files"], spec["open_files"])
        if spec.get("file_bytes"):
            _limit(resource.RLIMIT_FSIZE, spec["file_bytes"], spec["file_bytes"])
        if spec.get("processes"):
            _limit(resource.RLIMIT_NPROC, spec["processes"], spec["processes"])
        if spec.get("landlock_fd") is not None:
            _restrict(spec["landlock_fd"])
        command = spec["command"]
        env = spec.get("env")
        if spec.get("program"):
            _find_program(spec["program"], env)
        if spec.get("user"):
            uid, gid = spec["user"]
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        # After any change of user: the kernel clears the death signal then.
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != launcher_pid:
            os._exit(SPAWN_FAILED_EXIT)
        for sig in spec.get("ignore_signals") or ():
            signal.signal(sig, signal.SIG_IGN)
        if env is None:
            os.execvp(command[0], command)
        else:  # the program is looked for on the PATH of ``env``, as a shell would
            os.execvpe(command[0], command, env)
    except BaseException as exc:
        if isinstance(exc, OSError) and exc.strerror:
            reason = exc.strerror
        else:
            reason = f"{type(exc).__name__}: {exc}"
        try:
            program = spec.get("program") or spec["command"][0]
            os.write(report_fd, f"cannot start {program!r}: {reason}".encode())
        finally:
            os._exit(SPAWN_FAILED_EXIT)


def _read_all(fd: int) -> bytes:
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    os.close(fd)
    return data


def main(argv: list[str]) -> None:
    """Run the agent described by ``argv[1]``; see the module docstring."""
    if os.getpgrp() != os.getpid():
        # Killing "our" group would hit whoever started us; refuse instead.
        sys.stderr.write("agentqueue sandbox: start it as the leader of a new session\n")
        raise SystemExit(2)
    try:
        _launch(argv)
    except BaseException as exc:
        # The worker reads this from the agent's stderr when no status arrives.
        with contextlib.suppress(OSError):
            os.write(2, f"agentqueue sandbox failed: {type(exc).__name__}: {exc}\n".encode())
    finally:
        _kill_everything()


def _arm(parent_pid: int) -> None:
    """Take the signals the launcher must, die with the worker, and reap orphans."""
    # The worker stops an attempt by signalling the whole group; the launcher must outlive the
    # agent to report its status, so it only notes SIGTERM and SIGINT.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    signal.signal(KILL_SIGNAL, lambda signum, frame: _kill_everything())

    def on_parent_death(signum: int, frame: object) -> None:
        # Only the kernel's death notice counts; an agent signalling its own group does not.
        if os.getppid() != parent_pid:
            _kill_everything()

    signal.signal(PARENT_DEATH_SIGNAL, on_parent_death)
    _prctl(PR_SET_PDEATHSIG, PARENT_DEATH_SIGNAL)
    if os.getppid() != parent_pid:  # the worker died before the notice was armed
        _kill_everything()
    # Descendants that leave the group and lose their parent come back here to be killed.
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def _launch(argv: list[str]) -> None:
    if argv[1] == "--warm":
        warm: dict[str, Any] = json.loads(argv[2])
        _arm(warm["parent_pid"])
        for procs in warm.get("join") or ():
            # Joined now, while nothing waits: the agent forked later is born in them.
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        if warm.get("landlock_fd") is not None:
            # Enforced now too (its 65,535 rules take the kernel tens of milliseconds to copy);
            # the agent inherits it, and the launcher itself connects nowhere.
            _restrict(warm["landlock_fd"])
        os.write(warm["status_fd"], b"\n")  # ready (the status after it is read as JSON)
        raw = _read_all(warm["spec_fd"])
        if not raw:  # the worker let this launcher go unused
            return
        spec: dict[str, Any] = json.loads(raw)
        spec["status_fd"] = warm["status_fd"]
        # Joined and enforced above, for the agent too.
        spec["cgroup_procs"] = spec["net_cgroup_procs"] = spec["landlock_fd"] = None
        os.chdir(spec["cwd"])
    else:
        spec = json.loads(argv[1])
        _arm(spec["parent_pid"])
    _run(spec)


def _run(spec: dict[str, Any]) -> None:
    """Fork the agent of ``spec``, wait for it and report its status."""
    status_fd: int = spec["status_fd"]
    os.set_inheritable(status_fd, False)
    report_r, report_w = os.pipe()  # close-on-exec: EOF means the exec succeeded
    launcher_pid = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(report_r)
        _exec_agent(spec, launcher_pid, report_w)
    os.close(report_w)
    failure = _read_all(report_r)
    _, wait_status, usage = os.wait4(pid, 0)
    status: dict[str, Any]
    if failure:
        status = {"error": failure.decode("utf-8", "replace")}
    else:
        status = {
            "cpu_secs": usage.ru_utime + usage.ru_stime,
            "maxrss_kb": usage.ru_maxrss,
        }
        if os.WIFSIGNALED(wait_status):
            status["signal"] = os.WTERMSIG(wait_status)
        else:
            status["exit"] = os.waitstatus_to_exitcode(wait_status)
    try:
        os.write(status_fd, json.dumps(status).encode() + b"\n")
        os.close(status_fd)
    except OSError:
        pass  # the worker is gone; nobody is left to read the status


if __name__ == "__main__":
    main(sys.argv)
