"""Contract of API tokens (R20): stored once by name and prefix, found by prefix, listed
without secrets, revoked once."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from agentqueue import ManualClock
from agentqueue.domain.access import Role, TokenRecord
from agentqueue.ids import new_task_id
from agentqueue.store import Store


def token(name: str, prefix: str, clock: ManualClock, **changes: object) -> TokenRecord:
    """A token record as the token service makes one."""
    record = TokenRecord(
        id=new_task_id(),
        name=name,
        prefix=prefix,
        secret_hash="ab" * 32,
        role=Role.SUBMITTER,
        tenant="acme",
        created_at=clock.now(),
        created_by="root",
        expires_at=clock.now() + timedelta(days=90),
    )
    return replace(record, **changes)  # type: ignore[arg-type]


async def test_insert_token_refuses_a_taken_name_or_prefix(
    store: Store, clock: ManualClock
) -> None:
    """insert_token adds a token; another with the same name, or the same lookup prefix, is
    refused and changes nothing."""
    first = token("ci", "p1", clock)
    assert await store.insert_token(first)
    assert not await store.insert_token(token("ci", "p2", clock))
    assert not await store.insert_token(token("other", "p1", clock))
    assert await store.list_tokens() == [first]


async def test_token_by_prefix_reads_back_every_field(store: Store, clock: ManualClock) -> None:
    """token_by_prefix finds the token (role, tenant, times exactly as written) or None; an
    admin token's missing tenant and a token without expiry read back as None."""
    admin = token("root", "pa", clock, role=Role.ADMIN, tenant=None, expires_at=None)
    worker = token("w1", "pw", clock, role=Role.WORKER)
    assert await store.insert_token(admin)
    assert await store.insert_token(worker)
    assert await store.token_by_prefix("pa") == admin
    assert await store.token_by_prefix("pw") == worker
    assert await store.token_by_prefix("nope") is None


async def test_list_tokens_by_name(store: Store, clock: ManualClock) -> None:
    """list_tokens returns every token, revoked ones too, by name."""
    for name, prefix in [("zed", "p1"), ("amy", "p2"), ("kim", "p3")]:
        assert await store.insert_token(token(name, prefix, clock))
    await store.revoke_token("kim", clock.now())
    assert [t.name for t in await store.list_tokens()] == ["amy", "kim", "zed"]


async def test_revoke_token_once(store: Store, clock: ManualClock) -> None:
    """revoke_token stamps the time and returns the token; revoking again, or a name nobody
    has, returns None and leaves the first revocation's time."""
    assert await store.insert_token(token("ci", "p1", clock))
    first = clock.now()
    revoked = await store.revoke_token("ci", first)
    assert revoked is not None and revoked.revoked_at == first
    clock.advance(60)
    assert await store.revoke_token("ci", clock.now()) is None
    assert await store.revoke_token("ghost", clock.now()) is None
    found = await store.token_by_prefix("p1")
    assert found is not None and found.revoked_at == first
