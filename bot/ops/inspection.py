"""Read-only queries for operators (`burstbot status`, `burstbot explain`), and `printable`.

Kept out of the `Store` protocol on purpose: the engine never needs them. A store that also
implements `StoreInspector` can be inspected; the CLI says so plainly when it cannot.

Everything stored came from chat users and platforms, so it is shown through `printable`: a
message carrying terminal escape sequences or bidirectional overrides must not reach the
operator's terminal as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from bot.core.store import ConversationState, GenerationRecord, OutboxRow, StoredMessage

ALLOWED_FORMAT_CHARACTERS = frozenset("\u200d")
"""Zero-width joiner: harmless, and part of many emoji."""


def printable(text: str) -> str:
    """`text` with control, format (bidi overrides, zero-width), separator and unassigned
    characters written as `\\x1b` / `\\u202e` escapes; everything else unchanged."""
    if text.isprintable():
        return text
    return "".join(
        ch if ch.isprintable() or ch in ALLOWED_FORMAT_CHARACTERS else _escaped(ch) for ch in text
    )


def _escaped(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


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
