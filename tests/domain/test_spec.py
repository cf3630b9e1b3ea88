"""Submitted task specs (SPEC sections 1 and 5): valid ones pass, bad ones name every bad field."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import pytest

from agentqueue.domain.errors import FieldProblem, InvalidInput
from agentqueue.spec import TaskSpec, parse_specs

DEP = "00000000-0000-0000-0000-000000000001"


def spec(**fields: Any) -> dict[str, Any]:
    return {"title": "Fix the login bug", "task_type": "bugfix", **fields}


def problems_of(items: list[Any], **options: Any) -> list[FieldProblem]:
    with pytest.raises(InvalidInput) as raised:
        parse_specs(items, **options)
    return raised.value.problems


def fields_of(item: dict[str, Any]) -> list[str]:
    """The fields named for one task submitted alone."""
    return [p.field for p in problems_of([item], single=True)]


def test_a_minimal_spec_gets_the_defaults_of_section_1() -> None:
    [parsed] = parse_specs([spec()], single=True)
    assert parsed.priority == 5 and parsed.max_retries == 3
    assert parsed.source == "api" and parsed.tenant == "default"
    assert parsed.payload == {} and parsed.depends_on == ()


def test_a_full_valid_spec_is_accepted() -> None:
    [parsed] = parse_specs(
        [
            spec(
                priority="P0",
                idempotency_key="refund-42",
                max_retries=3,
                source="issue",
                source_id="octo/repo#12",
                payload={"issue": 12},
                callback_url="https://hooks.example.com/done",
                depends_on=[DEP],
                run_after="2026-03-01T10:00:00",
                assignee="coder",
            )
        ],
        single=True,
    )
    assert parsed.priority == 0 and parsed.depends_on == (UUID(DEP),)
    assert parsed.run_after == datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


def test_priority_12_names_priority() -> None:
    problems = problems_of([spec(priority=12)], single=True)
    assert [p.field for p in problems] == ["priority"]
    assert "0-9" in problems[0].message


def test_priority_names_are_accepted_in_specs() -> None:
    parsed = parse_specs([spec(priority="p2"), spec(priority="7")])
    assert [s.priority for s in parsed] == [9, 7]


def test_priority_true_is_refused() -> None:
    assert fields_of(spec(priority=True)) == ["priority"]


def test_an_unknown_field_is_named_not_dropped() -> None:
    problems = problems_of([{"titel": "typo", "task_type": "bugfix", "title": "x"}], single=True)
    assert [p.field for p in problems] == ["titel"]
    assert problems[0].message == "unknown field"


def test_a_missing_required_field_is_named() -> None:
    problems = problems_of([{"title": "x"}], single=True)
    assert [(p.field, p.message) for p in problems] == [("task_type", "required")]


def test_a_payload_over_the_limit_names_payload() -> None:
    big = spec(payload={"text": "x" * 2000})
    problems = problems_of([big], single=True, max_payload_bytes=1024)
    assert [p.field for p in problems] == ["payload"]
    assert "1024" in problems[0].message
    assert parse_specs([big], max_payload_bytes=4096)


def test_a_payload_that_is_not_json_names_payload() -> None:
    assert fields_of(spec(payload={"when": object()})) == ["payload"]


def test_a_p0_task_without_idempotency_key_names_idempotency_key() -> None:
    problems = problems_of([spec(priority=0)], single=True)
    assert [p.field for p in problems] == ["idempotency_key"]
    assert "P0" in problems[0].message


def test_a_p0_task_with_five_retries_names_max_retries() -> None:
    problems = problems_of([spec(priority="P0", idempotency_key="k", max_retries=5)], single=True)
    assert [p.field for p in problems] == ["max_retries"]
    assert "3" in problems[0].message


def test_a_p0_task_breaking_both_p0_rules_names_both_fields() -> None:
    assert sorted(fields_of(spec(priority=0, max_retries=5))) == ["idempotency_key", "max_retries"]


def test_p0_rules_are_reported_alongside_other_bad_fields() -> None:
    assert sorted(fields_of(spec(priority=0, title=" "))) == ["idempotency_key", "title"]


def test_five_retries_are_fine_outside_p0() -> None:
    [parsed] = parse_specs([spec(priority=1, max_retries=5)])
    assert parsed.max_retries == 5


@pytest.mark.parametrize("source", ["github", "", "API", "issues"])
def test_a_bad_source_names_source(source: str) -> None:
    problems = problems_of([spec(source=source)], single=True)
    assert [p.field for p in problems] == ["source"]
    assert "issue" in problems[0].message and "manual" in problems[0].message


@pytest.mark.parametrize("title", ["", " ", "\t\n"])
def test_a_blank_title_names_title(title: str) -> None:
    assert fields_of(spec(title=title)) == ["title"]


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/x",
        "example.com/hook",
        "http://",
        "https:///path",
        "javascript:alert(1)",
        "http://exa mple.com/hook",
        "https://example.com/a b",
    ],
)
def test_a_bad_callback_url_names_callback_url(url: str) -> None:
    assert fields_of(spec(callback_url=url)) == ["callback_url"]


@pytest.mark.parametrize(
    "url", ["https://hooks.example.com/a/b?x=1&y=2#frag", "http://93.184.215.14:8080/cb"]
)
def test_a_good_callback_url_is_accepted(url: str) -> None:
    [parsed] = parse_specs([spec(callback_url=url)])
    assert parsed.callback_url == url


FORBIDDEN_CALLBACKS = [
    "http://localhost:8080/cb",
    "http://LOCALHOST./cb",
    "http://api.localhost/cb",
    "http://127.0.0.1/cb",
    "http://127.9.9.9:9/cb",
    "http://[::1]/cb",
    "http://10.0.0.7/cb",
    "http://172.16.0.1/cb",
    "http://192.168.1.1/cb",
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.10.10/cb",
    "http://[fd00:ec2::254]/cb",
    "http://[fc00::1]/cb",
    "http://[fe80::1]/cb",
    "http://224.0.0.1/cb",
    "http://[ff02::1]/cb",
    "http://0.0.0.0/cb",
    "http://[::]/cb",
    "http://240.0.0.1/cb",
    "http://[::ffff:127.0.0.1]/cb",
    "http://100.64.0.1/cb",
]


@pytest.mark.parametrize("url", FORBIDDEN_CALLBACKS)
def test_a_callback_url_to_a_private_address_names_callback_url(url: str) -> None:
    """SSRF: loopback, private, link-local, unique-local, multicast, unspecified, reserved and
    metadata addresses, and localhost names, are refused at submit..."""
    problems = problems_of([spec(callback_url=url)], single=True)
    assert [p.field for p in problems] == ["callback_url"]
    assert "must not" in problems[0].message


@pytest.mark.parametrize("url", FORBIDDEN_CALLBACKS[:4])
def test_a_private_callback_url_is_accepted_when_allowed(url: str) -> None:
    """...unless ``[callbacks] allow_private``."""
    [parsed] = parse_specs([spec(callback_url=url)], allow_private_callbacks=True)
    assert parsed.callback_url == url


def test_a_duplicate_dependency_names_depends_on() -> None:
    problems = problems_of([spec(depends_on=[DEP, DEP])], single=True)
    assert [p.field for p in problems] == ["depends_on"]
    assert "twice" in problems[0].message


def test_a_dependency_that_is_not_a_uuid_names_its_position() -> None:
    assert fields_of(spec(depends_on=[DEP, "nope"])) == ["depends_on[1]"]


def test_bulk_mode_names_fields_with_the_task_index() -> None:
    items = [spec(), spec(), spec(priority=12)]
    assert [p.field for p in problems_of(items)] == ["tasks[2].priority"]


def test_bulk_mode_uses_the_given_prefix() -> None:
    assert [p.field for p in problems_of([spec(priority=12)], field_prefix="items")] == [
        "items[0].priority"
    ]


def test_every_problem_is_reported_not_just_the_first() -> None:
    items = [
        spec(priority=12, source="github", title=" "),
        spec(),
        spec(priority=0),
        {"titel": "typo", "task_type": "bugfix"},
        "not an object",
    ]
    problems = problems_of(items)
    assert sorted(p.field for p in problems) == sorted(
        [
            "tasks[0].priority",
            "tasks[0].source",
            "tasks[0].title",
            "tasks[2].idempotency_key",
            "tasks[3].title",
            "tasks[3].titel",
            "tasks[4]",
        ]
    )


def test_the_error_message_lists_every_problem_with_its_field() -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_specs([spec(priority=12), spec(source="github")])
    text = str(raised.value)
    assert "tasks[0].priority: " in text and "tasks[1].source: " in text


def test_nothing_is_returned_when_any_spec_is_bad() -> None:
    with pytest.raises(InvalidInput):
        parse_specs([spec(), spec(priority=12)])


def test_defaults_fill_fields_the_item_leaves_out() -> None:
    [parsed] = parse_specs([spec()], defaults={"tenant": "acme", "requested_by": None})
    assert parsed.tenant == "acme" and parsed.requested_by == "api"
    [kept] = parse_specs([spec(tenant="other")], defaults={"tenant": "acme"})
    assert kept.tenant == "other"


def test_a_taskspec_instance_is_validated_again() -> None:
    ready = TaskSpec(title="x", task_type="bugfix", priority=3)
    [parsed] = parse_specs([ready])
    assert parsed == ready
    big = TaskSpec(title="x", task_type="bugfix", payload={"text": "x" * 2000})
    assert [p.field for p in problems_of([big], max_payload_bytes=1024)] == ["tasks[0].payload"]


def test_taskspec_is_immutable() -> None:
    ready = TaskSpec(title="x", task_type="bugfix")
    with pytest.raises(ValueError):
        ready.priority = 0  # type: ignore[misc]
