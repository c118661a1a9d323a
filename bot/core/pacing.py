"""A platform's rate limits shared by every conversation streaming at once (one process).

Slack limits `chat.update` per workspace (Tier 3, about 50 a minute) and `chat.postMessage` about
one a second per channel; Discord about five edits per five seconds per channel. Each conversation
pacing itself alone spends that budget many times over when several stream at once, and a final
edit then waits behind drafts in 429 backoff. So each limit is a `Bucket` (a token bucket), shared:

- **final text first**: a reply's final edit or post takes the next token ahead of every waiting
  draft, and drafts never take the bucket's last token (kept for a final), so a final goes out at
  once unless other finals came first (they then follow each other at the platform's rate,
  without a 429);
- **drafts in turn**: waiting drafts are served first come, first served; a conversation asks
  again only after its own interval, so the edits spread across everyone streaming, and each
  conversation makes fewer, larger edits when many stream (never lost ones: the final edit
  carries the whole answer);
- **Retry-After for everyone**: a 429 on a bucket holds it for every caller until it has passed.

The limits are per process: two processes serving one workspace each get half (see
docs/streaming-limits.md).
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import deque
from dataclasses import dataclass, field

from bot.core.clock import Clock

MAX_IDLE_BUCKETS = 1_000  # past this many, refilled buckets are forgotten (channels come and go)
BURST_SECONDS = 5.0  # a bucket holds this many seconds' worth of calls (Discord: 5 per 5 s)


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
    """One rate limit: a token bucket with a queue of waiting drafts; finals go first."""

    clock: Clock
    limit: Limit
    tokens: float = field(init=False)
    refilled_at: float = field(init=False)
    held_until: float = 0.0
    _finals: deque[int] = field(default_factory=deque)
    _drafts: deque[int] = field(default_factory=deque)
    _tickets: itertools.count[int] = field(default_factory=itertools.count)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.tokens = self.limit.capacity
        self.refilled_at = self.clock.monotonic()

    @property
    def reserve(self) -> float:
        """Tokens drafts leave for finals: one, where the bucket holds more than one."""
        return 1.0 if self.limit.capacity > 1 else 0.0

    async def take(self, final: bool = False) -> None:
        """Wait for a call's turn on this limit (finals first, each queue in arrival order)."""
        ticket = next(self._tickets)
        queue = self._finals if final else self._drafts
        queue.append(ticket)
        try:
            while (wait := self._wait(final, ticket)) > 0:
                await self._sleep(wait)
            self.tokens -= 1.0
        finally:
            queue.remove(ticket)
            self._notify()

    def hold(self, retry_after: float) -> None:
        """The platform said 429: nobody calls on this limit for `retry_after` seconds; then the
        bucket starts nearly empty (the platform's window restarts)."""
        until = self.clock.monotonic() + max(0.0, retry_after)
        if until > self.held_until:
            self.held_until = until
            self.tokens = min(self.tokens, 1.0)  # one call may try when the hold ends
            self.refilled_at = until
        self._notify()

    def _wait(self, final: bool, ticket: int) -> float:
        """Seconds until this caller may take a token (0: now); an estimate, re-checked on any
        change of the bucket."""
        now = self.clock.monotonic()
        if now < self.held_until:
            return self.held_until - now
        self._refill(now)
        if final:
            if self._finals[0] != ticket:
                return math.inf  # woken when the final ahead has gone
            need = 1.0
        elif self._finals or self._drafts[0] != ticket:
            return math.inf  # woken when the finals or the draft ahead have gone
        else:
            need = 1.0 + self.reserve
        if self.tokens >= need:
            return 0.0
        return (need - self.tokens) * 60.0 / self.limit.per_minute

    def _refill(self, now: float) -> None:
        if now > self.refilled_at:
            rate = self.limit.per_minute / 60.0
            self.tokens = min(self.limit.capacity, self.tokens + (now - self.refilled_at) * rate)
            self.refilled_at = now

    async def _sleep(self, seconds: float) -> None:
        """Until `seconds` have passed or the bucket changed (a token taken, a hold, a leaver)."""
        changed = self._changed
        waits: set[asyncio.Future[object]] = {asyncio.ensure_future(changed.wait())}
        if math.isfinite(seconds):
            waits.add(asyncio.ensure_future(self.clock.sleep(seconds)))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()

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
            idle = not (bucket._drafts or bucket._finals) and now >= bucket.held_until
            if idle and bucket.tokens >= bucket.limit.capacity:
                del self._buckets[key]

    async def take(self, method: str, scope: str = "", final: bool = False) -> None:
        bucket = self.bucket(method, scope)
        if bucket is not None:
            await bucket.take(final)

    def hold(self, method: str, scope: str, retry_after: float | None) -> None:
        bucket = self.bucket(method, scope)
        if bucket is not None:
            bucket.hold(1.0 if retry_after is None else retry_after)
