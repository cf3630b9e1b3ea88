"""Submits through the API, as the token's name within its tenant.

Single submits that arrive while an earlier batch is being written are gathered and written
together in one ``submit_many`` (a group commit): under many concurrent clients that is one
transaction for many tasks instead of one each, and a lone client waits for nothing. Every
item is checked on its own first (and only then: the batch is written with ``submit_parsed``),
so a bad item is answered alone with its own field names and never fails its neighbours; a
batch the store refuses as a whole (a dependency that does not exist, say) is written again one
item at a time so each caller gets its own answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..domain.access import Principal, in_scope
from ..domain.errors import AgentQueueError
from ..service import submit as submit_service
from ..service.runtime import Runtime
from ..service.submit import SubmitResult
from ..spec import TaskSpec, parse_specs

MAX_BATCH = 500


@dataclass
class _Waiting:
    spec: TaskSpec
    tenant: str | None
    done: asyncio.Future[SubmitResult]
    one: bool
    """It stays one task (its pipeline does not broadcast it), so it may share a batch."""


@dataclass
class Submitter:
    """Submits for API callers, gathering concurrent single submits into batches."""

    rt: Runtime
    waiting: list[_Waiting] = field(default_factory=list)
    flushing: asyncio.Task[None] | None = None

    def _defaults(self, who: Principal) -> dict[str, Any]:
        return {"requested_by": who.name}

    async def submit_many(
        self, who: Principal, items: Sequence[Mapping[str, Any]]
    ) -> list[SubmitResult]:
        """A bulk submit: all or nothing, fields named ``tasks[i].field``."""
        return await submit_service.submit_many(
            self.rt, items, tenant=who.tenant, defaults=self._defaults(who)
        )

    async def submit(self, who: Principal, item: Mapping[str, Any]) -> SubmitResult:
        """One task, written with whatever other single submits are waiting."""
        merged = {"tenant": who.tenant or self.rt.settings.queue.default_tenant}
        merged.update(self._defaults(who))
        spec = parse_specs(
            [item],
            max_payload_bytes=self.rt.settings.queue.max_payload_bytes,
            allow_private_callbacks=self.rt.settings.callbacks.allow_private,
            defaults=merged,
            single=True,
        )[0]
        in_scope(who.tenant, spec.tenant)
        done: asyncio.Future[SubmitResult] = asyncio.get_running_loop().create_future()
        self.waiting.append(_Waiting(spec, who.tenant, done, self._one_task(spec)))
        if self.flushing is None:
            self.flushing = asyncio.create_task(self._flush())
        return await done

    async def _flush(self) -> None:
        try:
            while self.waiting:
                batch, self.waiting = self.waiting[:MAX_BATCH], self.waiting[MAX_BATCH:]
                await self._write(batch)
        finally:
            self.flushing = None

    def _one_task(self, spec: TaskSpec) -> bool:
        pipeline = self.rt.pipelines.for_spec(spec)
        return pipeline is not None and len(pipeline.expand(spec)) == 1

    async def _write(self, waiting: list[_Waiting]) -> None:
        batch = [w for w in waiting if w.one]
        alone = [w for w in waiting if not w.one]
        if len(batch) == 1:
            alone, batch = batch + alone, []
        if batch:
            try:
                # Each spec's tenant was checked against its caller's token on the way in.
                results = await submit_service.submit_parsed(self.rt, [w.spec for w in batch])
            except AgentQueueError:
                pass  # some item spoils the batch: each is written alone, for its own answer
            except BaseException as exc:
                for w in batch:
                    if not w.done.done():
                        w.done.set_exception(exc)
                raise
            else:
                for w, result in zip(batch, results, strict=True):
                    if not w.done.done():
                        w.done.set_result(result)
                batch = []
        for w in alone + batch:
            try:
                result = (
                    await submit_service.submit_parsed(
                        self.rt, [w.spec], tenant=w.tenant, single=True
                    )
                )[0]
            except BaseException as exc:  # the caller's answer, whatever it is
                if not w.done.done():
                    w.done.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
            else:
                if not w.done.done():
                    w.done.set_result(result)
