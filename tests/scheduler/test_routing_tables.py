"""The tables admission consults for every candidate, derived once from the configuration: the
agents that declare each task type (AgentBook) and the rate limits a task of a type, run by an
agent, draws from (AdmissionPolicy.limits_of, remembered per type and agent)."""

from __future__ import annotations

from collections.abc import Iterable

from agentqueue.pipelines.base import AgentBook, AgentProfile, Route
from agentqueue.scheduler.admission import AdmissionPolicy


def profile(name: str, types: Iterable[str], labels: Iterable[str] = ()) -> AgentProfile:
    return AgentProfile(name, frozenset(types), frozenset(labels), 2)


def test_serving_and_capable_keep_configuration_order_and_narrow_by_labels() -> None:
    book = AgentBook(
        (
            profile("b", {"fix", "docs"}, {"py"}),
            profile("a", {"fix"}),
            profile("c", {"docs"}, {"py", "go"}),
        )
    )
    assert [a.name for a in book.serving("fix")] == ["b", "a"]
    assert [a.name for a in book.serving("docs")] == ["b", "c"]
    assert book.serving("nobody's") == [] and book.capable("nobody's", []) == []
    assert [a.name for a in book.capable("fix", [])] == ["b", "a"]
    assert [a.name for a in book.capable("fix", ["py"])] == ["b"]
    assert [a.name for a in book.capable("docs", ["py", "go"])] == ["c"]
    assert book.capable("fix", ["go"]) == []


def test_the_lists_routing_gets_are_its_own() -> None:
    """A caller may change what it is given (broadcast slices it) without changing the book."""
    book = AgentBook((profile("a", {"fix"}), profile("b", {"fix"})))
    book.serving("fix").clear()
    book.capable("fix", []).pop()
    assert [a.name for a in book.capable("fix", [])] == ["a", "b"]
    assert book == AgentBook((profile("a", {"fix"}), profile("b", {"fix"})))


def test_unrouted_is_one_immutable_route() -> None:
    assert Route.unrouted() is Route.unrouted()
    assert Route.unrouted() == Route(None) and Route.unrouted().agents is None


def test_limits_of_answers_per_type_and_agent_however_often_asked() -> None:
    policy = AdmissionPolicy(
        type_limits={"review": "llm"},
        agent_limits={"writer": "tokens", "both": "llm"},
    )
    for _ in range(2):  # the second round is answered from what the first remembered
        assert policy.limits_of("review", None) == ("llm",)
        assert policy.limits_of("review", "writer") == ("llm", "tokens")
        assert policy.limits_of("review", "both") == ("llm",)  # one token, not two
        assert policy.limits_of("docs", "writer") == ("tokens",)
        assert policy.limits_of("docs", None) == ()
    assert policy == AdmissionPolicy(
        type_limits={"review": "llm"}, agent_limits={"writer": "tokens", "both": "llm"}
    )
