"""Time as an input.

The engine and scheduler never read the wall clock directly: production passes `SystemClock`, tests
pass a fake clock they step (`testkit.clock.FakeClock`), so debounce tests never sleep.

Rules:

- protocol times (due times, deadlines, expiries) are the database's, handed over on this clock
  as the store returns them: the same distance from the `now` the caller passed (G12);
- a fence (how long this process trusts a lease or a delivery claim) counts down on `monotonic`
  from the expiry the database stamped (`trusted_until`): neither a wall-clock step nor a slow
  call stretches it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterable
from typing import Any, Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock nobody sets: fences count down on it."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    async def sleep_until(self, when: float) -> None:
        """Until `when` on this clock. A sleep started as a task (`ensure_future`) begins only
        when the task first runs: a deadline stays right where a duration would be counted
        from a later moment."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    async def sleep_until(self, when: float) -> None:
        await asyncio.sleep(max(0.0, when - time.time()))


def trusted_until(clock: Clock, expires_at: float, ttl: float) -> float:
    """When (on `clock.monotonic()`) to stop trusting a lease or claim that expires at
    `expires_at`, as the store returned it on `clock`: a third of `ttl` before that expiry. The
    store counts the expiry from the `now` passed before the call, so a slow call shortens the
    trust instead of starting it late."""
    return clock.monotonic() + (expires_at - clock.now()) - ttl / 3


async def first_of(*waits: Awaitable[Any]) -> None:
    """Until the first of `waits` is done. The waits it started (coroutines) are cancelled; the
    futures and tasks passed in run on."""
    futures = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for future, wait in zip(futures, waits, strict=True):
            if future is not wait:
                future.cancel()


async def cancel_all(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel `tasks` and wait until each has ended, whatever its outcome."""
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
