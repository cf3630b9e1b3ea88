"""Fixtures of the fault tests: a private PostgreSQL server per test module (initdb runs once a
module, so pytest-xdist workers never share one), never skipped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pg_instance import TEST_PASSWORD, PgInstance, find_bin


@pytest.fixture(scope="module")
def pg() -> Iterator[PgInstance]:
    """A running private server; stopped and removed at the end of the module."""
    try:
        find_bin()
    except FileNotFoundError as exc:
        pytest.fail(str(exc), pytrace=False)
    instance = PgInstance(TEST_PASSWORD)
    try:
        instance.init()
        yield instance
    finally:
        instance.destroy()
