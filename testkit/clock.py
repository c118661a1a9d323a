"""Clocks for tests: one that moves only when a test says so, and one that is set wrong.

The product's clocks (`Clock`, `SystemClock`) live in `bot.core.clock`; these are the fakes.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

from bot.core.clock import Clock


class FakeClock:
    """A clock that only moves when a test calls `advance`; sleepers wake in deadline order."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._counter = itertools.count()

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until(self._now + seconds)

    async def sleep_until(self, when: float) -> None:
        if when <= self._now:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (when, next(self._counter), future))
        await future

    def waiting(self) -> tuple[float, ...]:
        """When each sleeper still waiting wakes, earliest first (tests wait for a sleeper)."""
        return tuple(sorted(wake for wake, _, future in self._sleepers if not future.done()))

    def jump(self, seconds: float) -> None:
        """Move time without waking anyone: a process that stalled (GC pause, frozen VM)."""
        self._now += seconds

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking every sleeper whose time has come, in order."""
        target = self._now + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            wake_at, _, future = heapq.heappop(self._sleepers)
            self._now = max(self._now, wake_at)
            if not future.done():
                future.set_result(None)
            await settle()
        self._now = target
        await settle()


class OffsetClock:
    """`base` read `offset` seconds off, as on a host whose clock is wrong: its time of day and its
    sleeps until a time of day are off; durations and `monotonic` are not."""

    def __init__(self, base: Clock, offset: float) -> None:
        self.base = base
        self.offset = offset

    def now(self) -> float:
        return self.base.now() + self.offset

    def monotonic(self) -> float:
        return self.base.monotonic()

    async def sleep(self, seconds: float) -> None:
        await self.base.sleep(seconds)

    async def sleep_until(self, when: float) -> None:
        await self.base.sleep_until(when - self.offset)


async def settle(rounds: int = 50) -> None:
    """Let every ready task run until the loop is idle (tests use it after each step)."""
    for _ in range(rounds):
        await asyncio.sleep(0)
