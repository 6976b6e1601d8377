"""Which rank holds the others back: a context's arrivals at its collectives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List


@dataclass(frozen=True)
class RankArrivals:
    """One rank's arrivals so far.

    Attributes:
        arrived_last: collectives it reached after every other rank.
        late_seconds: summed over those, how much later than the next-latest
            rank it arrived.
        waited_seconds: summed over every collective, how long it waited for
            the last rank.
    """

    arrived_last: int
    late_seconds: float
    waited_seconds: float


@dataclass(frozen=True)
class StragglerReport:
    """How a context's ranks have arrived at its collectives so far.

    Arrivals are timed where one launcher's ranks meet in shared memory on one
    host (gloo); with nccl, gloo over TCP or several nodes ``measured`` is
    False and ``summary`` says why.

    Attributes:
        measured: whether arrivals are timed.
        collectives: the collectives timed.
        straggler: the rank that arrived last most often; -1 when none.
        summary: e.g. "rank 1 arrived last at 87% of 4,140 collectives, 2.1 ms
            late on average".
        ranks: each rank's :class:`RankArrivals`, in rank order.
    """

    measured: bool
    collectives: int
    straggler: int
    summary: str
    ranks: List[RankArrivals]
