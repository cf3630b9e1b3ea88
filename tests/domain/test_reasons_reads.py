"""The reads a task's reasons need (domain.waiting.reads_facts and reads_load) never leave out a
fact :func:`why_waiting` draws on for that task: ``GET /v1/tasks/{id}`` and ``show`` read only
what those two say (service.waiting.why), so a reason that came to depend on a fact they do not
read would be given from a default instead. Every task and every set of facts is tried here."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any
from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st
from task_factory import START, make_task

from agentqueue.domain.models import Task
from agentqueue.domain.states import HOLD_APPROVAL, HOLD_DEPENDENCIES, TaskState
from agentqueue.domain.waiting import Facts, RouteAnswer, reads_facts, reads_load, why_waiting

S = TaskState
TASK = UUID(int=1)
DEPS = (UUID(int=2), UUID(int=3))
TYPES = ("bugfix", "docs")
AGENTS = ("coder", "fixer")
ROUTES: tuple[RouteAnswer, ...] = (
    (None, ""),
    ((), "no agent can do it"),
    (("coder",), ""),
    (("coder", "fixer"), ""),
)
"""What a task's pipeline may answer: no routing, no agent, one agent, two."""


def _times() -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.integers(-120, 120).map(lambda s: START + timedelta(seconds=s)))


@st.composite
def tasks(draw: st.DrawFn, task_id: UUID = TASK) -> Task:
    """A task in any state, of either type, routed or not, held or not, due or not; one
    blocked on dependencies depends on one or both of DEPS (which may depend on each other:
    why_waiting reads them a few levels down)."""
    state = draw(st.sampled_from(list(S)))
    fields: dict[str, Any] = {
        "id": task_id,
        "task_type": draw(st.sampled_from(TYPES)),
        "run_after": draw(_times()),
        "retry_count": draw(st.integers(0, 3)),
        "agent": draw(st.sampled_from((None, *AGENTS))),
    }
    if state is S.BLOCKED:
        hold = draw(st.sampled_from((HOLD_APPROVAL, HOLD_DEPENDENCIES)))
        fields["hold"] = hold
        if hold == HOLD_DEPENDENCIES:
            some = st.lists(st.sampled_from(DEPS), min_size=1, max_size=2, unique=True)
            fields["depends_on"] = tuple(draw(some))
    return make_task(state, **fields)


@st.composite
def facts(draw: st.DrawFn) -> Facts:
    """Any facts at START: paused types, caps and admitted work, the dependencies (themselves
    in any state, one not read taken to move), the routing."""
    answer = draw(st.sampled_from(ROUTES))
    dependencies = {dep: draw(tasks(dep)) for dep in DEPS if draw(st.booleans())}
    counts = st.dictionaries(st.sampled_from(AGENTS), st.integers(0, 3))
    return Facts(
        now=START,
        paused=frozenset(draw(st.sets(st.sampled_from(TYPES)))),
        agent_caps=draw(counts),
        agent_load=draw(counts),
        max_active=draw(st.one_of(st.none(), st.integers(0, 4))),
        active=draw(st.integers(0, 5)),
        claims_admit=draw(st.booleans()),
        dependencies=dependencies,
        route=lambda task: answer,
    )


@settings(max_examples=400, deadline=None)
@given(task=tasks(), given_facts=facts())
def test_a_task_whose_reasons_read_no_facts_gets_the_same_reasons_without_them(
    task: Task, given_facts: Facts
) -> None:
    if not reads_facts(task):
        assert why_waiting(task, Facts(now=START)) == why_waiting(task, given_facts)


@settings(max_examples=400, deadline=None)
@given(task=tasks(), given_facts=facts())
def test_a_task_whose_reasons_read_no_load_gets_the_same_reasons_without_it(
    task: Task, given_facts: Facts
) -> None:
    agents = given_facts.route(task)[0]
    if not reads_load(task, given_facts.max_active, agents):
        unread = replace(given_facts, agent_load={}, active=0)
        assert why_waiting(task, unread) == why_waiting(task, given_facts)


def test_the_facts_each_state_reads() -> None:
    """What the two say, state by state, with a global cap, with agents, and with neither (the
    properties above hold them to why_waiting)."""

    def read(task: Task) -> tuple[bool, bool, bool, bool]:
        loads = [reads_load(task, cap, agents) for cap, agents in ((4, None), (None, ("a",)))]
        return (reads_facts(task), *loads, reads_load(task, None, None))

    by_state = {state: read(make_task(state)) for state in S}
    # Pending or retrying: the caps, only where one applies.
    assert by_state[S.PENDING] == by_state[S.RETRYING] == (True, True, True, False)
    assert by_state[S.QUEUED] == (True, False, False, False)  # paused, routing; admitted
    assert by_state[S.EXECUTING] == by_state[S.WAITING_TOOL] == (False, False, False, False)
    for ended in (S.COMPLETED, S.FAILED, S.DEAD_LETTER, S.CANCELLED):
        assert by_state[ended] == (False, False, False, False)
    approval = make_task(S.BLOCKED, hold=HOLD_APPROVAL)
    dependencies = make_task(S.BLOCKED, hold=HOLD_DEPENDENCIES, depends_on=DEPS)
    assert read(approval) == (False, False, False, False)
    assert read(dependencies) == (True, False, False, False)  # the dependencies' states
