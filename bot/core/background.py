"""Platform reads in the background: one run at a time, retried with backoff (catch-up, threads).

Never before an ack, never in a live event's way: a run is requested, runs once (again if asked
during a run), and a failed run is logged and tried again with doubling backoff. One platform read
inside a run waits out a rate limit's `Retry-After` exactly (`patiently`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from bot.core.backoff import Backoff
from bot.core.clock import Clock, cancel_all
from bot.core.errors import FetchError
from bot.core.settings import CatchUpSettings

log = logging.getLogger("burstbot.catch_up")

T = TypeVar("T")


async def patiently(
    read: Callable[[], Awaitable[T]], what: str, clock: Clock, settings: CatchUpSettings
) -> T:
    """One platform read, tried again after a rate limit (exactly its `Retry-After`) or a passing
    failure (backoff); a permanent failure, or the last attempt's, goes up."""
    for attempt in range(1, settings.attempts + 1):
        try:
            return await read()
        except FetchError as exc:
            if exc.permanent or attempt == settings.attempts:
                raise
            wait = exc.retry_after
            if wait is None:
                wait = retry_backoff(settings).delay(attempt)
            log.info("%s: %s; trying again in %.1f s", what, exc, wait)
            await clock.sleep(wait)
    raise AssertionError("unreachable")


def retry_backoff(settings: CatchUpSettings) -> Backoff:
    """Doubling from `retry_seconds` up to `max_retry_seconds`, without jitter: a run is one per
    front end and process, so there is no crowd of retries to spread out."""
    return Backoff(settings.retry_seconds, settings.max_retry_seconds)


@dataclass(eq=False)
class Background:
    """A job run in the background when requested, one run at a time; a request during a run
    makes another run follow it. A run that fails is logged and run again after a backoff."""

    name: str
    work: Callable[[], Awaitable[None]]
    clock: Clock
    settings: CatchUpSettings
    _wanted: bool = field(default=False, init=False)
    _idle: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._idle.set()

    def request(self) -> None:
        self._wanted = True
        self._idle.clear()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name=self.name)

    async def idle(self) -> None:
        """Until no run is under way or wanted (a failing job stays busy while it retries)."""
        await self._idle.wait()

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_all([self._task])
            self._task = None
        self._idle.set()

    async def _loop(self) -> None:
        failures = 0
        while self._wanted:
            self._wanted = False
            try:
                await self.work()
                failures = 0
            except Exception as exc:
                failures += 1
                delay = retry_backoff(self.settings).delay(failures)
                log.warning("%s failed (%s); trying again in %.0f s", self.name, exc, delay)
                self._wanted = True
                await self.clock.sleep(delay)
        self._idle.set()
