"""Why a task waits (domain.waiting): each waiting case gives its reason, and whether it keeps
an ``--until-idle`` process running is decided by the same reasons."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

from task_factory import START, make_task

from agentqueue.domain.models import Task
from agentqueue.domain.states import HOLD_APPROVAL, HOLD_DEPENDENCIES, TaskState
from agentqueue.domain.waiting import (
    Facts,
    RouteAnswer,
    Scope,
    Survey,
    keeps,
    survey,
    why_waiting,
)

S = TaskState
DEP = UUID(int=2)
DEEPER = UUID(int=3)


def codes(task: Task, facts: Facts) -> list[str]:
    return [r.code for r in why_waiting(task, facts)]


def to_agents(*names: str) -> Facts:
    def route(task: Task) -> RouteAnswer:
        return names, "" if names else "no agent can do it: none declares task type 'bugfix'"

    return Facts(now=START, route=route, agent_caps={"coder": 2, "fixer": 1})


def test_an_ended_task_waits_for_nothing() -> None:
    for state in (S.COMPLETED, S.FAILED, S.DEAD_LETTER, S.CANCELLED):
        assert why_waiting(make_task(state), Facts(now=START)) == []


def test_a_pending_task_with_nothing_against_it_waits_for_admission() -> None:
    [reason] = why_waiting(make_task(assignee=None), Facts(now=START))
    assert (reason.code, reason.moves) == ("admission", True)
    assert "the scheduler" in reason.text
    # Under a global cap alone, a worker's claim admits it.
    capped = Facts(now=START, max_active=5, active=1, claims_admit=True)
    [reason] = why_waiting(make_task(assignee=None), capped)
    assert reason.code == "admission" and "a worker's claim" in reason.text


def test_a_paused_type_is_named_and_needs_a_person() -> None:
    [reason, *_] = why_waiting(make_task(), Facts(now=START, paused=frozenset({"bugfix"})))
    assert reason.code == "paused" and "agentqueue resume bugfix" in reason.text
    assert not reason.moves


def test_a_task_no_agent_can_take_says_what_routing_said() -> None:
    [reason] = why_waiting(make_task(), to_agents())
    assert reason.code == "no_agent" and "none declares task type 'bugfix'" in reason.text
    assert not reason.moves


def test_agents_at_their_cap_and_the_global_cap_are_named_with_their_load() -> None:
    full = to_agents("coder")
    full = Facts(
        now=START, route=full.route, agent_caps={"coder": 2}, agent_load={"coder": 2},
        max_active=5, active=5,
    )  # fmt: skip
    reasons = why_waiting(make_task(), full)
    assert [r.code for r in reasons] == ["agent_cap", "global_cap"]
    assert "coder (2/2)" in reasons[0].text and "5/5" in reasons[1].text
    assert all(r.moves for r in reasons)
    one_free = Facts(
        now=START, route=lambda t: (("coder", "fixer"), ""),
        agent_caps={"coder": 2, "fixer": 1}, agent_load={"coder": 2},
    )  # fmt: skip
    assert codes(make_task(), one_free) == ["admission"]


def test_a_retry_in_its_backoff_says_when_it_is_due_and_moves() -> None:
    retrying = make_task(S.RETRYING, retry_count=1, run_after=START + timedelta(seconds=4))
    [reason] = why_waiting(retrying, Facts(now=START))
    assert reason.code == "backoff" and "retry 1 of 3" in reason.text
    assert "2026-03-01T09:00:04+00:00" in reason.text and reason.moves


def test_a_task_scheduled_for_later_moves_but_does_not_keep_a_process() -> None:
    later = make_task(run_after=START + timedelta(hours=1))
    reasons = why_waiting(later, Facts(now=START))
    assert reasons[0].code == "scheduled" and reasons[0].moves
    assert not keeps(reasons)


def test_an_approval_hold_needs_a_person() -> None:
    held = make_task(S.BLOCKED, hold=HOLD_APPROVAL, state_reason="touches payments")
    [reason] = why_waiting(held, Facts(now=START))
    assert reason.code == "approval" and "touches payments" in reason.text
    assert not reason.moves and "agentqueue approve" in reason.text


def test_dependencies_name_the_unfinished_ones_and_their_states() -> None:
    done, running = UUID(int=10), UUID(int=11)
    dependent = make_task(S.BLOCKED, hold=HOLD_DEPENDENCIES, depends_on=(done, running))
    deps = {
        done: make_task(S.COMPLETED, id=done),
        running: make_task(S.EXECUTING, id=running),
    }
    [reason] = why_waiting(dependent, Facts(now=START, dependencies=deps))
    assert reason.code == "dependencies" and reason.moves
    assert "1 of 2" in reason.text and "00000000 (executing)" in reason.text


def test_a_dependency_that_ended_badly_means_cancellation() -> None:
    dependent = make_task(S.BLOCKED, hold=HOLD_DEPENDENCIES, depends_on=(DEP,))
    deps = {DEP: make_task(S.DEAD_LETTER, id=DEP)}
    [reason] = why_waiting(dependent, Facts(now=START, dependencies=deps))
    assert reason.code == "dependency_failed" and "dead_letter" in reason.text
    assert not reason.moves


def test_a_dependency_that_cannot_go_on_says_why_through_the_chain() -> None:
    dependent = make_task(S.BLOCKED, hold=HOLD_DEPENDENCIES, depends_on=(DEP,))
    middle = make_task(S.BLOCKED, id=DEP, hold=HOLD_DEPENDENCIES, depends_on=(DEEPER,))
    held = make_task(S.BLOCKED, id=DEEPER, hold=HOLD_APPROVAL, state_reason="rule x")
    [reason] = why_waiting(dependent, Facts(now=START, dependencies={DEP: middle, DEEPER: held}))
    assert reason.code == "dependency_stuck" and not reason.moves
    assert "held for approval" in reason.text


def test_queued_and_waiting_on_a_tool_and_executing_move() -> None:
    facts = Facts(now=START)
    assert codes(make_task(S.QUEUED, agent="coder"), facts) == ["claim"]
    [tool] = why_waiting(make_task(S.WAITING_TOOL), facts)
    assert tool.code == "tool" and "search" in tool.text and tool.moves
    [running] = why_waiting(make_task(S.EXECUTING), facts)
    assert running.code == "executing" and "worker-1" in running.text


# --- for a process (--until-idle) -----------------------------------------------------------

HANDLERS = Scope("me", ((frozenset({"bugfix", "docs"}), frozenset()),), left_out=frozenset({"x"}))


def mine(**kw: object) -> Facts:
    return Facts(now=START, scope=HANDLERS, **kw)  # type: ignore[arg-type]


def test_a_type_the_process_does_not_run_does_not_keep_it() -> None:
    reasons = why_waiting(make_task(task_type="translate", assignee=None), mine())
    assert reasons[0].code == "not_served" and "'translate'" in reasons[0].text
    assert not keeps(reasons)
    left_out = why_waiting(make_task(task_type="x", assignee=None), mine())
    assert left_out[0].code == "not_served" and "left out" in left_out[0].text


def test_a_paused_type_does_not_keep_it() -> None:
    assert not keeps(why_waiting(make_task(), mine(paused=frozenset({"bugfix"}))))


def test_its_own_work_on_the_way_keeps_it() -> None:
    assert keeps(why_waiting(make_task(assignee=None), mine()))
    assert keeps(why_waiting(make_task(S.RETRYING, run_after=START + timedelta(seconds=9)), mine()))
    assert keeps(why_waiting(make_task(S.EXECUTING, assigned_to="me"), mine()))
    assert keeps(why_waiting(make_task(S.QUEUED), mine()))


def test_a_task_routed_to_an_agent_it_does_not_run_does_not_keep_it() -> None:
    agents_only = Scope("me", ((frozenset({"bugfix"}), frozenset({"fixer"})),))
    facts = Facts(now=START, scope=agents_only)
    reasons = why_waiting(make_task(S.QUEUED, agent="coder"), facts)
    assert reasons[0].code == "not_served" and "coder" in reasons[0].text
    assert keeps(why_waiting(make_task(S.QUEUED, agent="fixer"), facts))


def test_executing_elsewhere_keeps_it_only_for_a_type_it_runs() -> None:
    assert keeps(why_waiting(make_task(S.EXECUTING), mine()))  # a retry may come back to it
    other = make_task(S.EXECUTING, task_type="translate")
    assert not keeps(why_waiting(other, mine()))


def test_a_dependent_waits_for_a_dependency_only_if_that_will_complete() -> None:
    dependent = make_task(S.BLOCKED, hold=HOLD_DEPENDENCIES, depends_on=(DEP,))
    running_elsewhere = make_task(S.EXECUTING, id=DEP, task_type="translate")
    assert keeps(why_waiting(dependent, mine(dependencies={DEP: running_elsewhere})))
    its_own = make_task(S.PENDING, id=DEP, assignee=None)
    assert keeps(why_waiting(dependent, mine(dependencies={DEP: its_own})))
    nobody_runs = make_task(S.PENDING, id=DEP, task_type="translate")
    reasons = why_waiting(dependent, mine(dependencies={DEP: nobody_runs}))
    assert reasons[0].code == "dependency_stuck" and "'translate'" in reasons[0].text
    assert not keeps(reasons)


def test_tools_it_answers_keep_it() -> None:
    waiting = make_task(S.WAITING_TOOL, task_type="translate")
    assert not keeps(why_waiting(waiting, mine()))
    with_tool = Scope("me", HANDLERS.serves, tools=frozenset({"search"}))
    assert keeps(why_waiting(waiting, Facts(now=START, scope=with_tool)))


def test_the_survey_counts_what_is_left_by_reason_with_a_few_ids() -> None:
    tasks = [
        make_task(id=UUID(int=i), task_type="translate", assignee=None) for i in range(1, 6)
    ] + [make_task(S.BLOCKED, id=UUID(int=9), hold=HOLD_APPROVAL)]
    found = survey(tasks, mine())
    assert found.kept == 0 and found.total_left == 6
    lines = found.lines()
    assert lines[0].split()[0] == "5" and "'translate'" in lines[0] and ", ..." in lines[0]
    assert lines[1].split()[0] == "1" and "approval: held for approval" in lines[1]
    busy = survey([*tasks, make_task(assignee=None)], mine(), Survey())
    assert busy.kept == 1
