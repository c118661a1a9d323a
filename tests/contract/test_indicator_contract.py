"""The thinking indicator's record (bot/core/indicator.py) on every backend: recorded once while
the burst is unanswered, taken down once, by whoever marks the conversation's reply sent."""

from __future__ import annotations

from bot.core.store import Sent
from storage.sql_store import SqlStore
from tests.contract.test_store_contract import CID, NOW, T, answer, msg


async def test_recorded_once_while_unanswered_and_taken_once(store: SqlStore) -> None:
    assert not await store.record_indicator(CID, "m1", 1)  # no such conversation yet
    accepted = await store.ingest(msg(1), NOW, T)
    assert await store.record_indicator(CID, "m1", accepted.version)
    assert not await store.record_indicator(CID, "m2", accepted.version)  # shown already
    assert await store.take_indicator(CID) == "m1"
    assert await store.take_indicator(CID) is None  # taken down once


async def test_never_recorded_for_an_answered_burst(store: SqlStore) -> None:
    accepted = await store.ingest(msg(1), NOW, T)
    await answer(store)
    assert not await store.record_indicator(CID, "m1", accepted.version)
    newer = await store.ingest(msg(2), NOW + 5, T)
    assert await store.record_indicator(CID, "m2", newer.version)


async def test_marking_the_reply_sent_takes_the_indicator_down(store: SqlStore) -> None:
    accepted = await store.ingest(msg(1), NOW, T)
    assert await store.record_indicator(CID, "m1", accepted.version)
    row = await answer(store)
    [claimed] = await store.claim_replies("a", NOW, 30.0, ["test"], 10)
    assert await store.mark_sent(row.id, claimed.claim_token + 1, ["p1"], NOW + 1) is None
    assert await store.mark_sent(row.id, claimed.claim_token, ["p1"], NOW + 1) == Sent("m1")
    assert await store.take_indicator(CID) is None


async def test_a_reply_sent_without_an_indicator_takes_nothing(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    row = await answer(store)
    [claimed] = await store.claim_replies("a", NOW, 30.0, ["test"], 10)
    assert await store.mark_sent(row.id, claimed.claim_token, ["p1"], NOW + 1) == Sent(None)
