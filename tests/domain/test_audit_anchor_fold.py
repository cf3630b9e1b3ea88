"""The anchoring step's fold (R24): ``roll_all`` is ``roll`` applied event by event, and an
anchor over a range of events is the same whether the step read their numbers or knew every
number was an event, and however it split the numbers into pages."""

from __future__ import annotations

import functools
import hashlib
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentqueue.domain.audit import GENESIS, AnchorFold, roll, roll_all
from anchor_fold import at_once

AT = datetime(2026, 12, 7, 8, 0, tzinfo=UTC)


def sha(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def by_roll(digest: str, hashes: list[str]) -> str:
    return functools.reduce(roll, hashes, digest)


def test_roll_all_is_roll_event_by_event_over_hex_hashes() -> None:
    hashes = [sha(i) for i in range(500)]
    assert roll_all(GENESIS, hashes) == by_roll(GENESIS, hashes)
    assert roll_all(GENESIS, []) == GENESIS


@given(
    st.text(max_size=80),
    st.lists(st.text(max_size=80), max_size=20),
)
def test_roll_all_is_roll_event_by_event_over_any_text(digest: str, hashes: list[str]) -> None:
    """Fields are counted in characters and hashed as UTF-8, as roll does, whatever a stored
    digest or hash holds (a tampered one may hold anything)."""
    assert roll_all(digest, hashes) == by_roll(digest, hashes)


def test_an_anchor_without_numbers_is_the_anchor_over_every_number() -> None:
    hashes = [sha(i) for i in range(10)]
    numbered = at_once(None, hashes, AT, 10, numbers=list(range(1, 11)))
    plain = at_once(None, hashes, AT, 10)
    assert plain == numbered
    assert plain.digest == by_roll(GENESIS, hashes)
    assert plain.recorded["gaps"] == []
    after = at_once(plain, hashes[:3], AT, 13)
    assert after == at_once(plain, hashes[:3], AT, 13, numbers=[11, 12, 13])
    assert after.digest == by_roll(plain.digest, hashes[:3])


def test_numbers_with_gaps_are_signed_as_gaps() -> None:
    hashes = [sha(i) for i in range(3)]
    anchor = at_once(None, hashes, AT, 6, numbers=[1, 3, 4])
    assert anchor.recorded["gaps"] == [[2, 2], [5, 6]]
    assert anchor.digest == by_roll(GENESIS, hashes)


@pytest.mark.parametrize(
    ("hashes", "upto", "numbers"),
    [
        ([sha(1), sha(2)], 3, None),  # three numbers, two events, no numbers to say which
        ([sha(1)], 2, [1, 2]),  # a number without its hash
        ([sha(1)], 2, [3]),  # beyond the anchor's numbers
    ],
    ids=["missing-numbers", "count-mismatch", "out-of-range"],
)
def test_events_that_do_not_fit_the_numbers_are_refused(
    hashes: list[str], upto: int, numbers: list[int] | None
) -> None:
    with pytest.raises(ValueError):
        at_once(None, hashes, AT, upto, numbers=numbers)


@st.composite
def numbered_pages(draw: st.DrawFn) -> tuple[int, list[int], list[int]]:
    """A range of numbers 1..upto, the ones that are events (the rest gaps, runs of them
    likely), and page ends that split the range."""
    upto = draw(st.integers(1, 60))
    events = sorted(draw(st.sets(st.integers(1, upto))))
    ends = sorted(draw(st.sets(st.integers(1, upto - 1) if upto > 1 else st.nothing())))
    return upto, events, [*ends, upto]


@given(numbered_pages(), st.booleans())
def test_an_anchor_folded_in_pages_is_the_anchor_folded_at_once(
    drawn: tuple[int, list[int], list[int]], joined_when_full: bool
) -> None:
    """Digest, gaps (a run of gaps across page ends is one range) and signature are the same,
    and so when a page without gaps is given its hashes alone (PostgreSQL's joined row)."""
    upto, events, ends = drawn
    last = at_once(None, [sha(-1), sha(-2)], AT)
    hashes = {n: sha(n) for n in events}
    shifted = [n + last.count for n in events]
    whole = at_once(last, [hashes[n] for n in events], AT, upto + last.count, shifted)
    fold = AnchorFold(last)
    begin = 0
    for end in ends:
        page = [n for n in events if begin < n <= end]
        if joined_when_full and len(page) == end - begin:
            fold.add([hashes[n] for n in page], end + last.count)
        else:
            fold.add([hashes[n] for n in page], end + last.count, [n + last.count for n in page])
        begin = end
    assert fold.anchor(AT) == whole
    assert whole.recorded["after"] == last.count


def test_a_run_of_gaps_across_pages_is_signed_as_one_range() -> None:
    fold = AnchorFold(None)
    fold.add([sha(1)], 3, numbers=[1])  # 2..3 no event
    fold.add([], 6, numbers=[])  # 4..6 no event either
    fold.add([sha(8)], 9, numbers=[8])  # 7 none; 9 none
    anchor = fold.anchor(AT)
    assert anchor.recorded["gaps"] == [[2, 7], [9, 9]]
    assert anchor.count == 9 and anchor.digest == by_roll(GENESIS, [sha(1), sha(8)])


def test_a_page_that_would_go_back_is_refused() -> None:
    fold = AnchorFold(None)
    fold.add([sha(1), sha(2)])
    with pytest.raises(ValueError, match="below #2"):
        fold.add([], 1, numbers=[])
    assert fold.upto == 2
