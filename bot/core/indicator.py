"""The thinking indicator: on when a burst starts to gather, off once it is answered.

It is a courtesy, so it runs in the background and on a best-effort basis: a slow or failing
platform call never holds up a transition, and its failures are only logged at debug level.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping

from bot.core.events import ConversationKey
from bot.core.frontend import Frontend

log = logging.getLogger("burstbot.indicator")


class Indicator:
    """Shows and clears the indicator through the front end serving the conversation, if any."""

    def __init__(self, frontends: Mapping[str, Frontend]) -> None:
        self._frontends = frontends
        self.running: set[asyncio.Task[None]] = set()

    def show(self, key: ConversationKey) -> None:
        self._set(key, busy=True)

    def clear(self, key: ConversationKey) -> None:
        self._set(key, busy=False)

    def _set(self, key: ConversationKey, *, busy: bool) -> None:
        frontend = self._frontends.get(key.platform)
        if frontend is None:
            return
        task = asyncio.ensure_future(_best_effort(frontend.show_busy(key, busy)))
        self.running.add(task)
        task.add_done_callback(self.running.discard)


async def _best_effort(work: Awaitable[None]) -> None:
    try:
        await work
    except Exception:
        log.debug("thinking indicator failed", exc_info=True)
