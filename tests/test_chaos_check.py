"""The chaos checker catches what it claims to: duplicates, unanswered, unseen, late replies."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from bot.core.events import ConversationKey, IncomingMessage
from bot.core.store import Committed, FinalCheck, NewReply, OutboxRow, Timing
from storage.sqlite import SqliteStore
from tests.chaos_check import check
from tests.chaos_run import ENGINE, REPLIER, SIZES, FakePlatform, Run

KEY = ConversationKey("chaos", "w", "c0")
T = Timing(0.3, 1.0)
NOW = 1_000_000.0


@pytest.fixture
async def answered() -> AsyncIterator[tuple[SqliteStore, Run, FakePlatform]]:
    """Two messages answered by one reply that the platform received 1.5 s after the first."""
    store = SqliteStore(":memory:")
    await store.open()
    for n in (1, 2):
        text = f"c0-m{n}"
        await store.ingest(IncomingMessage(KEY, text, "u1", "user", text), NOW + n * 0.1, T)
    lease = await store.acquire_lease(KEY.id, "w", NOW + 1.0, 1.0)
    assert lease is not None
    outcome = await store.commit(
        KEY.id, FinalCheck(lease.token, 2, False), NOW + 1.2, T, NewReply("x")
    )
    assert isinstance(outcome, Committed)
    row = outcome.reply
    assert isinstance(row, OutboxRow)
    run = Run(SIZES["ci"], "sqlite://", "http://unused", random.Random(1))
    run.acked = {"c0-m1": "c0", "c0-m2": "c0"}
    platform = FakePlatform(random.Random(1))
    platform.posts["r1"] = {"text": "saw: c0-m1 c0-m2", "received_at": NOW + 1.5, "nonce": "r1"}
    platform.attempts.append(platform.posts["r1"])
    yield store, run, platform
    await store.close()


async def run_check(store: Any, run: Run, platform: FakePlatform) -> dict[str, Any]:
    return await check(store, ["c0"], run, platform, ENGINE, REPLIER, 0.5)


async def test_a_clean_run_counts_nothing(answered: tuple[SqliteStore, Run, FakePlatform]) -> None:
    counts = await run_check(*answered)
    assert counts["posts"] == 1 and counts["messages"] == 2
    for name in ("duplicates", "unanswered", "unseen", "late", "not_posted", "stored_twice"):
        assert counts[name] == 0, name


async def test_a_reply_missing_from_the_platform_leaves_messages_unanswered(
    answered: tuple[SqliteStore, Run, FakePlatform],
) -> None:
    store, run, platform = answered
    platform.posts.clear()
    counts = await run_check(store, run, platform)
    assert (counts["unanswered"], counts["not_posted"]) == (2, 1)


async def test_an_acknowledged_message_that_was_lost_is_unanswered(
    answered: tuple[SqliteStore, Run, FakePlatform],
) -> None:
    store, run, platform = answered
    run.acked["c0-m3"] = "c0"
    assert (await run_check(store, run, platform))["unanswered"] == 1


async def test_a_reply_that_did_not_see_its_burst_is_unseen(
    answered: tuple[SqliteStore, Run, FakePlatform],
) -> None:
    store, run, platform = answered
    platform.posts["r1"]["text"] = "saw: c0-m2"
    assert (await run_check(store, run, platform))["unseen"] == 1


async def test_a_reply_past_the_bound_is_late(
    answered: tuple[SqliteStore, Run, FakePlatform],
) -> None:
    store, run, platform = answered
    platform.posts["r1"]["received_at"] = NOW + 10.0
    assert (await run_check(store, run, platform))["late"] == 1


async def test_two_posted_replies_over_one_message_are_duplicates(
    answered: tuple[SqliteStore, Run, FakePlatform],
) -> None:
    store, run, platform = answered

    class Overlapping:
        """The store as it would look if a second reply had covered message 2 again."""

        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        async def replies(self, cid: str | None = None) -> list[OutboxRow]:
            [first] = await store.replies(cid)
            return [first, replace(first, id=2, covers_from_version=1, covers_to_version=2)]

    platform.posts["r2"] = {"text": "saw: c0-m2", "received_at": NOW + 1.6, "nonce": "r2"}
    counts = await run_check(Overlapping(), run, platform)
    assert counts["duplicates"] == 1
