"""Whose transaction runs next on SQLite's one connection: a new message's first.

Every transaction of a process takes turns on one connection, and a turn costs a few round trips
to aiosqlite's thread. When many replies are committed and delivered at once, dozens of
background transactions queue up, and in a first-come queue a new message waits behind all of
them before the platform gets its acknowledgement (Slack retries an event not acknowledged in 3
seconds). Here a waiting arrival (ingest, edit, delete, typing notice) gets the next turn before
any waiting background step; each kind keeps its own order, so events keep theirs. No
correctness depends on the order between the kinds: an arrival that overtakes a commit makes the
commit's version check fail, and the burst is answered again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator


class ArrivalsFirst:
    """A lock whose waiting arrivals are handed it before waiting background steps."""

    def __init__(self) -> None:
        self._held = False
        self._arrivals: deque[asyncio.Future[None]] = deque()
        self._others: deque[asyncio.Future[None]] = deque()

    def locked(self) -> bool:
        return self._held

    @contextlib.asynccontextmanager
    async def turn(self, arrival: bool = False) -> AsyncIterator[None]:
        await self._acquire(self._arrivals if arrival else self._others)
        try:
            yield
        finally:
            self._hand_on()

    async def _acquire(self, queue: deque[asyncio.Future[None]]) -> None:
        if not self._held and not self._arrivals and not self._others:
            self._held = True
            return
        waiter = asyncio.get_running_loop().create_future()
        queue.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._hand_on()  # handed the turn as it was cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):  # not yet skipped by `_hand_on`
                    queue.remove(waiter)
            raise

    def _hand_on(self) -> None:
        """The turn goes to the first waiting arrival, else the first waiting step, else free."""
        for queue in (self._arrivals, self._others):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return
        self._held = False
