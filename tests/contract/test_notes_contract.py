"""What every store notes about a conversation for front ends (`NoteBook`): a value per name,
set once by exactly one of two deliveries, replaced on demand, erased with the conversation.
Run against every backend (see conftest)."""

from __future__ import annotations

import asyncio

from bot.core.notes import NoteBook
from bot.core.store import Store

THREAD = "slack/T1/D1/1700000000.000001"
NOW = 1_000.0


def notes(store: Store) -> NoteBook:
    assert isinstance(store, NoteBook)
    return store


async def test_a_note_is_added_once_even_by_two_deliveries_at_once(store: Store) -> None:
    book = notes(store)
    assert await book.note(THREAD, "assistant") is None
    first, second = await asyncio.gather(
        book.add_note(THREAD, "assistant", "U1", NOW), book.add_note(THREAD, "assistant", "U2", NOW)
    )
    assert sorted([first, second]) == [False, True]
    assert await book.note(THREAD, "assistant") == ("U1" if first else "U2")
    assert await book.note("slack/T1/D1/1700000000.000002", "assistant") is None


async def test_put_replaces_and_the_conversation_s_erasure_takes_its_notes(store: Store) -> None:
    book = notes(store)
    await book.put_note(THREAD, "viewing", '{"channel_id": "C5"}', NOW)
    await book.put_note(THREAD, "viewing", '{"channel_id": "C7"}', NOW + 1)
    assert await book.note(THREAD, "viewing") == '{"channel_id": "C7"}'
    assert not await book.add_note(THREAD, "viewing", "ignored", NOW + 2)
    await store.forget_conversation(THREAD)  # type: ignore[attr-defined]
    assert await book.note(THREAD, "viewing") is None
