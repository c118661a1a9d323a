"""Speculation (G4): a generation that starts before its burst's window closes holds until then.

Rules:

- A burst's generation may start `speculate_after_seconds` after its last message, before the
  quiet window closes (the timer's `start_at`; the store stamps both times with its one clock). It
  runs under the lease exactly as at the close, so newer input cancels it at once (the supersede
  path) and the re-armed timer starts the next one.
- Nothing of it is visible before the close: no draft (the text so far becomes the first draft
  when the window closes), and the thinking indicator keeps its timing relative to the close.
- Nothing is committed before the close: a generation that finishes early holds its text until
  then and only then makes the final check. A burst answered without a model call holds too.
- The close is read again from the store when it comes: a typing notice may have moved it later.
- A model failure before the close counts no attempt and backs nothing off: the generation starts
  again at the close (`Engine._speculation_failed`).
- No paid server tool (web search, fetch) runs before the close: a conversation whose model may
  use one does not speculate at all (`EngineSettings.timing_for`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from bot.core.clock import Clock
from bot.core.errors import StoreError
from bot.core.store import BurstStore

log = logging.getLogger("burstbot.engine")
T = TypeVar("T")


class Window:
    """The close of one burst's quiet window as a worker that took the lease sees it: `closed` is
    set once it has passed (at once for a lease taken at or after the close)."""

    def __init__(
        self,
        store: BurstStore,
        clock: Clock,
        conversation_id: str,
        closes_at: float,
        announce: Callable[[str], None] = lambda name: None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.conversation_id = conversation_id
        self.closes_at = closes_at
        self.closed = asyncio.Event()
        self.speculative = closes_at > clock.now()
        self.finished_early = False  # the generation ended before the close (its text is held)
        self._announce = announce  # `window_closed`, `held` (tests wait for them)
        self._task: asyncio.Task[None] | None = None
        if self.speculative:
            self._task = asyncio.ensure_future(self._follow())
        else:
            self.closed.set()

    @property
    def open(self) -> bool:
        return not self.closed.is_set()

    async def _follow(self) -> None:
        """Sleep until the close, then read it again: a typing notice may have moved it later."""
        cid = self.conversation_id
        while True:
            await self.clock.sleep_until(self.closes_at)
            now = self.clock.now()
            try:
                latest = await self.store.window_closes_at(cid, now)
            except StoreError as exc:  # the close it knew has passed; the commit reads the store
                log.warning("conversation %s: cannot read the window's close (%s)", cid, exc)
                break
            if latest is None or latest <= now:
                break
            self.closes_at = latest
        self.closed.set()
        self._announce("window_closed")

    async def held(self, result: Awaitable[T]) -> T:
        """`result`, once the window has closed (a failure is raised at once)."""
        value = await result
        if self.open:
            self.finished_early = True
            self._announce("held")
        await self.closed.wait()
        return value

    async def stop(self) -> None:
        """The worker is done with the burst: stop following its close."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
