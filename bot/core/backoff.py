"""The one retry delay: growing from a first wait by a factor, capped, jittered.

Every loop that retries after a failure (model calls, delivery, scheduler rounds on a failing
store, background platform reads, MCP reconnects, Discord messages the store refused) asks its
`Backoff` for the wait after so many failures in a row and sleeps it on the injected clock, so
fake-clock tests never wait, and no loop's wait grows without bound.

Jitter is "equal jitter" with a chosen share: the wait is the capped delay less a random part of at
most `jitter` of it. The capped delay stays an upper bound (a retry comes within the cap of a
recovery, as the docs promise) and `1 - jitter` of it a lower bound (no retry comes at once, so a
failure cannot turn into a hot loop); retriers that failed together (replies during a platform
outage, conversations during a model overload) come back spread over that range, not at one
moment. `jitter = 0` makes every wait exact.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    first: float  # the wait after the first failure (before jitter)
    cap: float  # no wait is longer
    factor: float = 2.0  # each further failure multiplies the wait by this
    jitter: float = 0.0  # the share of each wait drawn at random, 0 to 1

    def __post_init__(self) -> None:
        if self.first < 0 or self.cap < 0 or self.factor < 1 or not 0 <= self.jitter <= 1:
            raise ValueError(f"not a backoff: {self}")

    def ceiling(self, failures: int) -> float:
        """The wait after `failures` failures in a row (1 or more), before jitter: `first`, then
        `factor` times the one before, never above `cap`. Never overflows: past the step that
        reaches the cap, no power is computed."""
        if failures <= 1 or self.factor == 1 or not 0 < self.first < self.cap:
            return min(self.first, self.cap)
        if failures - 1 >= math.log(self.cap / self.first, self.factor):
            return self.cap
        return min(self.cap, self.first * self.factor ** (failures - 1))

    def delay(self, failures: int, draw: Callable[[], float] = random.random) -> float:
        """The wait after `failures` failures in a row: the ceiling less up to `jitter` of it.
        `draw` gives a number in [0, 1) (a seeded `random.Random().random` makes it repeatable)."""
        return self.ceiling(failures) * (1 - self.jitter * draw())
