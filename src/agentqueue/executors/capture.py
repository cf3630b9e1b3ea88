"""Capturing a command agent's output as it arrives, in bounded memory.

The agent never blocks on a full pipe: output is consumed as it comes, each stream is kept up to
a cap (the head, marked truncated beyond it), and the last line of stdout, where the result may
be, is tracked on its own so a flood cannot push it out.
"""

from __future__ import annotations

import asyncio

from .base import LogChunk

TAIL_BYTES = 4096  # of stderr, kept for error messages and for naming a resource limit


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

    Holds at most ``cap`` bytes: a longer line is remembered only as being too long.
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._partial = bytearray()  # the line still being written
        self._partial_too_long = False
        self.line: bytes | None = None
        self.too_long = False

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

    def close(self) -> None:
        """The stream ended: an unfinished last line counts as a line."""
        if self._partial_too_long or self._partial.strip():
            self._keep(bytes(self._partial), self._partial_too_long)


class AgentProcess(asyncio.SubprocessProtocol):
    """The worker's view of a running sandbox: its output, kept bounded, and when it exited.

    Output is consumed as it arrives, so the agent never blocks on a full pipe.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, cap: int) -> None:
        self.stdout, self.stderr, self.last_line = Output(cap), Output(cap), LastLine(cap)
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
