"""Addresses a networked agent may not reach: a cgroup v2 directory with small BPF programs that
refuse ``connect()`` (TCP, and UDP or ICMP sockets) and UDP ``sendmsg()`` to them.

Landlock filters TCP ports only; the cloud metadata address (169.254.169.254, and fd00:ec2::254 on
AWS's IPv6) hands out the host's credentials on port 80, a port an agent with a network needs. So
a worker makes one cgroup v2 directory (next to its own cgroup: ``agentqueue-<pid>-net``) and
attaches four ``BPF_PROG_TYPE_CGROUP_SOCK_ADDR`` programs to it, at ``BPF_CGROUP_INET4_CONNECT``,
``INET6_CONNECT``, ``UDP4_SENDMSG`` and ``UDP6_SENDMSG``. The launcher of each networked attempt
moves the agent into the directory before ``exec`` (as it joins its pids cgroup); every process the
agent starts stays in it, and the kernel asks the programs about each address the agent connects
or sends to: a denied one fails at once with EPERM. The agent cannot leave the group: its
``cgroup.procs`` files belong to root, and the sandbox shows ``/sys`` read-only.

The programs are a few instructions, assembled here and loaded with ``bpf(2)`` through ctypes
(loading and attaching needs root, or CAP_BPF with CAP_NET_ADMIN). Each compares the address
(and, for a rule with a port, the port) with the deny list and returns 0 (deny) or 1 (allow).
IPv4 rules are also matched as IPv4-mapped IPv6 addresses (``::ffff:169.254.169.254``), which an
IPv6 socket reaches without passing the IPv4 hook.

Standard library only; the launcher (:mod:`agentqueue.executors.sandbox`) needs nothing of this,
only the path of ``cgroup.procs``.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ipaddress
import os
import re
import socket
import struct
import sys
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from .cgroups import cgroup2_dir, remove_cgroup

METADATA_ADDRESSES = ("169.254.169.254", "fd00:ec2::254")
"""The cloud metadata addresses (AWS, GCP, Azure, Oracle and others; AWS's IPv6 one)."""

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Rule = tuple[Address, int | None]
"""An address and a port (None: every port)."""

# bpf(2): commands, program and attach types, from include/uapi/linux/bpf.h.
_SYS_BPF = {"x86_64": 321, "aarch64": 280, "riscv64": 280, "s390x": 351, "ppc64le": 361}
_BPF_PROG_LOAD = 5
_BPF_PROG_ATTACH = 8
_BPF_PROG_TYPE_CGROUP_SOCK_ADDR = 18
_BPF_CGROUP_INET4_CONNECT = 10
_BPF_CGROUP_INET6_CONNECT = 11
_BPF_CGROUP_UDP4_SENDMSG = 14
_BPF_CGROUP_UDP6_SENDMSG = 15
_HOOKS = (
    (_BPF_CGROUP_INET4_CONNECT, 4),
    (_BPF_CGROUP_INET6_CONNECT, 6),
    (_BPF_CGROUP_UDP4_SENDMSG, 4),
    (_BPF_CGROUP_UDP6_SENDMSG, 6),
)
"""Each hook and the family of the addresses its program sees (a program reads only its own
family's fields, and is loaded for one hook)."""

# struct bpf_sock_addr: the program's context (its first argument, in r1).
_USER_IP4 = 4  # __u32, network byte order
_USER_IP6 = 8  # __u32[4], network byte order
_USER_PORT = 24  # __u32 holding the __be16 port

# Instruction classes and codes.
_ALU64_MOV_X = 0xBF  # dst = src
_ALU64_MOV_K = 0xB7  # dst = imm
_LDX_MEM_W = 0x61  # dst = *(u32 *)(src + off)
_JMP32_JNE_K = 0x56  # if (u32)dst != imm: pc += off
_JMP_EXIT = 0x95
_R0, _R1, _R2, _R3, _R4, _R5, _R6, _R7 = range(8)

_DENY, _ALLOW = 0, 1


class NetFilterUnavailable(Exception):
    """The filter cannot be made here; the message says why."""


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """One ``struct bpf_insn``: code, the two registers in one byte (a bit field, laid out by the
    byte order), a signed 16-bit offset and a signed 32-bit immediate."""
    regs = (dst | src << 4) if sys.byteorder == "little" else (dst << 4 | src)
    return struct.pack("=BBhi", code, regs, off, imm)


def _word(data: bytes) -> int:
    """Four bytes in network order as the signed immediate that equals their u32 load."""
    value = int.from_bytes(data, sys.byteorder)
    return value - (1 << 32) if value >= 1 << 31 else value


def _deny_block(words: Sequence[int], port: int | None) -> list[bytes]:
    """Return 0 when the address words (already in r2...) match, and the port if one is given;
    else fall through to the next block."""
    tail = [_insn(_ALU64_MOV_K, _R0, imm=_DENY), _insn(_JMP_EXIT)]
    if port is not None:
        tail = [
            _insn(_LDX_MEM_W, _R7, _R6, _USER_PORT),
            _insn(_JMP32_JNE_K, _R7, off=len(tail), imm=socket.htons(port)),
            *tail,
        ]
    block: list[bytes] = []
    for index, word in enumerate(words):
        # Skip the rest of this block: the later compares, then the tail.
        skip = len(words) - index - 1 + len(tail)
        block.append(_insn(_JMP32_JNE_K, _R2 + index, off=skip, imm=word))
    return block + tail


def program(family: int, rules: Iterable[Rule]) -> bytes:
    """The instructions of the program for ``family`` (4 or 6) denying ``rules``."""
    insns = [_insn(_ALU64_MOV_X, _R6, _R1)]  # keep the context
    if family == 4:
        insns.append(_insn(_LDX_MEM_W, _R2, _R6, _USER_IP4))
    else:
        insns += [_insn(_LDX_MEM_W, _R2 + i, _R6, _USER_IP6 + 4 * i) for i in range(4)]
    for address, port in rules:
        if family == address.version:
            packed = address.packed
        elif family == 6:  # an IPv4 address reached from an IPv6 socket
            packed = ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + address.packed).packed
        else:
            continue
        words = [_word(packed[i : i + 4]) for i in range(0, len(packed), 4)]
        insns += _deny_block(words, port)
    insns += [_insn(_ALU64_MOV_K, _R0, imm=_ALLOW), _insn(_JMP_EXIT)]
    return b"".join(insns)


class _ProgLoad(ctypes.Structure):
    _fields_ = [
        ("prog_type", ctypes.c_uint32),
        ("insn_cnt", ctypes.c_uint32),
        ("insns", ctypes.c_uint64),
        ("license", ctypes.c_uint64),
        ("log_level", ctypes.c_uint32),
        ("log_size", ctypes.c_uint32),
        ("log_buf", ctypes.c_uint64),
        ("kern_version", ctypes.c_uint32),
        ("prog_flags", ctypes.c_uint32),
        ("prog_name", ctypes.c_char * 16),
        ("prog_ifindex", ctypes.c_uint32),
        ("expected_attach_type", ctypes.c_uint32),
    ]


class _ProgAttach(ctypes.Structure):
    _fields_ = [
        ("target_fd", ctypes.c_uint32),
        ("attach_bpf_fd", ctypes.c_uint32),
        ("attach_type", ctypes.c_uint32),
        ("attach_flags", ctypes.c_uint32),
    ]


_LICENSE = ctypes.create_string_buffer(b"Apache-2.0")
_LOG_BYTES = 65536


def _bpf(command: int, attr: ctypes.Structure) -> int:
    number = _SYS_BPF.get(os.uname().machine)
    if number is None:
        raise NetFilterUnavailable(f"bpf(2) is not known on {os.uname().machine}")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = int(libc.syscall(number, command, ctypes.byref(attr), ctypes.sizeof(attr)))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _load(hook: int, code: bytes) -> int:
    """Load ``code`` for ``hook``; its descriptor. The verifier's log is in the error."""
    insns = ctypes.create_string_buffer(code, len(code))
    attr = _ProgLoad(
        prog_type=_BPF_PROG_TYPE_CGROUP_SOCK_ADDR,
        insn_cnt=len(code) // 8,
        insns=ctypes.addressof(insns),
        license=ctypes.addressof(_LICENSE),
        prog_name=b"agentqueue_deny",
        expected_attach_type=hook,
    )
    try:
        return _bpf(_BPF_PROG_LOAD, attr)
    except OSError as exc:
        if exc.errno == 1:  # EPERM: no privilege, the verifier is not the matter
            raise
    log = ctypes.create_string_buffer(_LOG_BYTES)
    attr.log_level, attr.log_size, attr.log_buf = 1, _LOG_BYTES, ctypes.addressof(log)
    try:
        return _bpf(_BPF_PROG_LOAD, attr)
    except OSError as exc:
        text = log.value.decode("utf-8", "replace").strip().splitlines()
        raise OSError(exc.errno, f"{exc.strerror} ({' / '.join(text[-3:])})") from None


def attach(directory: Path, rules: Sequence[Rule]) -> None:
    """Load the programs denying ``rules`` and attach them to the cgroup ``directory`` (the
    cgroup keeps them: their descriptors are closed here)."""
    target = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for hook, family in _HOOKS:
            prog = _load(hook, program(family, rules))
            try:
                _bpf(_BPF_PROG_ATTACH, _ProgAttach(target, prog, hook, 0))
            finally:
                os.close(prog)
    finally:
        os.close(target)


def rules(addresses: Iterable[str | tuple[str, int | None]]) -> tuple[Rule, ...]:
    """Deny rules from addresses (every port) or (address, port) pairs."""
    made: list[Rule] = []
    for entry in addresses:
        host, port = entry if isinstance(entry, tuple) else (entry, None)
        rule = (ipaddress.ip_address(host), port)
        if rule not in made:
            made.append(rule)
    return tuple(made)


_NAME = re.compile(r"agentqueue-(\d+)-net(?:-\d+)?")
_lock = threading.Lock()
_made = 0
_live: set[NetFilter] = set()


class NetFilter:
    """One cgroup directory whose processes cannot reach the addresses of ``rules``; made by
    :meth:`make`, shared by a worker's networked agents (each :meth:`acquire` matched by a
    :meth:`release`), removed with the last release or when the process exits."""

    def __init__(self, path: Path, rules: tuple[Rule, ...]) -> None:
        self.path = path
        self.rules = rules
        self._users = 0

    @classmethod
    def make(cls, deny: Sequence[Rule]) -> NetFilter:
        """A new filter (no users yet); NetFilterUnavailable says why there is none."""
        global _made
        parent = cgroup2_dir()
        if parent is None:
            raise NetFilterUnavailable("no cgroup v2 hierarchy is mounted")
        _sweep(parent)
        with _lock:
            _made += 1
            suffix = "" if _made == 1 else f"-{_made}"
        path = parent / f"agentqueue-{os.getpid()}-net{suffix}"
        try:
            path.mkdir()
        except OSError as exc:
            raise NetFilterUnavailable(f"cannot make the cgroup {path}: {exc.strerror}") from None
        try:
            attach(path, deny)
        except (OSError, NetFilterUnavailable) as exc:
            remove_cgroup(path)
            reason = exc.strerror if isinstance(exc, OSError) else str(exc)
            raise NetFilterUnavailable(
                f"cannot attach a BPF program to the cgroup {path}: {reason} (it needs root, "
                "or CAP_BPF and CAP_NET_ADMIN)"
            ) from None
        made = cls(path, tuple(deny))
        with _lock:
            _live.add(made)
        return made

    @property
    def procs(self) -> str:
        """The file the agent's launcher writes its pid to, joining the group."""
        return str(self.path / "cgroup.procs")

    def acquire(self) -> NetFilter:
        with _lock:
            self._users += 1
        return self

    def release(self) -> None:
        with _lock:
            self._users -= 1
            last = self._users <= 0
        if last:
            self.remove()

    def remove(self) -> None:
        """Remove the directory (its programs go with it)."""
        with _lock:
            _live.discard(self)
        remove_cgroup(self.path)


def _sweep(parent: Path) -> None:
    """Remove the filters of workers that died without removing theirs (an empty group only:
    a populated one refuses)."""
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            found = _NAME.fullmatch(entry.name)
            if found is None or int(found.group(1)) == os.getpid():
                continue
            if not Path(f"/proc/{found.group(1)}").exists():
                with contextlib.suppress(OSError):
                    entry.rmdir()


@atexit.register
def _remove_all() -> None:
    for made in list(_live):
        made.remove()


class NetFilterShare:
    """The filter of one worker's networked agents: made on the first :meth:`get`, then the
    same one for each (or the same reason why none can be made)."""

    def __init__(self, extra: Iterable[str | tuple[str, int | None]] = ()) -> None:
        self.rules = rules([*METADATA_ADDRESSES, *extra])
        self._filter: NetFilter | None = None
        self._problem: str | None = None

    def get(self) -> NetFilter:
        """The filter, with one more user (release it when done); NetFilterUnavailable."""
        if self._problem is not None:
            raise NetFilterUnavailable(self._problem)
        if self._filter is None or not self._filter.path.is_dir():
            try:
                self._filter = NetFilter.make(self.rules)
            except NetFilterUnavailable as exc:
                self._problem = str(exc)
                raise
        return self._filter.acquire()
