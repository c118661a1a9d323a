"""The "bot is typing…" indicator, kept alive while a burst is being answered.

Discord shows a typing indicator for 10 seconds after each trigger, while waiting for the quiet
window and the model can take longer. One task per conversation re-triggers it every
`refresh_seconds` until the engine says the reply is posted; `max_seconds` bounds a task whose stop
never comes (a reply delivered by another process, a crash mid-burst).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import discord

from bot.clock import Clock

log = logging.getLogger("burstbot.discord")

REFRESH_SECONDS = 8.0
MAX_SECONDS = 300.0


class TypingKeeper:
    def __init__(
        self,
        clock: Clock,
        refresh_seconds: float = REFRESH_SECONDS,
        max_seconds: float = MAX_SECONDS,
    ) -> None:
        self.clock = clock
        self.refresh_seconds = refresh_seconds
        self.max_seconds = max_seconds
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, conversation_id: str, channel: Callable[[], discord.abc.Messageable]) -> None:
        """Show typing until `stop` (or `max_seconds`); a repeated start is a no-op."""
        running = self._tasks.get(conversation_id)
        if running is not None and not running.done():
            return
        task = asyncio.create_task(self._keep(channel))
        self._tasks[conversation_id] = task
        task.add_done_callback(lambda done: self._forget(conversation_id, done))

    def stop(self, conversation_id: str) -> None:
        task = self._tasks.pop(conversation_id, None)
        if task is not None:
            task.cancel()

    def active(self) -> set[str]:
        return {cid for cid, task in self._tasks.items() if not task.done()}

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _forget(self, conversation_id: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(conversation_id) is task:
            del self._tasks[conversation_id]

    async def _keep(self, channel: Callable[[], discord.abc.Messageable]) -> None:
        give_up_at = self.clock.now() + self.max_seconds
        while self.clock.now() < give_up_at:
            try:
                await channel().typing()  # one trigger: shown for 10 seconds
            except Exception as exc:  # best effort: a missing indicator must not stop the loop
                log.debug("typing indicator failed: %r", exc)
            await self.clock.sleep(min(self.refresh_seconds, give_up_at - self.clock.now()))
