"""A platform's rate limits shared by every conversation streaming at once (one process), so
that finals do not wait behind drafts in 429 backoff (docs/streaming-limits.md). Each limit is a
shared `Bucket` (a token bucket), and streaming yields to delivery instead of queueing:

- **final text first**: a reply's final edit or post takes the next token ahead of any draft
  (`take`); finals follow each other at the platform's rate, without a 429;
- **a draft never waits**: it takes a token only if one is spare right now (`try_take`), beyond
  the finals still owed and one kept for a final; otherwise it is skipped (the next carries the
  newer text);
- **a new draft only where its final fits** (`admit`): each posted draft owes one final edit;
- **learned from the platform**: a bucket starts at the published rate and burst; a 429 holds it
  for everyone and shrinks both, and quiet periods grow them back.

The limits are per process: processes sharing a workspace each learn their share from the 429s.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass, field

from bot.core.clock import Clock, first_of

MAX_IDLE_BUCKETS = 1_000  # past this many, refilled buckets are forgotten (channels come and go)
BURST_SECONDS = 5.0  # a bucket holds this many seconds' worth of calls (Discord: 5 per 5 s)
QUIET_SECONDS = 30.0  # each this long without a 429 grows a shrunk bucket back one step
SLOWEST = 0.25  # a 429 slows a bucket's rate to no less than this share of the published one
OWED_SECONDS = 120.0  # a final owed by a draft no reply finished is forgotten after this
MARGIN_SECONDS = 0.05  # a token is used this long after it is due: the platform counts it a
# little later than we do (its bucket started when our first call reached it)


@dataclass(frozen=True)
class Limit:
    """`per_minute` calls on average, at most `burst` at once."""

    per_minute: float
    burst: float = 0.0  # 0: BURST_SECONDS' worth, at least one call

    @property
    def capacity(self) -> float:
        return self.burst or max(1.0, math.floor(self.per_minute * BURST_SECONDS / 60.0))


@dataclass
class Bucket:
    """One rate limit: a token bucket; finals wait their turn, drafts take a spare token or none."""

    clock: Clock
    limit: Limit
    tokens: float = field(init=False)
    refilled_at: float = field(init=False)
    held_until: float = 0.0
    margin: float = MARGIN_SECONDS
    capacity: float = field(init=False)  # the burst learned so far (at most the published)
    per_minute: float = field(init=False)  # the rate learned so far (at most the published)
    limited_at: float = field(init=False)  # the last 429, or the last step grown back since
    _owed: deque[float] = field(default_factory=deque)  # when each draft owing a final was posted
    _finals: deque[object] = field(default_factory=deque)  # the finals waiting, in order
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.capacity = self.tokens = self.limit.capacity
        self.per_minute = self.limit.per_minute
        self.refilled_at = self.limited_at = self.clock.monotonic()

    @property
    def reserve(self) -> float:
        """Tokens drafts leave for finals: one, where the bucket holds more than one."""
        return 1.0 if self.capacity > 1 else 0.0

    @property
    def _margin(self) -> float:
        """`margin` in tokens, at a bucket that is not full (a full one has no doubt)."""
        return 0.0 if self.tokens >= self.capacity else self.per_minute / 60.0 * self.margin

    @property
    def owed(self) -> int:
        """Finals owed by the drafts posted and not finished yet."""
        horizon = self.clock.monotonic() - OWED_SECONDS
        while self._owed and self._owed[0] < horizon:
            self._owed.popleft()
        return len(self._owed)

    def _spare(self) -> float | None:
        """The tokens there are now for a draft call, None while the bucket is held or a final
        waits (finals first)."""
        now = self.clock.monotonic()
        if now < self.held_until or self._finals:
            return None
        self._refill(now)
        return self.tokens

    def try_take(self) -> bool:
        """A draft call's token if one is spare now (True), else False at once: the draft call
        is skipped, never queued. Spare: beyond the finals owed (at most a full bucket less
        one), and at least the one kept for a final."""
        tokens = self._spare()
        kept = max(self.reserve, min(self.owed + self.reserve, self.capacity - 1.0))
        if tokens is None or tokens < 1.0 + kept + self._margin:
            return False
        self.tokens -= 1.0
        return True

    def admit(self) -> bool:
        """A new draft may be posted (it will owe one final call here): True, and it is counted
        until `settle`; False while the finals owed, with this one and the token kept for a
        final, would not fit in the tokens there are now."""
        tokens = self._spare()
        if tokens is None or tokens < self.owed + 1.0 + self.reserve + self._margin:
            return False
        self._owed.append(self.clock.monotonic())
        return True

    def settle(self) -> None:
        """A draft's final call was made (or the draft deleted): it owes nothing any more."""
        if self.owed:
            self._owed.popleft()
        self._notify()

    def refund(self) -> None:
        """A token taken for a call that was not made after all."""
        self.tokens = min(self.capacity, self.tokens + 1.0)
        self._notify()

    async def take(self) -> None:
        """Wait for a final call's turn on this limit (in arrival order, ahead of any draft)."""
        ticket = object()
        self._finals.append(ticket)
        try:
            while (wait := self._wait(ticket)) > 0:
                await self._sleep(wait)
            self.tokens -= 1.0
        finally:
            self._finals.remove(ticket)
            self._notify()

    def hold(self, retry_after: float) -> None:
        """The platform said 429: nobody calls on this limit for `retry_after` seconds; then the
        bucket starts nearly empty (the platform's window restarts), with half the burst and a
        slower rate, grown back in quiet periods (`_refill`). A 429 answering calls made before
        an earlier one's hold ended shrinks nothing more."""
        now = self.clock.monotonic()
        until = now + max(0.0, retry_after)
        if until > self.held_until:
            if now >= self.held_until:  # a new 429, not one of the same window's stragglers
                self.capacity = max(1.0, math.floor(self.capacity / 2))
                self.per_minute = max(self.limit.per_minute * SLOWEST, self.per_minute * 0.75)
            self.held_until = until
            self.tokens = min(self.tokens, 1.0)  # one call may try when the hold ends
            self.refilled_at = self.limited_at = until
        self._notify()

    def _wait(self, ticket: object) -> float:
        """Seconds until this final may take a token (0: now); an estimate, re-checked on any
        change of the bucket."""
        now = self.clock.monotonic()
        if now < self.held_until:
            return self.held_until - now
        if self._finals[0] is not ticket:
            return math.inf  # woken when the final ahead has gone
        self._refill(now)
        if self.tokens >= 1.0:
            return 0.0
        return (1.0 - self.tokens) * 60.0 / self.per_minute + self.margin

    def _refill(self, now: float) -> None:
        self._grow(now)
        if now > self.refilled_at:
            rate = self.per_minute / 60.0
            self.tokens = min(self.capacity, self.tokens + (now - self.refilled_at) * rate)
            self.refilled_at = now

    def _grow(self, now: float) -> None:
        """Each quiet period since the last 429 grows the burst by one and the rate by a
        quarter, back to the published limit."""
        while now - self.limited_at >= QUIET_SECONDS and (
            self.capacity < self.limit.capacity or self.per_minute < self.limit.per_minute
        ):
            self.limited_at += QUIET_SECONDS
            self.capacity = min(self.limit.capacity, self.capacity + 1.0)
            self.per_minute = min(self.limit.per_minute, self.per_minute * 1.25)

    async def _sleep(self, seconds: float) -> None:
        """Until `seconds` have passed or the bucket changed (a token taken, a hold, a leaver)."""
        waits: list[Awaitable[object]] = [self._changed.wait()]
        if math.isfinite(seconds):
            waits.append(self.clock.sleep(seconds))
        await first_of(*waits)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()


class Pacer:
    """The buckets of one platform connection, by method and scope (`chat.update` per workspace,
    `chat.postMessage` or Discord's `messages` per channel)."""

    def __init__(self, clock: Clock, limits: dict[str, Limit]) -> None:
        self.clock = clock
        self.limits = limits
        self._buckets: dict[tuple[str, str], Bucket] = {}

    def bucket(self, method: str, scope: str = "") -> Bucket | None:
        """The bucket of `method` in `scope` (a workspace, a channel); None: not limited."""
        limit = self.limits.get(method)
        if limit is None or limit.per_minute <= 0:
            return None
        key = (method, scope)
        found = self._buckets.get(key)
        if found is None:
            if len(self._buckets) >= MAX_IDLE_BUCKETS:
                self._forget_idle()
            found = self._buckets[key] = Bucket(self.clock, limit)
        return found

    def _forget_idle(self) -> None:
        """Drop the buckets nobody waits on and that refilled: a fresh one is the same."""
        now = self.clock.monotonic()
        for key, bucket in list(self._buckets.items()):
            bucket._refill(now)
            idle = not (bucket._finals or bucket.owed)
            if idle and now >= bucket.held_until and bucket.tokens >= bucket.limit.capacity:
                del self._buckets[key]

    async def take(self, method: str, scope: str = "") -> None:
        bucket = self.bucket(method, scope)
        if bucket is not None:
            await bucket.take()

    def try_take(self, method: str, scope: str = "") -> bool:
        """A draft call's token if one is spare now (`Bucket.try_take`); True where not limited."""
        bucket = self.bucket(method, scope)
        return bucket is None or bucket.try_take()

    def admit(self, method: str, scope: str = "") -> bool:
        """A new draft may be posted, owing a final call on this limit (`Bucket.admit`)."""
        bucket = self.bucket(method, scope)
        return bucket is None or bucket.admit()

    def settle(self, method: str, scope: str = "") -> None:
        bucket = self.bucket(method, scope)
        if bucket is not None:
            bucket.settle()

    def refund(self, method: str, scope: str = "") -> None:
        bucket = self.bucket(method, scope)
        if bucket is not None:
            bucket.refund()

    def hold(self, method: str, scope: str, retry_after: float | None) -> None:
        bucket = self.bucket(method, scope)
        if bucket is not None:
            bucket.hold(1.0 if retry_after is None else retry_after)
