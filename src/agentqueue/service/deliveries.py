"""Inspecting and retrying deliveries (callbacks, replies on GitHub, alerts): what
``agentqueue deliveries`` and ``/v1/deliveries`` do, scoped to a tenant when one is given."""

from __future__ import annotations

from uuid import UUID

from ..domain.deliveries import DELIVERY_STATES, KINDS, DeliveryRecord
from ..domain.errors import Conflict, InvalidInput, NotFound
from ..store.base import DeliveryFilter
from .runtime import Runtime

MAX_LIMIT = 500


async def list_deliveries(
    rt: Runtime,
    *,
    tenant: str | None = None,
    kind: str | None = None,
    state: str | None = None,
    task_id: UUID | None = None,
    limit: int = 50,
) -> list[DeliveryRecord]:
    """Deliveries matching every given filter, newest first (without their tries)."""
    if kind is not None and kind not in KINDS:
        raise InvalidInput(f"must be one of {', '.join(KINDS)}", "kind")
    if state is not None and state not in DELIVERY_STATES:
        raise InvalidInput(f"must be one of {', '.join(DELIVERY_STATES)}", "state")
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"must be between 1 and {MAX_LIMIT}", "limit")
    flt = DeliveryFilter(kind=kind, state=state, task_id=task_id, tenant=tenant, limit=limit)
    return await rt.store.list_deliveries(flt)


async def get_delivery(rt: Runtime, delivery_id: int, tenant: str | None = None) -> DeliveryRecord:
    """One delivery with every try; NotFound if there is none (in ``tenant``)."""
    found = await rt.store.get_delivery(delivery_id, tenant)
    if found is None:
        raise NotFound(f"no delivery {delivery_id}")
    return found


async def retry_delivery(
    rt: Runtime, delivery_id: int, tenant: str | None = None
) -> DeliveryRecord:
    """Make a pending or given-up delivery due now (its tries kept); Conflict if it was
    delivered or a deliverer is sending it right now."""
    async with rt.store.transaction() as tx:
        retried = await tx.retry_delivery(delivery_id, rt.clock.now(), tenant)
    found = await get_delivery(rt, delivery_id, tenant)
    if not retried:
        if found.state == "delivered":
            raise Conflict(f"delivery {delivery_id} was delivered")
        raise Conflict(f"delivery {delivery_id} is being sent now; try again shortly")
    return found
