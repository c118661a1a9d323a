"""What every store notes about a conversation for front ends: a value per name,
set once by exactly one of two deliveries, replaced on demand or only from the value read (one
of two callers), erased with the conversation.
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


async def test_a_note_is_swapped_only_from_the_value_read_and_by_one_of_two(
    store: SqlStore,
) -> None:
    dm = "slack/T1/D1/"
    first, second = await asyncio.gather(  # nothing read: only one creates it
        store.swap_note(dm, "exchange", None, "1700000000.000002", NOW),
        store.swap_note(dm, "exchange", None, "1700000000.000003", NOW),
    )
    assert sorted([first, second]) == [False, True]
    held = await store.note(dm, "exchange")
    assert held == ("1700000000.000002" if first else "1700000000.000003")
    first, second = await asyncio.gather(  # both read `held`: only one moves it on
        store.swap_note(dm, "exchange", held, "1700000000.000005", NOW + 1),
        store.swap_note(dm, "exchange", held, "1700000000.000006", NOW + 1),
    )
    assert sorted([first, second]) == [False, True]
    moved = await store.note(dm, "exchange")
    assert moved == ("1700000000.000005" if first else "1700000000.000006")
    assert not await store.swap_note(dm, "exchange", held, "1700000000.000009", NOW + 2)
    assert not await store.swap_note(dm, "exchange", None, "1700000000.000009", NOW + 2)
    assert await store.note(dm, "exchange") == moved
    assert not await store.swap_note(dm, "other", "1", "2", NOW + 2)  # absent: nothing to swap
    assert await store.note(dm, "other") is None


async def test_the_conversations_noted_under_a_prefix_are_listed_by_the_note_s_name(
    store: SqlStore,
) -> None:
    for cid in ("slack/T1/D1/", "slack/T1/D2/", "slack/T2/D1/", "slack/T10/D3/"):
        await store.put_note(cid, "agent_dm", "U1", NOW)
    await store.put_note("slack/T1/D4/", "exchange", "1700000000.000002", NOW)
    assert sorted(await store.noted("agent_dm", "slack/T1/")) == ["slack/T1/D1/", "slack/T1/D2/"]
    assert await store.noted("agent_dm", "slack/T3/") == []
    await store.forget_conversation("slack/T1/D2/")
    assert await store.noted("agent_dm", "slack/T1/") == ["slack/T1/D1/"]
