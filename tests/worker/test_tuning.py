"""The worker's speed settings: derived from its slots and the backend when not set, and every
explicit setting wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentqueue import AsyncQueue
from agentqueue.config import Settings
from agentqueue.worker.tuning import slots_for_handlers, tune


def test_an_async_only_worker_on_postgres_gets_a_thousand_slots() -> None:
    t = tune("postgres", slots=slots_for_handlers(1, all_async=True))
    assert (t.concurrency, t.claim_batch, t.claims_in_flight, t.flushes_in_flight) == (
        1000, 500, 4, 4,
    )  # fmt: skip
    assert t.derived == {"concurrency", "claim_batch", "claims_in_flight", "flushes_in_flight"}


@pytest.mark.parametrize(
    ("backend", "concurrency", "expected"),
    [
        ("postgres", 10, (5, 2, 2)),
        ("postgres", 64, (32, 2, 2)),
        ("postgres", 200, (100, 4, 4)),
        ("postgres", 1000, (500, 4, 4)),
        ("postgres", 2000, (500, 4, 4)),
        ("sqlite", 1, (1, 2, 2)),
        ("sqlite", 500, (250, 2, 2)),
        ("sqlite", 2000, (250, 2, 2)),
        ("sqlite", 64, (32, 2, 2)),
    ],
)
def test_batch_and_flight_follow_the_slots_and_the_backend(
    backend: str, concurrency: int, expected: tuple[int, int, int]
) -> None:
    t = tune(backend, slots=500, concurrency=concurrency)
    assert (t.claim_batch, t.claims_in_flight, t.flushes_in_flight) == expected
    assert t.concurrency == concurrency
    assert "concurrency" not in t.derived


@pytest.mark.parametrize(
    ("concurrency", "expected"),
    [
        (1, (1, 2, 2)),
        (64, (32, 2, 2)),
        (200, (100, 4, 4)),
        (1000, (500, 4, 4)),
        (2000, (500, 4, 4)),
    ],
)
def test_sqlite_written_from_a_process_of_its_own_is_tuned_as_postgres(
    concurrency: int, expected: tuple[int, int, int]
) -> None:
    # The writer process works on one claim while the worker starts the tasks of another.
    t = tune("sqlite", slots=500, concurrency=concurrency, separate_writer=True)
    assert (t.claim_batch, t.claims_in_flight, t.flushes_in_flight) == expected
    assert tune("sqlite", slots=500, concurrency=concurrency, separate_writer=False) == tune(
        "sqlite", slots=500, concurrency=concurrency
    )


def test_handlers_in_threads_keep_few_slots_and_no_handlers_none() -> None:
    assert slots_for_handlers(3, all_async=False) == 10
    assert slots_for_handlers(0, all_async=True) == 0
    assert tune("postgres", slots=10).concurrency == 10
    assert tune("sqlite", slots=0).concurrency == 1  # never none


def test_every_explicit_setting_wins() -> None:
    t = tune(
        "postgres", slots=500, concurrency=300, claim_batch=7,
        claims_in_flight=3, flushes_in_flight=1,
    )  # fmt: skip
    assert (t.concurrency, t.claim_batch, t.claims_in_flight, t.flushes_in_flight) == (
        300, 7, 3, 1,
    )  # fmt: skip
    assert t.derived == set()
    assert t.describe() == (
        "concurrency 300 (set), claim batch 7 (set), claims in flight 3 (set), "
        "outcome writes in flight 1 (set)"
    )


def _queue(url: str, settings: Settings | None = None, sync: bool = False) -> AsyncQueue:
    queue = AsyncQueue(url, settings=settings or Settings())
    if sync:

        @queue.handler("job")
        def job(task: object, ctx: object) -> None:
            return None

    else:

        @queue.handler("job")
        async def job(task: object, ctx: object) -> None:
            return None

    return queue


def test_a_queues_worker_derives_from_its_handlers_and_backend(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    worker = _queue(url).worker()
    o = worker.options
    assert (o.concurrency, o.claim_batch, o.claims_in_flight, o.flushes_in_flight) == (
        1000, 250, 2, 2,
    )  # fmt: skip
    assert "concurrency 1000 (derived)" in o.tuning
    worker = _queue("postgresql://127.0.0.1:1/none").worker()
    o = worker.options
    assert (o.concurrency, o.claim_batch, o.claims_in_flight) == (1000, 500, 4)
    assert _queue(url, sync=True).worker().options.concurrency == 10
    # SQLite written from a process of its own (as the worker command does) is tuned as
    # PostgreSQL: the writer works apart, on another core.
    o = _queue(f"{url}?writer=process").worker().options
    assert (o.concurrency, o.claim_batch, o.claims_in_flight, o.flushes_in_flight) == (
        1000, 500, 4, 4,
    )  # fmt: skip


def test_a_queues_settings_and_arguments_win(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    settings = Settings.model_validate(
        {"queue": {"claim_batch": 40}, "worker": {"concurrency": 80, "flushes_in_flight": 3}}
    )
    o = _queue(url, settings).worker().options
    assert (o.concurrency, o.claim_batch, o.claims_in_flight, o.flushes_in_flight) == (
        80, 40, 2, 3,
    )  # fmt: skip
    assert "concurrency 80 (set), claim batch 40 (set)" in o.tuning
    o = _queue(url, settings).worker(concurrency=20).options
    assert o.concurrency == 20


def _agents(**caps: int) -> dict[str, object]:
    return {
        name: {"command": ["true"], "task_types": [f"{name}_work"], "isolation": "none",
               "max_concurrent": cap}
        for name, cap in caps.items()
    }  # fmt: skip


def test_agents_add_their_own_slots_and_the_handlers_keep_their_share(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    settings = Settings.model_validate({"agents": _agents(fixer=4, writer=2)})
    worker = _queue(url, settings).worker()
    assert worker.options.concurrency == 1006
    assert "concurrency 1006 (derived)" in worker.options.tuning
    caps = {e.name: e.max_concurrent for e in worker.executors}
    # The handlers can never hold the agents' six slots.
    assert caps == {"handlers": 1000, "fixer": 4, "writer": 2}
    for executor in worker.executors:
        getattr(executor, "close", lambda: None)()
    # Asked for one agent only: its slots alone.
    worker = _queue(url, settings).worker(agents=["fixer"])
    assert worker.options.concurrency == 4
    # Handlers in threads: ten slots for them, beside the agents'.
    assert _queue(url, settings, sync=True).worker().options.concurrency == 16


def test_a_set_concurrency_is_shared_by_handlers_and_agents(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    settings = Settings.model_validate({"agents": _agents(fixer=4)})
    worker = _queue(url, settings).worker(concurrency=8)
    assert worker.options.concurrency == 8
    assert {e.name: e.max_concurrent for e in worker.executors} == {"handlers": 8, "fixer": 4}
