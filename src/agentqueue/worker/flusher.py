"""The outcome flusher: outcomes and logs of ended attempts, written in batches (group commit).

Up to ``in_flight`` batches are written at once; what arrives during a write makes the next
batch. While the database is away, what was gathered is kept in memory and written again when
it is back: every write is fenced by the attempt's lock_token, so writing an outcome again, or
after its lease lapsed, changes nothing (it comes back as a refusal).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from uuid import UUID

from ..domain.errors import AgentQueueError, StoreUnavailable
from ..domain.models import LogRecord, Task
from ..domain.states import Refusal
from ..service.execution import Outcome
from ..supervise import Outage, Supervisor

log = logging.getLogger("agentqueue.worker")

Finish = Callable[[list[Outcome], list[LogRecord]], Awaitable[dict[UUID, Task | Refusal]]]
Recorded = Callable[[Sequence[Outcome], dict[UUID, Task | Refusal]], None]

OUTCOMES_PER_BATCH = 500
LOGS_PER_BATCH = 2000


class OutcomeFlusher:
    """Gathers outcomes and writes them with ``finish``."""

    def __init__(
        self,
        finish: Finish,
        jobs: Supervisor,
        in_flight: int = 2,
        on_recorded: Recorded | None = None,
    ) -> None:
        self.finish = finish
        self.on_recorded = on_recorded
        self.jobs = jobs
        self.in_flight = in_flight
        self.outcomes: list[Outcome] = []
        self.logs: list[LogRecord] = []
        self.written = 0
        self._due = asyncio.Event()
        self._writing: set[asyncio.Task[None]] = set()
        self._outage = Outage(log)

    @property
    def writing(self) -> set[asyncio.Task[None]]:
        """Batches being written."""
        return self._writing

    @property
    def pending(self) -> int:
        """Outcomes not written yet."""
        return len(self.outcomes)

    def ended_tasks(self) -> list[Task]:
        """The tasks of outcomes not recorded yet, as claimed (their leases are still ours)."""
        return [o.claimed for o in self.outcomes if o.claimed is not None]

    def add(self, outcome: Outcome | None, logs: Sequence[LogRecord] = ()) -> None:
        """Gather an attempt's outcome (None: it reports none) and output."""
        if outcome is not None:
            self.outcomes.append(outcome)
        self.logs.extend(logs)
        self._due.set()

    async def run(self) -> None:
        """Start batches as outcomes come, until cancelled."""
        while True:
            await self._due.wait()
            self._due.clear()
            while (self.outcomes or self.logs) and len(self._writing) < self.in_flight:
                job = self.jobs.start(self._write_batch(), "agentqueue-flush-batch")
                self._writing.add(job)
                job.add_done_callback(self._written)

    def _written(self, job: asyncio.Task[None]) -> None:
        self._writing.discard(job)
        if self.outcomes or self.logs:
            self._due.set()

    def _take(self) -> tuple[list[Outcome], list[LogRecord]]:
        # One outcome per task in a batch: a task claimed again (its earlier attempt's outcome
        # still waiting here) must not make the batch invalid.
        batch: list[Outcome] = []
        later: list[Outcome] = []
        seen: set[UUID] = set()
        for outcome in self.outcomes:
            if len(batch) < OUTCOMES_PER_BATCH and outcome.task_id not in seen:
                seen.add(outcome.task_id)
                batch.append(outcome)
            else:
                later.append(outcome)
        self.outcomes = later
        logs, self.logs = self.logs[:LOGS_PER_BATCH], self.logs[LOGS_PER_BATCH:]
        return batch, logs

    async def _write_batch(self) -> None:
        """Write one batch; if it fails, keep it and pause before the next try."""
        delay = await self.write_once()
        if delay:
            await asyncio.sleep(delay)

    async def write_once(self) -> float:
        """Write one batch; return 0 when written, else the pause before trying again (the
        batch is put back at the head)."""
        batch, logs = self._take()
        if not batch and not logs:
            return 0.0
        try:
            done = await self.finish(batch, logs)
        except StoreUnavailable as exc:
            self.outcomes[:0] = batch
            self.logs[:0] = logs
            return self._outage.failed(exc, f"recording {len(self.outcomes)} outcomes")
        except AgentQueueError as exc:
            # Not a passing fault: something in the batch cannot be written. Write each part
            # alone so one bad outcome does not hold back every other one for good.
            log.warning("could not record %d outcomes (%s); recording them one by one",
                        len(batch), exc)  # fmt: skip
            return await self._write_apart(batch, logs)
        self._recorded(batch, done)
        return 0.0

    def _recorded(self, batch: Sequence[Outcome], done: dict[UUID, Task | Refusal]) -> None:
        self._outage.ok(f"{len(batch)} outcomes recorded")
        self.written += len(batch)
        for task_id, answer in done.items():
            if isinstance(answer, Refusal):
                log.info("outcome for task %s not recorded: %s", task_id, answer.message)
        if self.on_recorded is not None:
            self.on_recorded(batch, done)

    async def _write_apart(self, batch: list[Outcome], logs: list[LogRecord]) -> float:
        """Write each outcome, then the logs, on its own. One that still cannot be written is
        dropped with an error: its lease lapses and the scheduler retries the task (or, if it
        keeps failing, leaves it in dead_letter for a person)."""
        parts: list[tuple[list[Outcome], list[LogRecord]]] = [([o], []) for o in batch]
        if logs:
            parts.append(([], logs))
        for index, (outcomes, records) in enumerate(parts):
            try:
                done = await self.finish(outcomes, records)
            except StoreUnavailable as exc:
                for rest_outcomes, rest_logs in reversed(parts[index:]):
                    self.outcomes[:0] = rest_outcomes
                    self.logs[:0] = rest_logs
                return self._outage.failed(exc, f"recording {len(self.outcomes)} outcomes")
            except AgentQueueError as exc:
                what = (
                    f"the outcome for task {outcomes[0].task_id}"
                    if outcomes
                    else f"{len(records)} log records"
                )
                log.error("dropping %s, which cannot be recorded: %s", what, exc)
                continue
            self._recorded(outcomes, done)
        return 0.0

    async def close(self, patience_secs: float) -> None:
        """At shutdown: let batches under way end, then write what is left, trying for up to
        ``patience_secs`` while the database is away (after that the leases have lapsed, and
        the scheduler retries those tasks anyway)."""
        await self.jobs.wait_all(self._writing)
        give_up = time.monotonic() + patience_secs
        while self.outcomes or self.logs:
            pause = await self.write_once()
            if not pause:
                continue
            if time.monotonic() + pause > give_up:
                log.error(
                    "giving up on %d outcomes; their leases will lapse and the tasks will be "
                    "retried", len(self.outcomes),
                )  # fmt: skip
                return
            await asyncio.sleep(pause)
