"""Capturing a command agent's output as it arrives, in bounded memory.

The agent never blocks on a full pipe: output is consumed as it comes, each stream is kept up to
a cap (the head, marked truncated beyond it), and the last line of stdout, where the result may
be, is tracked on its own so a flood cannot push it out. Protocol lines on stdout (checkpoints,
tool calls and replies, see :mod:`agentqueue.executors.subprocess`) are handed to a callback as
they arrive and are never taken for the result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .base import LogChunk

TAIL_BYTES = 4096  # of stderr, kept for error messages and for naming a resource limit

ProtocolLine = Callable[[bytes], bool]
"""Called with each complete stdout line that may be a protocol line; True if it was one."""

PROTOCOL_MARKERS = (b'"checkpoint"', b'"tool_call"', b'"reply"')
"""What a protocol line must contain: lines without them are never parsed, so a flood of plain
output costs no more than before."""
_MARKER_BYTES = max(len(marker) for marker in PROTOCOL_MARKERS)


def _may_be_protocol(data: bytes | bytearray) -> bool:
    return any(marker in data for marker in PROTOCOL_MARKERS)


class Output:
    """One captured stream: its first ``cap`` bytes, and its last few for error messages."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.head = bytearray()
        self.total = 0
        self.tail = b""

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.cap - len(self.head)
        if room > 0:
            self.head += data[:room]
        self.tail = (self.tail + data)[-TAIL_BYTES:]

    def chunk(self, stream: str) -> LogChunk:
        text = bytes(self.head).decode("utf-8", "replace")
        return LogChunk(stream, text, truncated=self.total > len(self.head))

    def tail_text(self) -> str:
        return self.tail.decode("utf-8", "replace")


class LastLine:
    """The last non-blank line of a stream, tracked apart from the capped log.

    Holds at most ``cap`` bytes: a longer line is remembered only as being too long. With
    ``protocol``, each complete line that may be a protocol line is offered to it first, and the
    lines it takes are not candidates for the last line.
    """

    def __init__(self, cap: int, protocol: ProtocolLine | None = None) -> None:
        self.cap = cap
        self._protocol = protocol
        self._marked = False  # the unfinished line holds a protocol marker
        self._partial = bytearray()  # the line still being written
        self._partial_too_long = False
        self.line: bytes | None = None
        self.too_long = False

    def bind(self, protocol: ProtocolLine | None) -> None:
        """Offer lines to ``protocol`` from now on (a launcher started before its attempt)."""
        self._protocol = protocol

    def _extend(self, data: bytes) -> None:
        if self._partial_too_long:
            return
        if len(self._partial) + len(data) > self.cap:
            self._partial_too_long = True
            self._partial = bytearray()
        else:
            self._partial += data

    def _keep(self, line: bytes, too_long: bool) -> None:
        self.too_long = too_long or len(line) > self.cap
        self.line = None if self.too_long else line

    def feed(self, data: bytes) -> None:
        """Take the next piece of the stream."""
        if self._protocol is not None and (self._marked or self._marker_in(data)):
            self._feed_lines(data)
            return
        last_newline = data.rfind(b"\n")
        if last_newline < 0:
            self._extend(data)
            return
        complete, rest = data[:last_newline], data[last_newline + 1 :]
        end = len(complete)
        while True:  # from the end, the first non-blank complete line
            start = complete.rfind(b"\n", 0, end) + 1
            if start == 0:  # the first line continues the unfinished one
                self._extend(complete[:end])
                if self._partial_too_long or self._partial.strip():
                    self._keep(bytes(self._partial), self._partial_too_long)
                break
            if complete[start:end].strip():
                self._keep(complete[start:end], False)
                break
            end = start - 1
        self._partial, self._partial_too_long = bytearray(), False
        self._extend(rest)

    def _marker_in(self, data: bytes) -> bool:
        """Whether ``data``, joined to the unfinished line, brings a protocol marker."""
        if _may_be_protocol(data):
            return True
        return _may_be_protocol(bytes(self._partial[-_MARKER_BYTES:]) + data[:_MARKER_BYTES])

    def _feed_lines(self, data: bytes) -> None:
        """Line by line, so that every protocol line is seen in order (the slow path: only for
        pieces that may hold one)."""
        *complete, rest = data.split(b"\n")
        if not complete:  # the unfinished line goes on, and holds a marker now
            self._marked = True
            self._extend(rest)
            return
        for index, piece in enumerate(complete):
            if index == 0:  # it ends the unfinished line
                self._extend(piece)
                line, too_long = bytes(self._partial), self._partial_too_long
                self._partial, self._partial_too_long = bytearray(), False
            else:
                line, too_long = piece, len(piece) > self.cap
            self._line(line, too_long)
        self._marked = _may_be_protocol(rest)
        self._extend(rest)

    def _line(self, line: bytes, too_long: bool) -> None:
        if too_long:
            self._keep(b"", True)
            return
        stripped = line.strip()
        if not stripped:
            return
        if (
            self._protocol is not None
            and stripped.startswith(b"{")
            and _may_be_protocol(stripped)
            and self._protocol(stripped)
        ):
            return
        self._keep(line, False)

    def close(self) -> None:
        """The stream ended: an unfinished last line counts as a line."""
        if self._partial_too_long or self._partial.strip():
            self._line(bytes(self._partial), self._partial_too_long)
        self._partial, self._partial_too_long, self._marked = bytearray(), False, False


class AgentProcess(asyncio.SubprocessProtocol):
    """The worker's view of a running sandbox: its output, kept bounded, and when it exited.

    Output is consumed as it arrives, so the agent never blocks on a full pipe. ``protocol``
    gets the stdout lines that may be protocol lines (see :class:`LastLine`).
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, cap: int, protocol: ProtocolLine | None = None
    ) -> None:
        self.stdout, self.stderr = Output(cap), Output(cap)
        self.last_line = LastLine(cap, protocol)
        self.exited: asyncio.Future[None] = loop.create_future()
        self.output_closed: asyncio.Future[None] = loop.create_future()
        self._open = {1, 2}

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        chunk = data.encode() if isinstance(data, str) else data
        if fd == 1:
            self.stdout.feed(chunk)
            self.last_line.feed(chunk)
        elif fd == 2:
            self.stderr.feed(chunk)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open.discard(fd)
        if fd == 1:
            self.last_line.close()
        if not self._open and not self.output_closed.done():
            self.output_closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def logs(self) -> tuple[LogChunk, ...]:
        chunks = (self.stdout.chunk("stdout"), self.stderr.chunk("stderr"))
        return tuple(chunk for chunk in chunks if chunk.text or chunk.truncated)
