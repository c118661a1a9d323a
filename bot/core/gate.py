"""What the engine asks before and after a model call: the cost guards' view from the core.

The implementation (`bot.ops.guards.CostGuards`) lives with operations; the engine only knows this
protocol, so it can run without guards at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.core.events import ConversationKey
from bot.core.store import StoredMessage, TokenUsage


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a guard said no, and the notice to send (None: already sent this window)."""

    reason: str
    notice: str | None


class BurstGate(Protocol):
    """What the engine asks before and after a model call (implemented by `CostGuards`)."""

    async def admit(
        self, key: ConversationKey, burst: Sequence[StoredMessage], now: float
    ) -> Refusal | None: ...

    async def charge(
        self, key: ConversationKey, burst: Sequence[StoredMessage], usage: TokenUsage, now: float
    ) -> None: ...
