"""The adaptive quiet window on every backend: the author's rhythm is learned in the arrival's
transaction and the timer is armed with the window chosen from it (times on the store's clock)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from bot.core.events import ConversationKey, IncomingMessage, MessageEdited
from bot.core.quiet_window import AdaptiveWindow, AuthorLast, Rhythm, WindowModel, author_window
from bot.core.store import Committed, FinalCheck, NewReply, Timing
from storage.sql_store import SqlStore

ADAPTIVE = Timing(quiet_seconds=1.5, max_wait_seconds=8.0, adaptive=AdaptiveWindow(0.5, 5.0))
QUICK = WindowModel(split_bare=0.3, split_dangling=0.5, mean_log_gap=0.0, sd_log_gap=0.4)
"""A community where unfinished messages are followed often, a second later: strangers' windows
then differ by how the message ends."""
FITTED = dataclasses.replace(ADAPTIVE, adaptive=AdaptiveWindow(0.5, 5.0, QUICK))


def stranger(text: str) -> float:
    """A first message's window (the store has learned that one message before choosing)."""
    return author_window(AuthorLast("x", text, 0.0, Rhythm().learn(None)), 0.5, 5.0, QUICK).seconds


FIXED = Timing(quiet_seconds=1.5, max_wait_seconds=30.0)
KEY = ConversationKey("test", "w", "c1")
OTHER = ConversationKey("test", "w", "c2")
NOW = 1_000.0


def said(n: int, text: str, author: str = "u1", key: ConversationKey = KEY) -> IncomingMessage:
    return IncomingMessage(key, f"{key.channel}-m{n}", author, f"name-{author}", text)


async def due(store: SqlStore, key: ConversationKey = KEY) -> float:
    state = await store.conversation_state(key.id)
    assert state is not None and state.timer is not None
    return state.timer.due_at


async def answer(store: SqlStore, key: ConversationKey, now: float) -> None:
    lease = await store.acquire_lease(key.id, "w1", now, 30.0)
    assert lease is not None
    check = FinalCheck(lease.token, lease.version, False)
    done = await store.commit(key.id, check, now, ADAPTIVE, NewReply("ok"))
    assert isinstance(done, Committed)


async def test_a_stranger_gets_the_fitted_window_and_the_reason_is_stored(store: SqlStore) -> None:
    result = await store.ingest(said(1, "is it down?"), NOW, FITTED)
    assert result.due_at == pytest.approx(NOW + 0.5)
    await store.ingest(said(2, "so I tried", author="u2"), NOW + 0.2, FITTED)
    assert stranger("so I tried") > 0.5
    assert await due(store) == pytest.approx(NOW + 0.2 + stranger("so I tried"))
    first, second = await store.messages(KEY.id)
    assert first.quiet_reason is not None and "name-u1 is new here" in first.quiet_reason
    assert second.quiet_reason is not None and "without punctuation" in second.quiet_reason


async def test_follow_ups_2_s_apart_are_learned_and_hold_the_next_window(store: SqlStore) -> None:
    t = NOW
    for n in range(5):  # five messages 2 s apart, answered between bursts
        await store.ingest(said(n, f"part {n}"), t, ADAPTIVE)
        t += 2.0
    await answer(store, KEY, t)
    t += 60.0
    await store.ingest(said(10, "new question"), t, ADAPTIVE)
    held = await due(store) - t
    assert 2.0 < held <= 5.0  # ADAPTIVE's max_quiet_seconds
    *_, last = await store.messages(KEY.id)
    assert last.quiet_reason is not None and "worth waiting for" in last.quiet_reason


async def test_gaps_with_someone_else_between_or_elsewhere_are_not_follow_ups(
    store: SqlStore,
) -> None:
    t = NOW
    for n in range(6):  # u1 alternates with u2, and also writes in another conversation
        await store.ingest(said(n, f"a {n}"), t, ADAPTIVE)
        await store.ingest(said(n, f"b {n}", author="u2"), t + 0.5, ADAPTIVE)
        await store.ingest(said(n, f"c {n}", key=OTHER), t + 1.0, ADAPTIVE)
        t += 30.0
    await store.ingest(said(99, "done?"), t, ADAPTIVE)
    *_, last = await store.messages(KEY.id)
    assert last.quiet_reason is not None and "name-u1 writes again" in last.quiet_reason
    assert "not likely enough soon enough" in last.quiet_reason


async def test_an_edit_rearms_from_the_burst_authors_windows(store: SqlStore) -> None:
    await store.ingest(said(1, "is it down?"), NOW, FITTED)
    edit = MessageEdited(KEY, "c1-m1", "so it is down,")
    result = await store.edit(edit, NOW + 0.3, FITTED)
    assert result.due_at == pytest.approx(NOW + 0.3 + stranger("so it is down,"))


async def test_adaptive_off_is_the_fixed_window_and_learns_nothing(store: SqlStore) -> None:
    for n in range(4):
        result = await store.ingest(said(n, f"part {n}"), NOW + 2.5 * n, FIXED)
        assert result.due_at == pytest.approx(NOW + 2.5 * n + 1.5)
    assert all(m.quiet_reason is None for m in await store.messages(KEY.id))
    await answer(store, KEY, NOW + 20)
    await store.ingest(said(10, "new question?"), NOW + 60, ADAPTIVE)
    *_, last = await store.messages(KEY.id)
    assert last.quiet_reason is not None and "name-u1 is new here" in last.quiet_reason


async def test_the_window_never_passes_the_deadline(store: SqlStore) -> None:
    short = Timing(1.5, 2.0, AdaptiveWindow(0.5, 5.0, WindowModel(split_dangling=1.0)))
    await store.ingest(said(1, "so,"), NOW, short)
    assert await due(store) == pytest.approx(NOW + 2.0)


async def test_concurrent_arrivals_each_get_their_own_window(store: SqlStore) -> None:
    """On SQLite concurrent ingests share one group-commit transaction: each stranger's message
    still gets the window of its own shape, and a conversation's timer its burst's window."""
    keys = [ConversationKey("test", "w", f"g{n}") for n in range(6)]
    texts = ["ok?", "so I tried", "wait...", "ok?", "so I tried", "wait..."]
    results = await asyncio.gather(
        *(
            store.ingest(said(1, text, author=key.channel, key=key), NOW, FITTED)
            for key, text in zip(keys, texts, strict=True)
        )
    )
    expected = [stranger(text) for text in texts]
    assert len(set(expected)) == 3
    assert [r.due_at for r in results] == pytest.approx([NOW + e for e in expected])
    for key, e in zip(keys, expected, strict=True):
        assert await due(store, key) == pytest.approx(NOW + e)
    one = ConversationKey("test", "w", "together")
    await asyncio.gather(
        store.ingest(said(1, "so,", key=one), NOW, FITTED),
        store.ingest(said(2, "done.", author="u2", key=one), NOW, FITTED),
    )
    # u1 trailed off and u2 finished at the same moment: the burst waits for u1
    assert await due(store, one) == pytest.approx(NOW + stranger("so,"))
