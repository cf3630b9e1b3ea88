"""Pipelines per kind (R14, R15) on each backend, driven step by step on the manual clock: the
seed's three bugs, guardrails and approval, routing by capability, mail point to point, and a
third kind registered from a module named in the configuration."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from scheduler_helpers import OpenQueue, agent

from agentqueue import AsyncQueue, ManualClock, Task, TaskState
from agentqueue.config import Settings, load_settings
from agentqueue.domain.errors import ConfigError, Forbidden, InvalidInput, TransitionRefused
from agentqueue.service.execution import Outcome, OutcomeKind

S = TaskState

SIX = ["pangtong", "simayi-challenger", "zhugeliang", "zhouyu", "guanyu", "zhangfei"]
DELETION = {
    "name": "data_deletion",
    "pattern": "删除|删掉|drop table|rm -rf",
    "action": "require_approval",
    "applies_to": ["task"],
}


async def claim_as(queue: AsyncQueue, agent_name: str, n: int = 100) -> list[Task]:
    """Claim what an executor running ``agent_name`` may take."""
    return await queue.claim(n, f"worker-{agent_name}", ["bugfix", "mail"], [agent_name])


async def actions_of(queue: AsyncQueue, task: Task) -> list[str]:
    return [e.action for e in await queue.events(task.id)]


# --- the seed's three bugs ----------------------------------------------------------------


async def test_bug_a_a_return_to_pending_keeps_the_assignee_and_clears_the_executor(
    open_queue: OpenQueue, clock: ManualClock
) -> None:
    queue = await open_queue(agents={name: agent(["bugfix", "mail"]) for name in SIX})
    mail = (
        await queue.submit(
            title="re: branch", task_type="mail", source="mail", assignee="simayi-challenger",
            requested_by="pangtong",
        )
    ).task  # fmt: skip
    task = (await queue.submit(title="fix", task_type="bugfix", assignee="zhouyu")).task
    for _ in range(2):  # two rounds: fail, back to pending, admitted to the same agent again
        await queue.tick()
        [m] = await claim_as(queue, "simayi-challenger")
        [t] = await claim_as(queue, "zhouyu")
        assert m.assigned_to == "worker-simayi-challenger"
        for claimed in (m, t):
            assert claimed.lock_token is not None
            await queue.fail(claimed.id, claimed.lock_token, "rate limited")
        clock.advance(seconds=60)
        await queue.tick()  # backoff elapsed: retrying -> pending (-> queued)
        for got in (await queue.get(mail.id), await queue.get(task.id)):
            assert got.assigned_to is None
        assert (await queue.get(mail.id)).assignee == "simayi-challenger"
        assert (await queue.get(task.id)).assignee == "zhouyu"
    events = await queue.events(mail.id)
    assert [e.data.get("agent") for e in events if e.action == "admit"] == ["simayi-challenger"] * 3
    # Nobody else was ever offered the mail.
    for other in SIX:
        if other != "simayi-challenger":
            assert not [t for t in await claim_as(queue, other) if t.id == mail.id]


async def test_bug_b_a_guardrail_hold_with_no_dependencies_is_never_advanced(
    open_queue: OpenQueue, clock: ManualClock
) -> None:
    queue = await open_queue(guardrails=[DELETION], approval={"approvers": ["ops"]})
    held = (await queue.submit(title="删掉 old rows", task_type="bugfix")).task
    assert held.state is S.BLOCKED and held.hold == "approval" and held.depends_on == ()
    dep = (await queue.submit(title="first", task_type="docs")).task
    waiting = (await queue.submit(title="second", task_type="docs", depends_on=[dep.id])).task
    await queue.tick()
    [claimed] = await queue.claim(5, "w")
    assert claimed.id == dep.id and claimed.lock_token is not None
    await queue.complete(claimed.id, claimed.lock_token)
    for _ in range(3):
        clock.advance(minutes=5)
        await queue.tick()  # the dependency step runs (it releases `waiting`)
    assert (await queue.get(waiting.id)).state in (S.PENDING, S.QUEUED)
    still = await queue.get(held.id)
    assert still.state is S.BLOCKED and still.hold == "approval"
    assert await actions_of(queue, still) == ["submit", "block"]


async def test_bug_c_guardrails_never_apply_to_mail(open_queue: OpenQueue) -> None:
    queue = await open_queue(agents={name: agent(["mail"]) for name in SIX}, guardrails=[DELETION])
    body = {"body": "把旧分支删掉 (rm -rf build/)"}
    mail = await queue.submit(
        title="删掉 the branch?", task_type="mail", source="mail", assignee="simayi-challenger",
        requested_by="pangtong", payload=body,
    )  # fmt: skip
    assert mail.task.kind == "mail" and mail.task.state is S.PENDING and mail.task.hold is None
    [admitted] = await queue.admit()
    assert admitted.id == mail.task.id and admitted.agent == "simayi-challenger"
    assert await actions_of(queue, admitted) == ["submit", "admit"]
    task = await queue.submit(title="tidy", task_type="mail", payload=body, source="api")
    assert task.task.kind == "task" and task.task.state is S.BLOCKED  # the same text, as a task


def test_a_guardrail_cannot_be_configured_for_mail() -> None:
    from agentqueue.pipelines import Pipelines

    for kinds, words in ((["task", "mail"], "never consults"), (["memo"], "no kind 'memo'")):
        settings = Settings(guardrails=[{**DELETION, "applies_to": kinds}])
        with pytest.raises(ConfigError, match=words) as caught:
            Pipelines(settings)
        assert caught.value.fields == ["guardrails.0.applies_to"]


# --- guardrails and approval ------------------------------------------------------------------


async def test_a_guarded_task_waits_until_an_approver_approves_and_both_are_audited(
    open_queue: OpenQueue,
) -> None:
    queue = await open_queue(guardrails=[DELETION], approval={"approvers": ["lead"]})
    task = (
        await queue.submit(title="cleanup", task_type="bugfix", payload={"cmd": "DROP TABLE x"})
    ).task
    assert task.state is S.BLOCKED and task.hold == "approval"
    assert "data_deletion" in (task.state_reason or "")
    [block] = [e for e in await queue.events(task.id) if e.action == "block"]
    assert block.data == {"hold": "approval", "rule": "data_deletion"}
    await queue.tick()
    assert await queue.claim(5, "w") == []
    with pytest.raises(Forbidden, match="intern is not an approver"):
        await queue.approve(task.id, actor="intern", reason="looks fine")
    assert (await queue.get(task.id)).state is S.BLOCKED
    approved = await queue.approve(task.id, actor="lead", reason="backup taken")
    assert approved.state is S.PENDING and approved.approved_by == "lead"
    await queue.tick()
    [claimed] = await queue.claim(5, "w")
    assert claimed.id == task.id
    [event] = [e for e in await queue.events(task.id) if e.action == "approve"]
    assert (event.actor, event.reason, event.to_state) == ("lead", "backup taken", S.PENDING)

    other = (await queue.submit(title="rm -rf /data", task_type="bugfix")).task
    rejected = await queue.reject(other.id, actor="lead", reason="never")
    assert rejected.state is S.CANCELLED and "rejected by lead: never" in (
        rejected.state_reason or ""
    )
    [event] = [e for e in await queue.events(other.id) if e.action == "reject"]
    assert (event.actor, event.reason, event.to_state) == ("lead", "never", S.CANCELLED)
    with pytest.raises(TransitionRefused):
        await queue.approve(other.id, actor="lead", reason="changed my mind")


async def test_guardrail_conditions_on_task_type_and_priority_and_per_rule_approvers(
    open_queue: OpenQueue,
) -> None:
    rule = {**DELETION, "task_types": ["bugfix"], "priorities": [0, 1], "approvers": ["dba"]}
    queue = await open_queue(guardrails=[rule], approval={"approvers": ["lead"]})
    sub = queue.submit
    other_type = await sub(title="删除 a", task_type="docs", priority=0, idempotency_key="a")
    assert other_type.task.state is not S.BLOCKED
    assert (await sub(title="删除 b", task_type="bugfix", priority=5)).task.state is not S.BLOCKED
    held = (await sub(title="删除 c", task_type="bugfix", priority=1)).task
    assert held.state is S.BLOCKED
    with pytest.raises(Forbidden):  # a general approver is not this rule's approver
        await queue.approve(held.id, actor="lead", reason="ok")
    assert (await queue.approve(held.id, actor="dba", reason="ok")).state is S.PENDING


async def test_a_dependent_meets_the_guardrails_after_its_dependencies(
    open_queue: OpenQueue,
) -> None:
    queue = await open_queue(guardrails=[DELETION], approval={"approvers": ["lead"]})
    dep = (await queue.submit(title="backup", task_type="docs")).task
    task = (await queue.submit(title="删掉 old data", task_type="bugfix", depends_on=[dep.id])).task
    assert task.state is S.BLOCKED and task.hold == "dependencies"
    await queue.tick()
    [claimed] = await queue.claim(5, "w")
    assert claimed.lock_token is not None
    await queue.complete(claimed.id, claimed.lock_token)
    await queue.tick()
    now = await queue.get(task.id)
    assert now.state is S.BLOCKED and now.hold == "approval"
    assert await actions_of(queue, now) == ["submit", "block", "unblock", "block"]
    await queue.approve(task.id, actor="lead", reason="backup done")
    await queue.tick()
    assert [t.id for t in await queue.claim(5, "w")] == [task.id]


def test_a_bad_guardrail_is_a_config_error_naming_the_field(tmp_path: Any) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[[guardrails]]\nname = "x"\npattern = "(unclosed"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert caught.value.fields == ["guardrails.0.pattern"]
    path.write_text(
        '[[guardrails]]\nname = "x"\npattern = "a"\n[[guardrails]]\nname = "x"\npattern = "b"\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert caught.value.fields == ["guardrails.1.name"]
    path.write_text('[[guardrails]]\nname = "x"\npattern = "a"\naction = "delete"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert caught.value.fields == ["guardrails.0.action"]


# --- routing ------------------------------------------------------------------------------


async def test_routing_goes_to_the_least_loaded_capable_agent_within_caps(
    open_queue: OpenQueue,
) -> None:
    queue = await open_queue(
        agents={
            "fixer-a": agent(["bugfix"], 2),
            "fixer-b": agent(["bugfix"], 3, labels=["python"]),
            "fixer-c": agent(["bugfix"], 1),
            "writer": agent(["docs"], 5),
        }
    )
    await queue.submit_many([{"title": f"bug {i}", "task_type": "bugfix"} for i in range(20)])
    admitted = await queue.admit()
    assert Counter(t.agent for t in admitted) == {"fixer-a": 2, "fixer-b": 3, "fixer-c": 1}
    # Least loaded first: the first three admissions went to three different agents.
    assert len({t.agent for t in admitted[:3]}) == 3
    # Each agent's executors take only its own tasks; a handler (no agents) takes none.
    assert await queue.claim(100, "h", ["bugfix"], []) == []
    mine = await claim_as(queue, "fixer-b")
    assert len(mine) == 3 and {t.agent for t in mine} == {"fixer-b"}
    assert all(t.lock_token for t in mine)
    await queue.finish([Outcome(t.id, t.lock_token, OutcomeKind.COMPLETED) for t in mine])  # type: ignore[arg-type]
    again = await queue.admit()
    assert Counter(t.agent for t in again) == {"fixer-b": 3}


async def test_labels_narrow_routing_and_a_task_no_agent_can_do_waits_with_its_reason(
    open_queue: OpenQueue,
) -> None:
    queue = await open_queue(
        agents={
            "fixer-a": agent(["bugfix"], 2),
            "fixer-b": agent(["bugfix"], 3, labels=["python"]),
        }
    )
    python = (await queue.submit(title="py bug", task_type="bugfix", labels=["python"])).task
    gpu = (await queue.submit(title="gpu bug", task_type="bugfix", labels=["gpu"])).task
    ghost = (await queue.submit(title="for a ghost", task_type="bugfix", assignee="ghost")).task
    lost = (await queue.submit(title="no one", task_type="deploy", labels=["prod"])).task
    plain = (await queue.submit(title="any bug", task_type="bugfix")).task
    admitted = await queue.admit()
    # fixer-b now has one task and fixer-a none: the plain bug goes to the less loaded.
    assert {t.id: t.agent for t in admitted} == {python.id: "fixer-b", plain.id: "fixer-a"}
    for waiting, words in (
        (gpu, "no agent declaring task type 'bugfix' has every label of gpu"),
        (ghost, "assignee 'ghost' is not a configured agent"),
        (lost, "none declares task type 'deploy'"),
    ):
        got = await queue.get(waiting.id)
        assert got.state is S.PENDING
        assert words in (got.state_reason or "")
    assert [e.action for e in await queue.events(gpu.id)] == ["submit"]  # a reason, no event


async def test_an_explicit_assignee_goes_to_that_agent_if_it_takes_the_task(
    open_queue: OpenQueue,
) -> None:
    queue = await open_queue(
        agents={"busy": agent(["bugfix"], 5), "idle": agent(["bugfix"], 5),
                "reviewer": agent(["review"], 2)}
    )  # fmt: skip
    await queue.submit_many([{"title": f"b{i}", "task_type": "bugfix", "assignee": "busy"}
                             for i in range(3)])  # fmt: skip
    wrong = (await queue.submit(title="look", task_type="bugfix", assignee="reviewer")).task
    admitted = await queue.admit()
    assert [t.agent for t in admitted] == ["busy"] * 3  # not the less loaded "idle"
    got = await queue.get(wrong.id)
    assert got.state is S.PENDING
    assert got.state_reason == "assignee 'reviewer' does not take task type 'bugfix'"
    # Each executor claims only what is routed to its agent, and only of the types it runs.
    assert await claim_as(queue, "idle") == []
    assert len(await queue.claim(10, "w", ["review"], ["busy"])) == 0
    assert len(await queue.claim(10, "w", ["bugfix"], ["busy"])) == 3


async def test_tasks_no_agent_can_take_never_hold_back_the_rest(
    open_queue: OpenQueue, clock: ManualClock
) -> None:
    queue = await open_queue(admission={"max_active": 5}, agents={"fixer": agent(["bugfix"], 5)})
    await queue.submit_many(
        [{"title": f"gpu {i}", "task_type": "bugfix", "labels": ["gpu"]} for i in range(300)]
    )
    clock.advance(1)
    later = (await queue.submit(title="plain", task_type="bugfix")).task
    assert [t.id for t in await queue.admit()] == []  # the 300 fill the window once
    assert [t.id for t in await queue.admit()] == [later.id]  # and then wait out of the way
    clock.advance(seconds=31)
    assert await queue.admit() == []  # looked at again: still nobody can take them
    stuck = await queue.list(state=[S.PENDING], limit=1)
    assert "gpu" in (stuck.items[0].state_reason or "")


async def test_types_no_agent_declares_go_to_handlers_unrouted(open_queue: OpenQueue) -> None:
    queue = await open_queue(agents={"fixer": agent(["bugfix"], 1)})
    task = (await queue.submit(title="write", task_type="docs")).task
    [admitted] = await queue.admit()
    assert admitted.id == task.id and admitted.agent is None
    assert [t.id for t in await queue.claim(5, "h", ["docs"], [])] == [task.id]


async def test_broadcast_only_where_configured_and_to_at_most_n(open_queue: OpenQueue) -> None:
    queue = await open_queue(
        agents={name: agent(["announce", "bugfix"], 1) for name in SIX},
        task_types={"announce": {"broadcast": 2}},
    )
    results = await queue.submit_many(
        [{"title": "release", "task_type": "announce", "source_id": "rel-1"}]
    )
    assert [r.task.assignee for r in results] == ["pangtong", "simayi-challenger"]
    assert len({r.task.id for r in results}) == 2
    plain = await queue.submit_many([{"title": "bug", "task_type": "bugfix"}])
    assert len(plain) == 1 and plain[0].task.assignee is None
    admitted = await queue.admit()
    assert sorted(str(t.agent) for t in admitted if t.task_type == "announce") == [
        "pangtong",
        "simayi-challenger",
    ]
    again = await queue.submit_many(
        [{"title": "release", "task_type": "announce", "source_id": "rel-1"}]
    )
    assert not any(r.created for r in again)  # the same delivery twice is the same tasks


# --- mail -------------------------------------------------------------------------------------


async def test_mail_needs_a_recipient_and_cannot_depend_on_tasks(open_queue: OpenQueue) -> None:
    queue = await open_queue()
    dep = (await queue.submit(title="x", task_type="docs")).task
    with pytest.raises(InvalidInput) as caught:
        await queue.submit_many(
            [
                {"title": "hi", "task_type": "mail", "source": "mail"},
                {"title": "hi", "task_type": "mail", "source": "mail", "assignee": "a",
                 "depends_on": [str(dep.id)]},
            ]
        )  # fmt: skip
    assert caught.value.fields == ["tasks[0].assignee", "tasks[1].depends_on"]
    with pytest.raises(InvalidInput) as caught:
        await queue.submit(title="x", task_type="docs", kind="nonesuch")
    assert caught.value.fields == ["kind"]


async def test_mail_to_an_unknown_recipient_waits_and_is_never_sent_to_anyone_else(
    open_queue: OpenQueue,
) -> None:
    queue = await open_queue(agents={name: agent(["mail"], 3) for name in SIX})
    mail = (await queue.submit(title="hi", task_type="mail", source="mail", assignee="simayi")).task
    assert await queue.admit() == []
    got = await queue.get(mail.id)
    assert got.state is S.PENDING
    assert got.state_reason == "recipient 'simayi' is not a configured agent"


# --- a third kind ---------------------------------------------------------------------------


async def test_a_third_kind_is_a_module_and_a_line_of_configuration(
    open_queue: OpenQueue,
) -> None:
    queue = await open_queue(
        pipelines={"modules": ["signoff_kind"]},
        agents={"signer": agent(["other"], 1), "fixer": agent(["signoff"], 1)},
        approval={"approvers": ["lead"]},
    )
    task = (await queue.submit(title="sign", task_type="signoff", source="manual")).task
    assert task.kind == "signoff" and task.state is S.BLOCKED and task.hold == "approval"
    with pytest.raises(InvalidInput) as caught:
        await queue.submit(title="sign", task_type="signoff", source="manual", assignee="fixer")
    assert caught.value.fields == ["assignee"]
    await queue.approve(task.id, actor="lead", reason="ok")
    [admitted] = await queue.admit()
    assert admitted.agent == "signer"  # its own routing, not the agent declaring the type
    # The same type from another source is an ordinary task, routed by capability.
    plain = (await queue.submit(title="sign", task_type="signoff", source="api")).task
    assert plain.kind == "task"
    [admitted] = await queue.admit()
    assert admitted.id == plain.id and admitted.agent == "fixer"


def test_a_pipeline_module_that_cannot_be_imported_is_a_config_error(tmp_path: Any) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[pipelines]\nmodules = ["no_such_module_here"]\n')
    settings = load_settings(path)
    from agentqueue.pipelines import Pipelines

    with pytest.raises(ConfigError) as caught:
        Pipelines(settings)
    assert caught.value.fields == ["pipelines.modules"]


# --- P0 work and busy agents (R11 with R12) -------------------------------------------------


async def test_a_p0_task_goes_beyond_a_full_agents_cap_only_to_take_a_preemptible_slot(
    open_queue: OpenQueue, clock: ManualClock
) -> None:
    queue = await open_queue(agents={"fixer": agent(["bugfix"], 1)})
    background = (await queue.submit(title="tidy", task_type="bugfix", priority=8)).task
    await queue.admit()
    [running] = await claim_as(queue, "fixer")
    assert running.id == background.id

    def p0(key: str) -> dict[str, Any]:
        return {"title": key, "task_type": "bugfix", "priority": 0, "idempotency_key": key}

    first = (await queue.submit(**p0("refund-1"))).task
    clock.advance(seconds=2)
    assert await queue.admit() == []  # the background task has run 2 s: not yet preemptible
    clock.advance(seconds=2)
    [admitted] = await queue.admit()  # 4 s: the P0 task may take its slot
    assert (admitted.id, admitted.agent) == (first.id, "fixer")
    second = (await queue.submit(**p0("refund-2"))).task
    assert await queue.admit() == []  # one preemptible task makes room for one P0 task
    assert (await queue.get(second.id)).state is S.PENDING


async def test_with_preemption_off_a_p0_task_waits_for_the_agents_cap(
    open_queue: OpenQueue, clock: ManualClock
) -> None:
    queue = await open_queue(agents={"fixer": agent(["bugfix"], 1)}, preemption={"enabled": False})
    await queue.submit(title="tidy", task_type="bugfix", priority=8)
    await queue.admit()
    await claim_as(queue, "fixer")
    clock.advance(seconds=60)
    await queue.submit(title="refund", task_type="bugfix", priority=0, idempotency_key="r")
    assert await queue.admit() == []


async def test_a_paused_type_is_not_admitted_even_for_an_assignee_or_as_p0(
    open_queue: OpenQueue,
) -> None:
    queue = await open_queue(agents={"fixer": agent(["bugfix"], 5)})
    await queue.pause("bugfix", reason="incident")
    await queue.submit(title="named", task_type="bugfix", assignee="fixer")
    await queue.submit(title="urgent", task_type="bugfix", priority=0, idempotency_key="u")
    assert await queue.admit() == []
    await queue.resume("bugfix")
    assert sorted(t.title for t in await queue.admit()) == ["named", "urgent"]
