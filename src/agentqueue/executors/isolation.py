"""What a command agent may reach: the bubblewrap sandbox around it, the user it runs as, its
process cgroup and the network ports and addresses closed to it.

The worker decides this once per agent at start (:func:`resolve`) and the attempt's launcher
(:mod:`agentqueue.executors.sandbox`) applies it in the agent's process before ``exec``: the
process cgroup, the network filter's cgroup (:mod:`agentqueue.executors.netfilter`), the
resource limits, the Landlock network rules, the user. Under bubblewrap the
agent sees the system read-only, its own working directory as the only writable place besides a
private ``/tmp``, a ``/proc`` of its own PID namespace, no network unless asked, and none of the
places listed in :data:`HIDDEN` nor the worker's configuration or database files.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import logging
import os
import pwd
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..config import AgentSettings
from .cgroups import remove_cgroup
from .netfilter import METADATA_ADDRESSES, NetFilter, NetFilterShare, NetFilterUnavailable

log = logging.getLogger("agentqueue.worker")

HIDDEN = ("/root", "/home", "/run", "/var/run", "/var/tmp", "/var/lib/postgresql", "/mnt", "/media")
"""Replaced by an empty directory in every sandbox (those that exist and are not links)."""

SECRET_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
"""Replaced by an empty file in every sandbox."""

SYSTEM_DIRS = frozenset({"/", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/var", "/opt"})
"""Directories too wide to hide for a file in them: the file alone is hidden."""

RESET_SIGNALS = "TERM,INT,HUP,USR1"
"""The signals bubblewrap must ignore (the worker sends them to the attempt's process group,
and bubblewrap would die of them, killing the agent at once); ``env --default-signal`` gives
them back to the agent."""

CGROUP_PIDS = Path("/sys/fs/cgroup/pids")
"""The cgroup v1 hierarchy of the pids controller, where each attempt gets its own group."""

LANDLOCK_NET_ABI = 4
_SYS_LANDLOCK_CREATE_RULESET = 444
_LANDLOCK_CREATE_RULESET_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Confinement:
    """How one agent's attempts are confined (decided by the worker at start)."""

    bwrap: bool = False
    """Run under bubblewrap (else only the limits, the user and the scrubbed environment)."""
    network: bool = False
    """Keep the host's network (else a network namespace of its own: loopback only)."""
    user: tuple[int, int] | None = None
    """(uid, gid) the agent runs as; None: the worker's own."""
    hidden: tuple[str, ...] = ()
    """Paths hidden from the agent besides :data:`HIDDEN` (configuration, database files)."""
    deny_ports: tuple[int, ...] = ()
    """TCP ports the agent may not connect to, on any host (Landlock), when it has a network."""
    net_filter: NetFilter | None = None
    """The cgroup whose BPF programs keep a networked agent from the cloud metadata address
    (and the queue database's address), shared with the worker's other agents; None: the agent
    has no network, or the filter cannot be had here (``net_filter_problem`` says why)."""
    net_filter_problem: str | None = None
    extra_ro: tuple[str, ...] = ()
    extra_rw: tuple[str, ...] = ()
    keep_workdirs: str = "never"
    """never, failed or always."""


def user_ids(name: str) -> tuple[int, int]:
    """The (uid, gid) of the user ``name``; KeyError if there is none."""
    entry = pwd.getpwnam(name)
    return entry.pw_uid, entry.pw_gid


def default_user() -> tuple[int, int] | None:
    """Agents run as ``nobody`` when the worker is root, else as the worker's user."""
    if os.geteuid() != 0:
        return None
    with contextlib.suppress(KeyError):
        return user_ids("nobody")
    return None


@functools.cache
def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0 without Landlock)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(
        _SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), _LANDLOCK_CREATE_RULESET_VERSION
    )
    return max(0, int(version))


@functools.cache
def bwrap_problem(user: tuple[int, int] | None) -> str | None:
    """Why bubblewrap cannot run agents here as ``user`` (None when it can): it is tried once
    per process with the flags the sandbox uses, on ``true``."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bwrap is not installed (apt-get install bubblewrap)"
    argv = [bwrap, *base_args(network=False), *agent_prefix(user), "true"]
    try:
        done = subprocess.run(
            argv, capture_output=True, timeout=30, env={"PATH": os.defpath}, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap could not be run: {exc}"
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"bwrap failed ({err[-1] if err else f'exit code {done.returncode}'})"
    return None


def base_args(*, network: bool) -> list[str]:
    """The sandbox's flags that do not depend on the attempt."""
    args = [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--hostname",
        "agent",
        "--die-with-parent",
        "--cap-drop",
        "ALL",
    ]
    if not network:
        args.append("--unshare-net")
    return args


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


_SYS_LANDLOCK_ADD_RULE = 445
_LANDLOCK_ACCESS_NET_CONNECT_TCP = 1 << 1
_LANDLOCK_RULE_NET_PORT = 2


class _NetPortAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


@functools.cache
def landlock_ruleset(deny_ports: tuple[int, ...]) -> int:
    """A Landlock ruleset (its descriptor, kept open for the process's life) allowing TCP
    connections to every port but ``deny_ports``: Landlock's network rules are allow-lists of
    ports (ABI 4, Linux 6.7+), so that is 65,535 rules, made once and enforced by each
    attempt's launcher on its agent."""
    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    attr = (ctypes.c_uint64 * 2)(0, _LANDLOCK_ACCESS_NET_CONNECT_TCP)
    fd = int(syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(16), 0))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"Landlock network rules are not available: {os.strerror(err)}")
    denied = set(deny_ports)
    rule = _NetPortAttr(_LANDLOCK_ACCESS_NET_CONNECT_TCP, 0)
    ref = ctypes.byref(rule)
    rule_type = ctypes.c_int(_LANDLOCK_RULE_NET_PORT)
    ruleset = ctypes.c_int(fd)
    for port in range(65536):
        if port in denied:
            continue
        rule.port = port
        if syscall(_SYS_LANDLOCK_ADD_RULE, ruleset, rule_type, ref, 0) != 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, f"Landlock: cannot allow port {port}: {os.strerror(err)}")
    return fd


def _parents_within(path: str, roots: Sequence[str]) -> list[str]:
    """The directories between the deepest root covering ``path`` and ``path``, outermost
    first."""
    inside = [root for root in roots if _under(path, [root]) and path != root]
    if not inside:
        return []
    root = max(inside, key=len)
    parents: list[str] = []
    parent = os.path.dirname(path)
    while parent != root and _under(parent, [root]):
        parents.append(parent)
        parent = os.path.dirname(parent)
    return parents[::-1]


def hide_for(path: str | os.PathLike[str] | None) -> str | None:
    """What to hide for a file the agent must not see (the configuration, a SQLite database):
    its directory, or the file alone when the directory is a system one."""
    if path is None:
        return None
    file = os.path.abspath(path)
    parent = os.path.dirname(file)
    return file if parent in SYSTEM_DIRS else parent


def bwrap_command(
    confinement: Confinement,
    command: Sequence[str],
    *,
    workdir: Path,
    workdir_root: Path,
    tmp_bytes: int | None,
) -> list[str]:
    """The command line running ``command`` in the sandbox of one attempt."""
    bwrap = shutil.which("bwrap") or "bwrap"
    args = [bwrap, *base_args(network=confinement.network)]
    # A private /tmp, sized like the working directory's limit.
    if tmp_bytes:
        args += ["--size", str(tmp_bytes)]
    args += ["--tmpfs", "/tmp"]
    hidden_dirs = [p for p in HIDDEN if os.path.isdir(p) and not os.path.islink(p)]
    hidden_dirs.append(str(workdir_root))  # the other attempts' directories
    for path in confinement.hidden:
        if os.path.isdir(path):
            hidden_dirs.append(path)
        elif os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
    covered = ["/tmp"]  # the empty places mounted: /tmp holds whatever was under it
    for path in hidden_dirs:
        if not _under(path, ["/tmp"]):
            args += ["--tmpfs", path]
            covered.append(path)
    for path in SECRET_FILES:
        if os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
    made: set[str] = set()

    def bind(flag: str, path: str) -> None:
        # The directories leading to it in a covered place, reachable by the agent's user
        # (bubblewrap would make them for root alone).
        for parent in _parents_within(path, covered):
            if parent not in made:
                made.add(parent)
                args.extend(["--perms", "0755", "--dir", parent])
        args.extend([flag, path, path])

    # The worker's Python installation (agents often run the same interpreter) and the
    # command's own files (a script in a hidden place) come back, read-only.
    # A path under one already bound back is there (and cannot be bound again: the place it
    # would be mounted on is read-only), e.g. a virtual environment's python under /tmp.
    back: list[str] = []
    for prefix in sorted({sys.base_prefix, sys.prefix, sys.base_exec_prefix, sys.exec_prefix}):
        if os.path.isdir(prefix) and _under(prefix, covered) and not _under(prefix, back):
            made.add(prefix)
            back.append(prefix)
            bind("--ro-bind", prefix)
    for word in command:
        if (
            os.path.isabs(word)
            and os.path.isfile(word)
            and _under(word, covered)
            and not _under(word, back)
        ):
            back.append(word)
            bind("--ro-bind", word)
    for path in confinement.extra_ro:
        bind("--ro-bind", path)
    for path in confinement.extra_rw:
        bind("--bind", path)
    bind("--bind", str(workdir))
    # env changes directory once it runs as the agent's user (bubblewrap, as root without
    # capabilities, may not enter a directory of that user's).
    return [*args, *agent_prefix(confinement.user), f"--chdir={workdir}", *command]


def agent_prefix(user: tuple[int, int] | None) -> list[str]:
    """What runs the agent inside the sandbox: under a root worker, ``setpriv`` becomes the
    agent's user with no capabilities left (bubblewrap runs as root, so that it reaches every
    path it binds, and keeps only what ``setpriv`` needs); then ``env`` gives the agent the
    default handling of the signals bubblewrap ignores."""
    prefix = ["--"]
    if user is not None and os.geteuid() == 0:
        prefix = [
            "--cap-add",
            "CAP_SETUID",
            "--cap-add",
            "CAP_SETGID",
            "--cap-add",
            "CAP_SETPCAP",
            "--",
            "/usr/bin/setpriv",
            f"--reuid={user[0]}",
            f"--regid={user[1]}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ]
    # bubblewrap sets PWD, which the agent's scrubbed environment does not have.
    return [*prefix, "/usr/bin/env", "--unset=PWD", f"--default-signal={RESET_SIGNALS}"]


class PidsCgroup:
    """A cgroup of the pids controller for one attempt: at most ``limit`` processes, however
    many users' processes run beside it. None of this when the hierarchy is not writable."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def make(cls, name: str, limit: int) -> PidsCgroup | None:
        """A group named ``w<worker pid>-<name>``: the groups of a worker that was killed before
        it removed them are removed by the next one made here (see :func:`_sweep_pids`)."""
        base = CGROUP_PIDS / "agentqueue"
        try:
            base.mkdir(exist_ok=True)
            _sweep_pids(base)
            path = base / f"w{os.getpid()}-{name}"
            path.mkdir()
        except OSError:
            return None
        try:
            (path / "pids.max").write_text(str(limit))
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return cls(path)

    @property
    def procs(self) -> str:
        return str(self.path / "cgroup.procs")

    def remove(self) -> None:
        """Remove the group (its processes have ended; a straggler is killed first)."""
        remove_cgroup(self.path)


_PIDS_NAME = re.compile(r"w(\d+)-.+")
_swept: list[bool] = [False]


def _sweep_pids(base: Path) -> None:
    """Once per process: remove the groups of workers that no longer run (killed before they
    removed theirs); a group with a process left in it refuses, and stays."""
    if _swept[0]:
        return
    _swept[0] = True
    with contextlib.suppress(OSError):
        for entry in base.iterdir():
            found = _PIDS_NAME.fullmatch(entry.name)
            if found is None or int(found.group(1)) == os.getpid():
                continue
            if not Path(f"/proc/{found.group(1)}").exists():
                with contextlib.suppress(OSError):
                    entry.rmdir()


def cgroups_usable() -> bool:
    """Whether attempts can get a pids cgroup of their own here."""
    probe = PidsCgroup.make(f"probe-{os.getpid()}", 1)
    if probe is None:
        return False
    probe.remove()
    return True


_PROCESS_FILTERS = NetFilterShare()
"""The network filter of agents built outside a worker (each worker has its own)."""


class ConfinementError(Exception):
    """An agent's isolation cannot be had here; ``field`` names the setting at fault."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def resolve(
    name: str,
    settings: AgentSettings,
    *,
    user: tuple[int, int] | None,
    hidden: Sequence[str] = (),
    deny_ports: Sequence[int] = (),
    net_filters: NetFilterShare | None = None,
    keep_workdirs: str = "never",
) -> tuple[Confinement, str | None]:
    """The confinement of agent ``name`` and, when it falls back to no sandbox, why.

    A networked agent gets the filter of ``net_filters`` (the worker's, shared by its agents;
    without it, the one of agents built alone in this process), which keeps it from the cloud
    metadata address; where it cannot be had, ``net_filter_problem`` says why, for the worker's
    warning.

    Raises :class:`ConfinementError` for an explicit ``isolation = "bwrap"`` that cannot work
    (with ``network = true``: nor keep the agent from the metadata address), or a network the
    database port cannot be closed on.
    """
    fallback: str | None = None
    bwrap = False
    if user is not None and os.geteuid() != 0 and user[0] != os.geteuid():
        raise ConfinementError(
            "only a worker running as root can run agents as another user", "worker.run_as"
        )
    if settings.isolation != "none":
        problem = bwrap_problem(user)
        if problem is None:
            bwrap = True
        elif settings.isolation == "bwrap":
            raise ConfinementError(
                f'isolation = "bwrap" cannot work on this host: {problem}',
                f"agents.{name}.isolation",
            )
        else:
            fallback = problem
    networked = settings.network or not bwrap
    ports = tuple(sorted(set(deny_ports))) if networked else ()
    if ports and landlock_abi() < LANDLOCK_NET_ABI:
        if bwrap:
            raise ConfinementError(
                "the queue database's port cannot be closed to the agent: the kernel lacks "
                "Landlock network rules (Linux 6.7 or later); set network = false",
                f"agents.{name}.network",
            )
        ports = ()  # said in the worker's warning about this agent
    net_filter: NetFilter | None = None
    net_problem: str | None = None
    if networked:
        try:
            net_filter = (net_filters or _PROCESS_FILTERS).get()
        except NetFilterUnavailable as exc:
            net_problem = str(exc)
        if net_problem is not None and settings.isolation == "bwrap" and settings.network:
            raise ConfinementError(
                f"the cloud metadata address ({METADATA_ADDRESSES[0]}) cannot be closed to the "
                f"agent: {net_problem}. Run the worker as root on a host with cgroup v2, set "
                "network = false, or leave isolation unset to run it with a warning",
                f"agents.{name}.network",
            )
    confinement = Confinement(
        bwrap=bwrap,
        network=settings.network,
        user=user,
        hidden=tuple(hidden),
        deny_ports=ports,
        net_filter=net_filter,
        net_filter_problem=net_problem,
        extra_ro=tuple(settings.extra_ro),
        extra_rw=tuple(settings.extra_rw),
        keep_workdirs="always" if settings.keep_workdir else keep_workdirs,
    )
    return confinement, fallback
