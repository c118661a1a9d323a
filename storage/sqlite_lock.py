"""The SQLite store's connection lock, acks first.

Everything that uses the store's one writing connection takes this lock. An arriving event's
steps (the ingest batch, an edit or delete, a typing notice, a hold, a thread check) are what a
platform's ack waits for, so they wait as `urgent` and go before the other waiters (lease, commit
and delivery steps, whose deadlines are seconds away), in their own order. An urgent holder never
goes twice in a row while others wait, so those are never starved by a flood. Otherwise this is
`asyncio.Lock`: a waiter woken and then cancelled passes the lock on.

`on_release` runs each time the lock is let go, before the next holder is woken (the store gives
back its writer's turn there once no transaction is open: storage/sqlite_turn.py).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager


class WriteLock:
    def __init__(self, on_release: Callable[[], None] = lambda: None) -> None:
        self._on_release = on_release
        self._locked = False
        self._last_urgent = False
        self._urgent: collections.deque[asyncio.Future[None]] = collections.deque()
        self._normal: collections.deque[asyncio.Future[None]] = collections.deque()
        self._woken: asyncio.Future[None] | None = None  # handed the lock, not yet running

    def locked(self) -> bool:
        return self._locked

    async def acquire(self, urgent: bool = False) -> None:
        if not (self._locked or self._woken is not None or self._urgent or self._normal):
            self._take(urgent)
            return
        queue = self._urgent if urgent else self._normal
        waiter = asyncio.get_running_loop().create_future()
        queue.append(waiter)
        try:
            try:
                await waiter
            finally:
                queue.remove(waiter)
                if self._woken is waiter:
                    self._woken = None
        except asyncio.CancelledError:
            if not self._locked:
                self._wake_up_next()
            raise
        self._take(urgent)

    def release(self) -> None:
        if not self._locked:
            raise RuntimeError("WriteLock is not acquired")
        self._locked = False
        try:
            self._on_release()
        finally:
            self._wake_up_next()

    @asynccontextmanager
    async def held(self, urgent: bool = False) -> AsyncIterator[None]:
        await self.acquire(urgent)
        try:
            yield
        finally:
            self.release()

    def _take(self, urgent: bool) -> None:
        self._locked = True
        self._last_urgent = urgent

    def _wake_up_next(self) -> None:
        """Wake one waiter: an urgent one first, unless the last holder was urgent too."""
        if self._woken is not None:
            return  # one is woken already and about to take the lock
        order = (self._normal, self._urgent) if self._last_urgent else (self._urgent, self._normal)
        for queue in order:
            for waiter in queue:
                if not waiter.done():
                    waiter.set_result(None)
                    self._woken = waiter
                    return
