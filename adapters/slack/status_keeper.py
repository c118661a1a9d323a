"""An assistant thread's status, kept up while its burst is unanswered (the thinking indicator).

Slack removes a thread's status two minutes after it was set if the app sent no message
meanwhile, so a burst waiting longer than that (held for capacity, bot/core/admission.py, or a
first token slow to come) would wait unseen. While the indicator is on, one task per conversation
sets the status again every `REFRESH_SECONDS`, after asking the host whether the conversation is
still unsettled (a reply posted by another process ends it too); `MAX_SECONDS` bounds it whatever
happens. "Off" stops it and waits for a refresh in flight to end first, so the status it clears
never comes back (the indicator's own calls are ordered the same way, bot/core/indicator.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bot.core.clock import Clock, cancel_all

log = logging.getLogger("burstbot.slack")

REFRESH_SECONDS = 90.0  # within Slack's two minutes, with room for a slow or paced call
MAX_SECONDS = 3_600.0

Refresh = Callable[[], Awaitable[None]]
StillBusy = Callable[[], Awaitable[bool]]


@dataclass(eq=False)
class StatusKeeper:
    clock: Clock
    every: float = REFRESH_SECONDS
    max_seconds: float = MAX_SECONDS
    _tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict, init=False)
    _in_flight: dict[str, asyncio.Future[bool]] = field(default_factory=dict, init=False)

    def start(self, conversation_id: str, refresh: Refresh, still_busy: StillBusy) -> None:
        """Keep the status set (it was just set) until `stop` or the conversation settles."""
        running = self._tasks.get(conversation_id)
        if running is not None and not running.done():
            return
        task = asyncio.create_task(self._keep(conversation_id, refresh, still_busy))
        self._tasks[conversation_id] = task
        task.add_done_callback(lambda done: self._forget(conversation_id, done))

    async def stop(self, conversation_id: str) -> None:
        """No more refreshes; returns once one in flight has ended."""
        task = self._tasks.pop(conversation_id, None)
        if task is not None:
            task.cancel()
        call = self._in_flight.get(conversation_id)
        if call is not None:
            await asyncio.wait([call])

    def active(self) -> set[str]:
        return {cid for cid, task in self._tasks.items() if not task.done()}

    async def idle(self) -> None:
        """Wait until no refresh is in flight (tests step a fake clock after this)."""
        while calls := list(self._in_flight.values()):
            await asyncio.wait(calls)

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        await cancel_all(tasks)
        await self.idle()

    def _forget(self, conversation_id: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(conversation_id) is task:
            del self._tasks[conversation_id]

    async def _keep(self, conversation_id: str, refresh: Refresh, still_busy: StillBusy) -> None:
        give_up_at = self.clock.now() + self.max_seconds
        while (left := give_up_at - self.clock.now()) > self.every:
            await self.clock.sleep(self.every)
            call = asyncio.ensure_future(_refresh_if_busy(refresh, still_busy))
            self._in_flight[conversation_id] = call
            call.add_done_callback(lambda done: self._done(conversation_id, done))
            if not await asyncio.shield(call):  # a stop meanwhile waits for it (see `stop`)
                return
        log.debug("slack: status of %s kept for %.0f s; not refreshed any more", conversation_id,
                  self.max_seconds - left)  # fmt: skip

    def _done(self, conversation_id: str, call: asyncio.Future[bool]) -> None:
        if self._in_flight.get(conversation_id) is call:
            del self._in_flight[conversation_id]


async def _refresh_if_busy(refresh: Refresh, still_busy: StillBusy) -> bool:
    """Set the status again if the conversation is still unsettled; whether it was."""
    try:
        if not await still_busy():
            return False
        await refresh()
    except Exception as exc:  # best effort: a missed refresh leaves the next one to try
        log.debug("slack: assistant status refresh failed: %r", exc)
    return True
