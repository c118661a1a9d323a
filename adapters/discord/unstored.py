"""Discord messages the store refused, held in memory and stored once it answers again.

Discord never delivers an event twice, so a message the store cannot take (busy for a moment,
or unreachable for minutes) must not be dropped:

- once a message is held, later ones queue behind it: they are stored in arrival order;
- the oldest is tried again with back-off (doubling, 0.25 s up to 30 s) for as long as the
  process runs, so a store that comes back after minutes gets every held message;
- the queue is bounded (`limit` messages): one that does not fit goes to `overflow` (catch-up,
  which reads its conversation's history from Discord once the store answers);
- one warning when holding starts and one when the queue is empty again, not one per attempt.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bot.core.backoff import Backoff
from bot.core.clock import Clock, cancel_all
from bot.core.errors import StoreError
from bot.core.events import IncomingMessage

log = logging.getLogger("burstbot.discord")

UNSTORED_LIMIT = 1000
RETRY_BACKOFF = Backoff(0.25, 30.0)  # no jitter: one queue per process, no crowd to spread out


@dataclass(eq=False)
class UnstoredMessages:
    store: Callable[[IncomingMessage], Awaitable[object]]
    clock: Clock
    overflow: Callable[[IncomingMessage, float], None]
    limit: int = UNSTORED_LIMIT
    _queue: deque[IncomingMessage] = field(default_factory=deque, init=False)
    _retrying: asyncio.Task[None] | None = field(default=None, init=False)

    @property
    def holding(self) -> bool:
        """Messages are waiting: a new one goes behind them, not to the store first."""
        return bool(self._queue)

    def hold(self, message: IncomingMessage, failed_at: float) -> None:
        """`failed_at`: when storing it was first tried (catch-up reads from just before)."""
        if len(self._queue) >= self.limit:
            self.overflow(message, failed_at)
            return
        self._queue.append(message)
        if self._retrying is None:
            log.warning("discord: the store refused message %s; holding new messages until it "
                        "answers", message.message_id)  # fmt: skip
            self._retrying = asyncio.ensure_future(self._store_unstored())

    async def _store_unstored(self) -> None:
        failures, stored = 0, 0
        try:
            while self._queue:
                try:
                    await self.store(self._queue[0])
                except StoreError:
                    failures += 1
                    await self.clock.sleep(RETRY_BACKOFF.delay(failures))
                    continue
                self._queue.popleft()
                stored += 1
                failures = 0
            log.warning("discord: the store answers again; %d held message(s) stored", stored)
        finally:
            self._retrying = None

    async def stop(self) -> None:
        """Shutdown: what is still held was never stored; catch-up at the next start reads it."""
        if self._retrying is not None:
            await cancel_all([self._retrying])
        if self._queue:
            log.error("discord: %d held message(s) not stored at shutdown; catch-up at the next "
                      "start fetches them", len(self._queue))  # fmt: skip
            self._queue.clear()
