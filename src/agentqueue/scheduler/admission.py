"""Admission under limits (R4, R12): which pending tasks move to the queue, and how many.

Without caps or rate limits, admission is ordering only and runs as one set-wise statement
(``scheduler.steps.admit``). With them, one admitter at a time (a lock the store holds for
the transaction) counts what is admitted, reads the best candidates of each tenant, and lets
:func:`plan` choose; the choice is then written set-wise, with the rate buckets, in the same
transaction. :func:`plan` is pure, so every rule is tested without a database.

The rules, in order: the P0 lane, then aged priority, then age (R4); among tasks of equal rank,
the tenant with the least admitted work per unit of weight (fair share); a task is skipped while
the global cap, its agent's cap or one of its rate limits has no room. Caps count admitted work
(queued and executing), so a retried task comes back through here like a new one.

Routing (R14) happens here too: the task's pipeline names the agents that may take it
(agentqueue.pipelines), the plan gives it to the least loaded of those with room and tokens, and
the admission records that agent on the task (only its executors claim it). A task no agent can
take stays pending with the reason in its ``state_reason``.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from uuid import UUID

from ..config import Settings
from ..domain.priority import order_key
from ..domain.states import Action, bulk_event
from ..pipelines import Route
from ..service.load import Load
from ..service.records import ADMITTER
from ..service.runtime import Runtime
from ..store.base import Bucket, Candidate, CandidateQuery, Later, Tx


@dataclass(frozen=True)
class RateLimit:
    """A token bucket: ``per_sec`` tokens come back each second, at most ``burst`` are kept."""

    per_sec: float
    burst: float

    def refill(self, bucket: Bucket | None, now: datetime) -> float:
        """The tokens ``bucket`` holds at ``now`` (a bucket never used starts full)."""
        if bucket is None:
            return self.burst
        elapsed = max(0.0, (now - bucket.updated_at).total_seconds())
        # Rounded, so six seconds at 10 a minute make a whole token, not 0.9999999.
        return round(min(self.burst, bucket.tokens + elapsed * self.per_sec), 9)


@dataclass(frozen=True)
class AdmissionPolicy:
    """The limits admission weighs, from the configuration."""

    max_active: int | None = None
    agent_caps: Mapping[str, int] = field(default_factory=dict)
    """Each configured agent's cap, in configuration order (ties in load go to the first)."""
    serving: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """The agents that declare each task type."""
    type_limits: Mapping[str, str] = field(default_factory=dict)
    agent_limits: Mapping[str, str] = field(default_factory=dict)
    rates: Mapping[str, RateLimit] = field(default_factory=dict)
    fair_share: bool = True
    weights: Mapping[str, float] = field(default_factory=dict)
    aging_secs: float = 600.0
    preempt_after_secs: float | None = None
    """R11: a P0 task may go to an agent at its cap that runs a task of at least
    ``preempt_min_priority`` started more than this long ago (None: preemption is off)."""
    preempt_min_priority: int = 7
    _limits: dict[tuple[str, str | None], tuple[str, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """limits_of's answers so far (a pass asks it for every candidate and agent)."""

    @classmethod
    def from_settings(cls, settings: Settings) -> AdmissionPolicy:
        """The policy ``settings`` describe."""
        serving: dict[str, list[str]] = {}
        for name, agent in settings.agents.items():
            for task_type in agent.task_types:
                serving.setdefault(task_type, []).append(name)
        return cls(
            max_active=settings.admission.max_active,
            agent_caps={name: a.max_concurrent for name, a in settings.agents.items()},
            serving={t: tuple(names) for t, names in serving.items()},
            type_limits={n: t.rate_limit for n, t in settings.task_types.items() if t.rate_limit},
            agent_limits={n: a.rate_limit for n, a in settings.agents.items() if a.rate_limit},
            rates={
                name: RateLimit(r.per_minute / 60.0, float(r.burst))
                for name, r in settings.rate_limits.items()
            },
            fair_share=settings.admission.fair_share,
            weights=dict(settings.admission.tenant_weights),
            aging_secs=settings.queue.aging_interval_secs,
            preempt_after_secs=(
                settings.preemption.after_secs if settings.preemption.enabled else None
            ),
            preempt_min_priority=settings.preemption.min_priority,
        )

    def limits_of(self, task_type: str, agent: str | None) -> tuple[str, ...]:
        """The rate limits a task of this type, run by this agent, draws a token from."""
        key = (task_type, agent)
        found = self._limits.get(key)
        if found is None:
            names = [self.type_limits.get(task_type), self.agent_limits.get(agent or "")]
            found = self._limits[key] = tuple(dict.fromkeys(n for n in names if n is not None))
        return found

    def used_limits(self) -> list[str]:
        """Every rate limit some task type or agent draws from."""
        return sorted({*self.type_limits.values(), *self.agent_limits.values()})


@dataclass(frozen=True)
class Plan:
    """What to admit, in order, to which agent, and the rate buckets as they stand afterwards."""

    ids: list[UUID]
    tokens: dict[str, float]
    room: int
    """How many more the global cap (or the batch) allowed when planning began."""
    limits: dict[UUID, tuple[str, ...]] = field(default_factory=dict)
    """The rate limits each chosen task took a token from."""
    agents: dict[UUID, str | None] = field(default_factory=dict)
    """The agent routing chose for each chosen task (None: no agent, any executor of its type)."""
    waiting: dict[UUID, str] = field(default_factory=dict)
    """Candidates no agent can take, with the reason (they stay pending)."""

    def refund(self, written: Sequence[UUID]) -> dict[str, float]:
        """The buckets after the admissions that were written (a chosen task that left
        pending meanwhile spends no token)."""
        left = dict(self.tokens)
        for task_id in set(self.ids) - set(written):
            for name in self.limits.get(task_id, ()):
                left[name] += 1.0
        return left

    def by_agent(self) -> dict[str | None, list[UUID]]:
        """The chosen ids grouped by agent, each group in admission order."""
        groups: dict[str | None, list[UUID]] = {}
        for task_id in self.ids:
            groups.setdefault(self.agents.get(task_id), []).append(task_id)
        return groups


def capacity(policy: AdmissionPolicy, load: Load, limit: int) -> int:
    """How many tasks may be admitted now: the batch, under the global cap."""
    if policy.max_active is None:
        return limit
    return max(0, min(limit, policy.max_active - load.total))


def full_types(
    policy: AdmissionPolicy, load: Load, tokens: Mapping[str, float], task_types: Sequence[str]
) -> list[str]:
    """Task types none of whose tasks (without an assignee) can be admitted now: every agent
    that declares the type is at its cap or out of tokens, or a rate limit of the type itself is
    empty; candidates behind them are read instead."""

    def empty(task_type: str, agent: str | None) -> bool:
        return any(tokens.get(name, 1.0) < 1.0 for name in policy.limits_of(task_type, agent))

    full = []
    for task_type in task_types:
        agents = policy.serving.get(task_type, ())
        if not agents:
            blocked = empty(task_type, None)
        else:
            blocked = all(
                load.by_agent.get(a, 0) >= policy.agent_caps[a] or empty(task_type, a)
                for a in agents
            )
        if blocked:
            full.append(task_type)
    return full


Router = Callable[[Candidate], Route]


def plan(
    candidates: Sequence[Candidate],
    load: Load,
    tokens: Mapping[str, float],
    policy: AdmissionPolicy,
    now: datetime,
    limit: int,
    route: Router = lambda c: Route.unrouted(),
    preemptible: Mapping[str, int] | None = None,
) -> Plan:
    """Choose up to ``limit`` candidates to admit, best first, within every limit, and the
    agent each goes to.

    ``tokens`` are the rate buckets refilled to ``now``; ``route`` is the candidate's pipeline
    saying which agents may take it. Tenants are served from a heap keyed by the rank of their
    best remaining task (lane, aged priority), then (with fair share) by their admitted work
    divided by their weight, then by that task's age. Among the agents a task may go to, the
    least loaded (admitted work over its cap) with room and tokens takes it. A P0 task for which
    every such agent is at its cap goes beyond the cap to one that runs a task it may preempt
    (``preemptible``, by agent; R11), once per such task.
    """
    room = capacity(policy, load, limit)
    left = dict(tokens)
    if room == 0 or not candidates:
        return Plan([], left, room)
    queues: dict[str, list[tuple[tuple[int, int, datetime, int], Candidate]]] = {}
    for c in candidates:
        key = order_key(c.priority, c.eligible_at, c.seq, now, policy.aging_secs)
        queues.setdefault(c.tenant, []).append((key, c))
    for queue in queues.values():
        queue.sort(key=lambda item: item[0], reverse=True)  # pop() takes the best
    served = Counter(load.by_tenant)
    agents = Counter(load.by_agent)
    # Each preemptible task makes room for one P0 task beyond its agent's cap, less the P0
    # tasks already admitted beyond it (they wait to take those slots).
    spare = Counter(
        {
            name: n - max(0, agents[name] - policy.agent_caps.get(name, 0))
            for name, n in (preemptible or {}).items()
        }
    )
    order = {name: i for i, name in enumerate(policy.agent_caps)}

    def entry(tenant: str) -> tuple[tuple[object, ...], str]:
        key = queues[tenant][-1][0]
        share = served[tenant] / policy.weights.get(tenant, 1.0) if policy.fair_share else 0.0
        return (key[0], key[1], share, key[2], key[3]), tenant

    def has_tokens(limits: tuple[str, ...]) -> bool:
        return all(left.get(name, 0.0) >= 1.0 for name in limits)

    heap = [entry(tenant) for tenant in queues]
    heapq.heapify(heap)
    chosen: list[UUID] = []
    took: dict[UUID, tuple[str, ...]] = {}
    routed: dict[UUID, str | None] = {}
    waiting: dict[UUID, str] = {}
    while heap and len(chosen) < room:
        _, tenant = heapq.heappop(heap)
        _, c = queues[tenant].pop()
        r = route(c)
        agent: str | None = None
        fits = False
        if r.agents is None:
            fits = has_tokens(policy.limits_of(c.task_type, None))
        elif not r.agents:
            waiting[c.id] = r.reason
        else:
            options = [
                a
                for a in r.agents
                if agents[a] < policy.agent_caps.get(a, 0)
                and has_tokens(policy.limits_of(c.task_type, a))
            ]
            if options:
                agent = min(
                    options, key=lambda a: (agents[a] / policy.agent_caps[a], agents[a], order[a])
                )
                fits = True
            elif c.priority == 0:
                over = [
                    a
                    for a in r.agents
                    if spare[a] > 0 and has_tokens(policy.limits_of(c.task_type, a))
                ]
                if over:
                    agent = over[0]
                    spare[agent] -= 1
                    fits = True
        if fits:
            limits = policy.limits_of(c.task_type, agent)
            chosen.append(c.id)
            took[c.id] = limits
            routed[c.id] = agent
            served[tenant] += 1
            if agent is not None:
                agents[agent] += 1
            for name in limits:
                left[name] -= 1.0
        if queues[tenant]:
            heapq.heappush(heap, entry(tenant))
    return Plan(chosen, left, room, took, routed, waiting)


def _same_read(guess: CandidateQuery, query: CandidateQuery) -> bool:
    """Whether the candidates read on ``guess`` (at this pass's time, leaving out its paused
    types) are what ``query`` asks for."""
    return (
        list(guess.tenants) == list(query.tenants)
        and list(guess.skip_types) == list(query.skip_types)
        and guess.per_tenant == query.per_tenant
    )


ROUTE_RETRY_SECS = 30.0
"""A task no agent can take is routed again this long after (the configuration a scheduler
reads changes only when it restarts, so more often would find the same answer)."""

MAX_TENANTS = 1000
"""Tenants with waiting work weighed in one admission pass."""

CANDIDATES_PER_TENANT = 200
"""Candidates read per priority level per tenant beyond the room the cap leaves."""


HandOver = Callable[[Tx, datetime, frozenset[str | None]], Awaitable[Callable[[bool], None]]]
"""Given an admission's transaction, its time and the agents it admitted tasks to (None: tasks
routed to no agent), claim in it what the worker running this scheduler has room for; returns
what to do once the transaction has ended (True: committed)."""


@dataclass(frozen=True)
class Admitting:
    """What an admission sent: the ids it admits (best first: read once it has committed),
    and the agents it admits to (None: no agent)."""

    ids: Later[list[UUID]]
    agents: frozenset[str | None]


async def admit_limited(rt: Runtime, limit: int, hand_over: HandOver | None = None) -> list[UUID]:
    """Admit under the configured caps, rate limits and fair share; return the ids admitted,
    best first. One transaction: counts, candidates, buckets and the admissions together, and,
    with ``hand_over``, the claims of the worker this scheduler runs in (its tasks start as the
    admission commits, with no notice and no claim of their own to wait for). The admissions
    and those claims are sent with the COMMIT: what they wrote is read once it has committed.

    Under a global cap alone the workers' claims admit (Settings.claims_admit): a pass reads
    the room, and runs the planner only when fair share has several tenants to weigh (the
    claims then take no pending task)."""
    settings = rt.settings
    if settings.claims_admit:
        # Workers' claims admit what they take, counting the cap themselves: the scheduler
        # admits only what fair share must weigh (several tenants waiting, with room left).
        room = await rt.store.admission_room()
        cap = settings.admission.max_active
        waiting = settings.admission.fair_share and room.several_tenants
        if not waiting or cap is None or room.active >= cap:
            return []
    return await _admit_once(rt, AdmissionPolicy.from_settings(settings), limit, hand_over)


async def _admit_once(
    rt: Runtime, policy: AdmissionPolicy, limit: int, hand_over: HandOver | None
) -> list[UUID]:
    """One admission transaction (see admit_limited).

    When the worker claims in it (``hand_over``), the admission is ``claiming``: its commit
    waits for the disk as every claim's does (the lock does not relax it), and its writes
    announce nothing; what the claims leave queued is announced after them
    (Tx.notify_queued)."""
    now = rt.clock.now()
    paused = sorted(await rt.paused_types())
    after: Callable[[bool], None] | None = None
    admitting: Admitting | None = None
    committed = False
    try:
        async with rt.store.transaction() as tx:
            claiming = hand_over is not None
            admitting = await _admit_in(tx, rt, policy, now, limit, paused, claiming)
            if admitting is not None and hand_over is not None:
                after = await hand_over(tx, now, admitting.agents)
                # The admission announced nothing: workers hear of what its claims left, the
                # executors of the agents it admitted to only.
                await tx.notify_queued(admitting.agents)
        committed = True
    finally:
        if after is not None:
            after(committed)
    return [] if admitting is None else admitting.ids.result()


async def _admit_in(
    tx: Tx,
    rt: Runtime,
    policy: AdmissionPolicy,
    now: datetime,
    limit: int,
    paused: list[str],
    claiming: bool,
) -> Admitting | None:
    """The planner's admission of :func:`admit_limited`, inside its transaction (None:
    nothing to admit).

    Without rate limits and a global cap, the candidates the last pass read are read again
    on that guess, in the round trip of the load and the tenants: when this pass asks for the
    same (the same tenants, full types and number per tenant, as it does while the same
    tenants wait), they are its candidates, one round trip saved; else it reads its own.
    (Under a cap a pass often stops at a full cap, and the guess would be read for nothing.)"""
    await tx.lock_admission(relaxed=not claiming)
    names = policy.used_limits()
    guess = None if names or policy.max_active is not None else rt.candidates_read
    ahead = None
    if guess is not None:
        ahead = await tx.admission_candidates(replace(guess, now=now, paused=paused))
    rows, tenants = await tx.load_and_tenants(MAX_TENANTS)
    load = Load.count(rows)
    room = capacity(policy, load, limit)
    if room == 0:
        return None
    stored = await tx.rate_buckets(names) if names else {}
    tokens = {name: policy.rates[name].refill(stored.get(name), now) for name in names}
    configured = sorted({*policy.serving, *policy.type_limits})
    full = full_types(policy, load, tokens, configured)
    per_tenant = min(limit, room + CANDIDATES_PER_TENANT)
    if not tenants:
        return None  # a pass woken by a completion often finds nothing to admit
    query = CandidateQuery(now, tenants, per_tenant, full, paused)
    if ahead is not None and guess is not None and _same_read(guess, query):
        candidates = ahead.result()  # arrived with the load
    else:
        candidates = await (await tx.admission_candidates(query)).get()
    rt.candidates_read = query
    pipelines = rt.pipelines
    preemptible: dict[str, int] = {}
    if policy.preempt_after_secs is not None and any(c.priority == 0 for c in candidates):
        before = now - timedelta(seconds=policy.preempt_after_secs)
        preemptible = await tx.preemptible(before, policy.preempt_min_priority)
    chosen = plan(
        candidates,
        load,
        tokens,
        policy,
        now,
        limit,
        lambda c: pipelines.route(c.kind, c),
        preemptible,
    )
    writes = [
        await tx.admit_ids(
            ids, now, bulk_event(Action.ADMIT, now, ADMITTER, agent), agent, notify=not claiming
        )
        for agent, ids in chosen.by_agent().items()
    ]
    await tx.note_waiting(chosen.waiting, now + timedelta(seconds=ROUTE_RETRY_SECS))
    order = chosen.ids

    def admitted(groups: list[list[UUID]]) -> list[UUID]:
        if sum(map(len, groups)) == len(order):
            return order  # every chosen task was written (each is in one group)
        written = {i for group in groups for i in group}
        return [i for i in order if i in written]

    written = Later.each(writes).map(admitted)
    if names:
        # The buckets keep the tokens of what was written (one round trip more, only with
        # rate limits).
        left = chosen.refund(await written.get())
        await tx.save_rate_buckets({name: Bucket(left[name], now) for name in names})
    if not chosen.ids:
        return None
    return Admitting(written, frozenset(chosen.agents.get(i) for i in chosen.ids))
