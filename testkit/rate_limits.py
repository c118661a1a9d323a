"""Rate limits as the platforms enforce them, for the fakes: token buckets that answer 429.

A bucket holds `burst` calls and refills at `per_minute`; a call finding it empty is refused with
the seconds until the next token (Slack sends `Retry-After` in whole seconds, Discord a float
`retry_after`), and a refused call spends nothing. Time comes from `clock` (the test's fake
clock's `monotonic`, or the real one), so a fake-clock test sees the platform's time too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class TokenBucket:
    per_minute: float
    burst: float
    clock: Callable[[], float] = time.monotonic
    tokens: float = field(init=False)
    at: float = field(init=False)

    def __post_init__(self) -> None:
        self.tokens, self.at = self.burst, self.clock()

    def spend(self) -> float | None:
        """Take one call's token: None when allowed, else the seconds until one is there."""
        now = self.clock()
        rate = self.per_minute / 60.0
        self.tokens = min(self.burst, self.tokens + (now - self.at) * rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return None
        return (1.0 - self.tokens) / rate


@dataclass
class RateLimits:
    """Buckets of one kind of limit, by scope (a workspace, a channel); counts every 429."""

    per_minute: float
    burst: float
    clock: Callable[[], float] = time.monotonic
    buckets: dict[str, TokenBucket] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)  # the scope of each 429, in order

    def spend(self, scope: str) -> float | None:
        bucket = self.buckets.get(scope)
        if bucket is None:
            bucket = self.buckets[scope] = TokenBucket(self.per_minute, self.burst, self.clock)
        wait = bucket.spend()
        if wait is not None:
            self.refused.append(scope)
        return wait


def whole_seconds(wait: float) -> str:
    """Slack's `Retry-After`: whole seconds, rounded up."""
    return str(max(1, math.ceil(wait)))
