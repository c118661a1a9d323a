"""Read-only queries for operators (`burstbot status`, `burstbot explain`).

Kept out of the `Store` protocol on purpose: the engine never needs them. A store that also
implements `StoreInspector` can be inspected; the CLI says so plainly when it cannot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from bot.core.store import ConversationState, GenerationRecord, OutboxRow, StoredMessage


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    state: ConversationState
    history_floor: int
    pending_messages: int
    outbox_pending: int
    outbox_failed: int
    last_activity_at: float


@runtime_checkable
class StoreInspector(Protocol):
    async def list_conversations(
        self, active_only: bool = True, limit: int = 50
    ) -> list[ConversationSummary]:
        """Newest activity first; `active_only` keeps conversations with pending input, a timer,
        a lease, or outbox rows pending or failed."""
        ...

    async def messages(self, conversation_id: str) -> list[StoredMessage]:
        """Every stored message of a conversation in order, deleted ones included."""
        ...

    async def conversation_state(self, conversation_id: str) -> ConversationState | None: ...

    async def replies(self, conversation_id: str | None = None) -> list[OutboxRow]: ...

    async def generations(self, conversation_id: str | None = None) -> list[GenerationRecord]: ...
