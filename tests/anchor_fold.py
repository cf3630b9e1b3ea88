"""An audit anchor folded in one page: the reference the anchoring step's pages are held to."""

from __future__ import annotations

from datetime import datetime

from agentqueue.domain.audit import Anchor, AnchorFold


def at_once(
    last: Anchor | None,
    hashes: list[str],
    at: datetime,
    upto: int | None = None,
    numbers: list[int] | None = None,
) -> Anchor:
    """The anchor after ``last`` over ``hashes``, folded in one page."""
    fold = AnchorFold(last)
    fold.add(hashes, upto, numbers)
    return fold.anchor(at)
