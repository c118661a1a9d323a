"""What every store notes about a conversation for front ends: a value per name,
set once by exactly one of two deliveries, replaced on demand, erased with the conversation.
Run against every backend (see conftest)."""

from __future__ import annotations

import asyncio

from storage.sql_store import SqlStore

THREAD = "slack/T1/D1/1700000000.000001"
NOW = 1_000.0


async def test_a_note_is_added_once_even_by_two_deliveries_at_once(store: SqlStore) -> None:
    assert await store.note(THREAD, "assistant") is None
    first, second = await asyncio.gather(
        store.add_note(THREAD, "assistant", "U1", NOW),
        store.add_note(THREAD, "assistant", "U2", NOW),
    )
    assert sorted([first, second]) == [False, True]
    assert await store.note(THREAD, "assistant") == ("U1" if first else "U2")
    assert await store.note("slack/T1/D1/1700000000.000002", "assistant") is None


async def test_put_replaces_and_the_conversation_s_erasure_takes_its_notes(store: SqlStore) -> None:
    await store.put_note(THREAD, "viewing", '{"channel_id": "C5"}', NOW)
    await store.put_note(THREAD, "viewing", '{"channel_id": "C7"}', NOW + 1)
    assert await store.note(THREAD, "viewing") == '{"channel_id": "C7"}'
    assert not await store.add_note(THREAD, "viewing", "ignored", NOW + 2)
    await store.forget_conversation(THREAD)
    assert await store.note(THREAD, "viewing") is None
