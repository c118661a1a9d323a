"""The chaos checker catches what it claims to, and the chaos platform never helps.

Each check is fed the fault it looks for: a lost or unseen or late reply, two replies over one
message, a part posted twice, parts or replies out of order, a worker spinning while it waits.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from bot.core.events import ConversationKey, IncomingMessage
from bot.core.store import Committed, FinalCheck, GenerationRecord, NewReply, OutboxRow, Timing
from storage.sqlite import SqliteStore
from tests.chaos_check import SPELL_SETTLE, check
from tests.chaos_run import (
    DISCORD_NONCE_WINDOW,
    ENGINE,
    REPLIER,
    SIZES,
    SPELL_SECONDS,
    FakePlatform,
    Run,
    mode_of,
    split_text,
)

KEY = ConversationKey("chaos", "w", "c1")  # odd: a Slack-like conversation, nothing deduped
T = Timing(0.3, 1.0)
NOW = 1_000_000.0

World = tuple[SqliteStore, Run, FakePlatform]


def show(platform: FakePlatform, reply: str, part: int, parts: int, text: str, at: float) -> None:
    """The platform stored (and showed) one part of a reply at `at`."""
    body = {"reply": reply, "part": part, "parts": parts, "nonce": f"{reply}.{part}",
            "channel": "c1", "text": text, "attempt": 1, "owner": "worker0.0",
            "received_at": at, "answered_at": at, "status": 200}  # fmt: skip
    platform.attempts.append(body)
    platform.posts.append(body | {"id": f"p{len(platform.posts) + 1}", "stored_at": at})


async def commit(store: SqliteStore, version: int, at: float) -> OutboxRow:
    lease = await store.acquire_lease(KEY.id, "w", at - 0.2, 1.0)
    assert lease is not None
    outcome = await store.commit(
        KEY.id, FinalCheck(lease.token, version, False), at, T, NewReply("x")
    )
    assert isinstance(outcome, Committed) and isinstance(outcome.reply, OutboxRow)
    return outcome.reply


@pytest.fixture
async def answered() -> AsyncIterator[World]:
    """Two messages answered by one reply that the platform showed 1.5 s after the first."""
    store = SqliteStore(":memory:")
    await store.open()
    for n in (1, 2):
        text = f"c1-m{n}"
        await store.ingest(IncomingMessage(KEY, text, "u1", "user", text), NOW + n * 0.1, T)
    await commit(store, 2, NOW + 1.2)
    run = Run(SIZES["ci"], "sqlite://", "http://unused", random.Random(1), store)
    run.acked = {"c1-m1": "c1", "c1-m2": "c1"}
    platform = FakePlatform(random.Random(1), ENGINE["lease_ttl_seconds"])
    show(platform, "r1", 0, 1, "saw: c1-m1 c1-m2", NOW + 1.5)
    yield store, run, platform
    await store.close()


@pytest.fixture
async def answered_twice(answered: World) -> World:
    """A second burst (message 3) answered by r2 in two parts, after r1 was shown."""
    store, run, platform = answered
    await store.ingest(IncomingMessage(KEY, "c1-m3", "u1", "user", "c1-m3"), NOW + 2.0, T)
    await commit(store, 3, NOW + 2.6)
    run.acked["c1-m3"] = "c1"
    show(platform, "r2", 0, 2, "saw:", NOW + 2.8)
    show(platform, "r2", 1, 2, "c1-m3", NOW + 2.9)
    return answered


async def run_check(store: Any, run: Run, platform: FakePlatform) -> dict[str, Any]:
    return await check(store, ["c1"], run, platform, ENGINE, REPLIER, 0.5)


async def test_a_clean_run_counts_nothing(answered_twice: World) -> None:
    counts = await run_check(*answered_twice)
    assert counts["posts"] == 3 and counts["messages"] == 3 and counts["multi_part"] == 1
    for name in ("duplicates", "duplicate_posts_raw", "unanswered", "unseen", "late",
                 "not_posted", "stored_twice", "out_of_order"):  # fmt: skip
        assert counts[name] == 0, name


async def test_a_reply_missing_from_the_platform_leaves_messages_unanswered(
    answered: World,
) -> None:
    store, run, platform = answered
    platform.posts.clear()
    counts = await run_check(store, run, platform)
    assert (counts["unanswered"], counts["not_posted"]) == (2, 1)


async def test_a_reply_missing_a_part_is_not_posted(answered_twice: World) -> None:
    store, run, platform = answered_twice
    del platform.posts[-1]
    counts = await run_check(store, run, platform)
    assert (counts["unanswered"], counts["not_posted"]) == (1, 1)


async def test_an_acknowledged_message_that_was_lost_is_unanswered(answered: World) -> None:
    store, run, platform = answered
    run.acked["c1-m3"] = "c1"
    assert (await run_check(store, run, platform))["unanswered"] == 1


async def test_a_reply_that_did_not_see_its_burst_is_unseen(answered: World) -> None:
    store, run, platform = answered
    platform.posts[0]["text"] = "saw: c1-m2"
    assert (await run_check(store, run, platform))["unseen"] == 1


async def test_a_reply_past_the_bound_is_late(answered: World) -> None:
    store, run, platform = answered
    platform.posts[0]["stored_at"] = NOW + 10.0
    assert (await run_check(store, run, platform))["late"] == 1


async def test_a_retry_after_on_the_way_is_allowed_for(answered: World) -> None:
    store, run, platform = answered
    platform.posts[0]["stored_at"] = NOW + 10.0
    platform.attempts.insert(0, platform.attempts[0] | {"status": 429, "retry_after": 8})
    assert (await run_check(store, run, platform))["late"] == 0


async def test_two_posted_replies_over_one_message_are_duplicates(answered: World) -> None:
    store, run, platform = answered

    class Overlapping:
        """The store as it would look if a second reply had covered message 2 again."""

        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        async def replies(self, cid: str | None = None) -> list[OutboxRow]:
            [first] = await store.replies(cid)
            return [first, replace(first, id=2, covers_from_version=1, covers_to_version=2)]

    show(platform, "r2", 0, 1, "saw: c1-m2", NOW + 1.6)
    counts = await run_check(Overlapping(), run, platform)
    assert counts["duplicates"] == 1


async def test_a_part_posted_twice_is_a_raw_duplicate(answered_twice: World) -> None:
    store, run, platform = answered_twice
    show(platform, "r2", 1, 2, "c1-m3", NOW + 3.0)  # a second deliverer posted it again
    counts = await run_check(store, run, platform)
    assert counts["duplicate_posts_raw"] == 1
    assert (counts["duplicates"], counts["unanswered"]) == (0, 0)  # the messages look fine


async def test_parts_shown_out_of_order_are_out_of_order(answered_twice: World) -> None:
    store, run, platform = answered_twice
    platform.posts[1]["stored_at"], platform.posts[2]["stored_at"] = NOW + 2.9, NOW + 2.8
    assert (await run_check(store, run, platform))["out_of_order"] == 1


async def test_a_reply_before_the_previous_one_is_out_of_order(answered_twice: World) -> None:
    """G9: r2 (committed after r1) begins before r1's last part is shown."""
    store, run, platform = answered_twice
    platform.posts[0]["stored_at"] = NOW + 2.85
    assert (await run_check(store, run, platform))["out_of_order"] == 1


async def test_a_worker_busy_in_a_quiet_spell_shows_in_the_idle_cpu(answered: World) -> None:
    store, run, platform = answered
    run.worker_starts = {"worker0.0": NOW - 60, "worker1.0": NOW - 60, "worker2.0": NOW - 1}
    start, end = NOW, NOW + SPELL_SECONDS
    run.spells.append((start, end))
    t = start + SPELL_SETTLE
    while t + 0.25 <= end:
        run.cpu.append(("worker0.0", t, t + 0.25, 0.01))  # waiting: 0.04 cores
        run.cpu.append(("worker1.0", t, t + 0.25, 0.24))  # spinning: 0.96 cores
        run.cpu.append(("worker2.0", t, t + 0.25, 0.24))  # just started: not judged
        t += 0.25
    counts = await run_check(store, run, platform)
    assert counts["idle_samples"] == 2
    assert counts["max_idle_cpu"] == pytest.approx(0.96)


async def test_a_takeover_counts_from_the_lease_seen_when_the_new_holder_dies_too(
    answered: World,
) -> None:
    """A worker is killed while generating; another takes its lease and is killed in turn before
    its generation ends (so it leaves no record). The next record is seconds later: the lease
    seen in another worker's hands is what shows the takeover was in time."""
    store, run, platform = answered
    killed_at = NOW + 0.5
    run.kills.append((killed_at, "worker0.0", {KEY.id: killed_at + 0.9}))
    late = GenerationRecord(KEY.id, 9, 2, 2, killed_at + 4.5, killed_at + 5.0, "failed")
    await store.record_generation(late)
    assert (await run_check(store, run, platform))["slow_takeovers"] == 1  # only the record
    run.taken_over[(killed_at, KEY.id)] = killed_at + 1.1
    counts = await run_check(store, run, platform)
    assert counts["slow_takeovers"] == 0 and counts["no_takeover"] == 0
    assert counts["max_takeover"] == pytest.approx(1.1)


# the platform ---------------------------------------------------------------------------------
async def post(platform: FakePlatform, channel: str, nonce: str = "r1.0") -> None:
    body = {"reply": nonce.split(".")[0], "part": 0, "parts": 1, "nonce": nonce,
            "channel": channel, "text": "hi", "attempt": 1, "owner": "w"}  # fmt: skip
    platform.attempts.append(body)
    platform._store(body)


async def test_discord_like_dedupes_a_nonce_only_within_its_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    platform = FakePlatform(random.Random(1), 1.0)
    assert mode_of("c0") == "discord"
    clock = iter([NOW, NOW + 1.0, NOW + DISCORD_NONCE_WINDOW + 0.1])
    monkeypatch.setattr("tests.chaos_run.time.time", lambda: next(clock))
    for _ in range(3):
        await post(platform, "c0")
    assert [p["stored_at"] for p in platform.posts] == [NOW, NOW + DISCORD_NONCE_WINDOW + 0.1]
    assert platform.deduped == 1


async def test_slack_like_stores_every_post() -> None:
    platform = FakePlatform(random.Random(1), 1.0)
    assert mode_of("c1") == "slack"
    for _ in range(3):
        await post(platform, "c1")
    assert len(platform.posts) == 3 and platform.deduped == 0


async def test_the_read_back_shows_stored_parts_only() -> None:
    platform = FakePlatform(random.Random(1), 1.0)
    await post(platform, "c1", "r7.0")
    await post(platform, "c1", "r8.0")
    response = await platform.shown(make_mocked_request("GET", "/posts?reply=r7"))
    assert isinstance(response, web.Response) and response.text == '{"parts": {"0": "p1"}}'


def test_long_replies_split_at_spaces_and_join_back() -> None:
    text = "saw: " + " ".join(f"c12-m{n}" for n in range(1, 12))
    parts = split_text(text, 40)
    assert len(parts) == 3 and all(len(p) <= 40 for p in parts)
    assert " ".join(parts) == text


async def test_a_part_stored_in_another_channel_is_in_the_wrong_channel(
    answered_twice: World,
) -> None:
    store, run, platform = answered_twice
    platform.posts[2]["channel"] = "c3"  # r2's second part, shown to the people of c3
    counts = await run_check(store, run, platform)
    assert counts["wrong_channel"] == 1
    assert (counts["duplicates"], counts["unanswered"]) == (0, 0)  # the counts by reply look fine


async def test_a_draft_no_reply_finished_is_stray(answered: World) -> None:
    store, run, platform = answered
    show(platform, "d0123456789abcdef0123", 0, 1, "saw: c1-m1", NOW + 1.4)
    counts = await run_check(store, run, platform)
    assert (counts["stray_drafts"], counts["streamed"]) == (1, 0)


async def test_a_draft_its_reply_finished_is_the_reply_not_a_stray(answered: World) -> None:
    store, run, platform = answered
    platform.posts[0] |= {"reply": "d0123456789abcdef0123", "finished_by": "r1"}
    counts = await run_check(store, run, platform)
    assert (counts["stray_drafts"], counts["streamed"], counts["not_posted"]) == (0, 1, 0)


async def test_a_takeover_within_the_lease_ttl_is_in_time(answered: World) -> None:
    store, run, platform = answered
    killed_at = NOW + 0.5
    run.kills.append((killed_at, "worker0.0", {KEY.id: killed_at + 0.9}))
    took_over = GenerationRecord(KEY.id, 9, 2, 2, killed_at + 1.2, killed_at + 1.4, "posted")
    await store.record_generation(took_over)
    counts = await run_check(store, run, platform)
    assert (counts["takeovers"], counts["slow_takeovers"], counts["no_takeover"]) == (1, 0, 0)
    assert counts["max_takeover"] == pytest.approx(1.2)


async def test_a_killed_lease_nobody_took_over_is_no_takeover(answered: World) -> None:
    store, run, platform = answered
    run.kills.append((NOW + 0.5, "worker0.0", {KEY.id: NOW + 1.4}))
    counts = await run_check(store, run, platform)
    assert (counts["takeovers"], counts["no_takeover"]) == (0, 1)
