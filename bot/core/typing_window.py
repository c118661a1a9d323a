"""Typing-aware quiet window: an author of the pending burst is still typing, so wait for them.

A typing notice (Discord's TYPING_START; Slack sends none to apps) from someone whose message is
pending pushes the conversation's timer to `now + typing_seconds`: never past the burst's deadline
(G4 still holds: a person who types forever still gets a reply then), never earlier than it was
due. A typing notice stores nothing: for a conversation with nothing pending from that person
(or no conversation at all) the store's one conditional UPDATE matches no row. The next message
re-arms the timer as usual (`quiet_seconds` after it), so the reply follows the finished thought.
"""

from __future__ import annotations

from bot.core.clock import Clock
from bot.core.events import ConversationKey
from bot.core.store import BurstStore


async def author_typing(
    store: BurstStore, clock: Clock, typing_seconds: float, key: ConversationKey, author_id: str
) -> float | None:
    """The due time of the conversation's timer after the notice, None if it has none to stretch."""
    now = clock.now()
    return await store.extend_quiet(key.id, author_id, now + typing_seconds, now)
