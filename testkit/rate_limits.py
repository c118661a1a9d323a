"""Rate limits as the platforms and the Messages API enforce them, for the fakes: token buckets
that answer 429 (the API's per-minute budgets: `ApiLimits`).

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
from datetime import UTC, datetime


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


def rfc3339(seconds: float) -> str:
    """A time as the Messages API writes its `-reset` headers (UTC, `Z`)."""
    moment = datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")
    return moment.replace("+00:00", "Z")


@dataclass
class MinuteBudget:
    """One of the Messages API's limits: `per_minute` units, replenished continuously (a full
    minute's worth at most); a spend may leave it below zero (output tokens are counted as they
    are generated), and it is then paid back by the refill before anything else fits."""

    per_minute: float
    clock: Callable[[], float] = time.monotonic
    level: float = field(init=False)
    at: float = field(init=False)

    def __post_init__(self) -> None:
        self.level, self.at = self.per_minute, self.clock()

    def refill(self) -> float:
        now = self.clock()
        self.level = min(self.per_minute, self.level + (now - self.at) * self.per_minute / 60.0)
        self.at = now
        return self.level

    def wait_for(self, amount: float) -> float:
        """Seconds until `amount` fits (0: now); more than a minute's worth waits for a full one."""
        missing = min(amount, self.per_minute) - self.refill()
        return max(0.0, missing) * 60.0 / self.per_minute

    def spend(self, amount: float) -> None:
        self.refill()
        self.level -= amount

    def full_in(self) -> float:
        return (self.per_minute - self.refill()) * 60.0 / self.per_minute


@dataclass
class ApiLimits:
    """The Messages API's rate limits for one organisation, as the API applies them: requests,
    input tokens and output tokens per minute, each a `MinuteBudget` counted separately. A
    request is refused with 429 and `retry-after` when one of them cannot take it (input tokens:
    the uncached input of its prompt; output tokens: while the budget is spent), with 529 while
    `overloaded` or while `max_streams` answers are streaming. Every answer carries the
    `anthropic-ratelimit-*` headers (limit, remaining, reset as RFC 3339 on `wall`). `clock` and
    `wall` come from the test (its fake clock's `monotonic` and `now`) or are the real ones."""

    requests_per_minute: float | None = None
    input_tokens_per_minute: float | None = None
    output_tokens_per_minute: float | None = None
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    overloaded: bool = False
    max_streams: int | None = None
    overload_retry_after: float | None = None  # sent with a 529 (the API usually sends none)
    streaming: int = 0
    budgets: dict[str, MinuteBudget] = field(default_factory=dict)
    answered: list[int] = field(default_factory=list)  # each request's status, in order

    def __post_init__(self) -> None:
        limits = {
            "requests": self.requests_per_minute,
            "input-tokens": self.input_tokens_per_minute,
            "output-tokens": self.output_tokens_per_minute,
        }
        for name, per_minute in limits.items():
            if per_minute is not None:
                self.budgets[name] = MinuteBudget(per_minute, self.clock)

    def admit(self, input_tokens: int) -> tuple[int, float | None]:
        """A request with `input_tokens` of uncached input: (200, None) when it is taken (and
        counted), else (429, seconds to wait) or (529, `overload_retry_after`)."""
        if self.overloaded or (self.max_streams is not None and self.streaming >= self.max_streams):
            self.answered.append(529)
            return 529, self.overload_retry_after
        needs = {"requests": 1.0, "input-tokens": float(input_tokens), "output-tokens": 1.0}
        waits = [b.wait_for(needs[name]) for name, b in self.budgets.items()]
        if any(wait > 0 for wait in waits):
            self.answered.append(429)
            return 429, max(waits)
        for name, budget in self.budgets.items():
            if name != "output-tokens":
                budget.spend(needs[name])
        self.answered.append(200)
        return 200, None

    def generated(self, output_tokens: int) -> None:
        budget = self.budgets.get("output-tokens")
        if budget is not None:
            budget.spend(output_tokens)

    def headers(self) -> dict[str, str]:
        sent: dict[str, str] = {}
        now = self.wall()
        for name, budget in self.budgets.items():
            prefix = f"anthropic-ratelimit-{name}"
            sent[f"{prefix}-limit"] = str(int(budget.per_minute))
            sent[f"{prefix}-remaining"] = str(max(0, math.floor(budget.refill())))
            sent[f"{prefix}-reset"] = rfc3339(now + budget.full_in())
        return sent

    @property
    def refused(self) -> int:
        return sum(1 for status in self.answered if status == 429)
