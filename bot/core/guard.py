"""What the engine asks before and after a model call: the cost guards' view from the core.

The implementation (`bot.ops.guards.CostGuards`) lives with operations; the engine only knows this
protocol, so it can run without guards at all. `GuardStep` is how the engine uses it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.core.errors import StoreError
from bot.core.events import ConversationKey
from bot.core.store import StoredMessage, TokenUsage

log = logging.getLogger("burstbot.guard")


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a guard said no, and the notice to send (None: already sent this window).

    `repeat`: another delivery of a message refused before; the refusal was logged and noticed
    then, so this one is dropped quietly, as a duplicate."""

    reason: str
    notice: str | None
    repeat: bool = False


class Guard(Protocol):
    """What the engine asks before and after a model call (implemented by `CostGuards`)."""

    async def admit(
        self, key: ConversationKey, burst: Sequence[StoredMessage], now: float
    ) -> Refusal | None: ...

    async def charge(
        self, key: ConversationKey, burst: Sequence[StoredMessage], usage: TokenUsage, now: float
    ) -> None: ...


class GuardStep:
    """The guard as the engine uses it: optional (without one every burst is admitted), and a
    failure to count tokens is logged, not raised: the tokens are spent and the reply matters
    more."""

    def __init__(self, guard: Guard | None) -> None:
        self.guard = guard

    async def admit(
        self, key: ConversationKey, burst: Sequence[StoredMessage], now: float
    ) -> Refusal | None:
        if self.guard is None:
            return None
        return await self.guard.admit(key, burst, now)

    async def charge(
        self, key: ConversationKey, burst: Sequence[StoredMessage], usage: TokenUsage, now: float
    ) -> None:
        """Count the tokens a generation spent (finished or cancelled) against the budgets."""
        if self.guard is None:
            return
        try:
            await self.guard.charge(key, burst, usage, now)
        except StoreError as exc:
            log.warning("conversation %s: token usage not counted (%s)", key.id, exc)
