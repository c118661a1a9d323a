"""The "bot is typing…" indicator, kept alive while a burst is being answered.

Discord shows a typing indicator for 10 seconds after each trigger, while waiting for the quiet
window and the model can take longer. One task per conversation re-triggers it every
`REFRESH_SECONDS` until the engine says the reply is posted. Before each re-trigger it asks whether
the conversation is still busy, so a reply posted by another process (two processes on one shard
both saw the burst) ends it too; `max_seconds` bounds it whatever happens. That bound is long: a
burst held back for capacity (bot/core/admission.py: a 429's retry-after, a queue for the
minute's requests) may wait minutes, and it must not wait unseen.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import discord

from bot.core.clock import Clock, cancel_all

log = logging.getLogger("burstbot.discord")

REFRESH_SECONDS = 8.0
MAX_SECONDS = 3_600.0


@dataclass(eq=False)
class TypingKeeper:
    clock: Clock
    max_seconds: float = MAX_SECONDS
    _tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict, init=False)
    _working: int = field(default=0, init=False)  # tasks between a wake-up and their next sleep
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition, init=False)

    def start(
        self,
        conversation_id: str,
        channel: Callable[[], discord.abc.Messageable],
        still_busy: Callable[[], Awaitable[bool]],
    ) -> None:
        """Show typing until `stop`, `still_busy()` is false or `max_seconds` pass; idempotent."""
        running = self._tasks.get(conversation_id)
        if running is not None and not running.done():
            return
        task = asyncio.create_task(self._keep(channel, still_busy))
        self._tasks[conversation_id] = task
        task.add_done_callback(lambda done: self._forget(conversation_id, done))

    def stop(self, conversation_id: str) -> None:
        task = self._tasks.pop(conversation_id, None)
        if task is not None:
            task.cancel()

    def active(self) -> set[str]:
        return {cid for cid, task in self._tasks.items() if not task.done()}

    async def idle(self) -> None:
        """Wait until every task is asleep on the clock (tests step a fake clock after this)."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._working == 0)

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        await cancel_all(tasks)

    def _forget(self, conversation_id: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(conversation_id) is task:
            del self._tasks[conversation_id]

    async def _keep(
        self,
        channel: Callable[[], discord.abc.Messageable],
        still_busy: Callable[[], Awaitable[bool]],
    ) -> None:
        give_up_at = self.clock.now() + self.max_seconds
        first = True
        while self.clock.now() < give_up_at:
            self._working += 1
            try:
                # Shielded: a stop() arriving mid-query must not cut a store call in half.
                if not first and not await asyncio.shield(still_busy()):
                    return
                await channel().typing()  # one trigger: shown for 10 seconds
            except Exception as exc:  # best effort: a missing indicator must not stop the loop
                log.debug("typing indicator failed: %r", exc)
            finally:
                self._working -= 1
                async with self._changed:
                    self._changed.notify_all()
            first = False
            await self.clock.sleep(min(REFRESH_SECONDS, give_up_at - self.clock.now()))
