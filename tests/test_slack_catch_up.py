"""Nothing acknowledged is lost, nothing sent while no process ran is missed (Slack).

The real Bolt app and Web API client against the fake Slack, which serves history like Slack:
`oldest` exclusive, channel history newest first without thread replies, threads oldest first,
cursor pages, 429s with Retry-After when told to. The engine runs on a fake clock; the
background reads (thread lookups, catch-up) are real HTTP, waited for with `bot.settle()`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from bot.core.events import ConversationKey
from testkit import check_invariants
from testkit.clock import FakeClock
from testkit.fake_slack import BOT_ID, BOT_USER, TEAM, Failure, FakeSlackApi, channel_message, dm
from tests.slack_harness import DM_KEY, api, running_bot, ts

__all__ = ["api"]  # fixture

START = 1_700_000_000.0 + 3600  # the fake clock: an hour after the messages' timestamps
THREAD_KEY = ConversationKey("slack", TEAM, "C1", ts(10))
LISTENED_KEY = ConversationKey("slack", TEAM, "C9", "")
RATE_LIMITED = Failure(status=429, error="ratelimited", headers={"Retry-After": "30"})


async def until(
    condition: Callable[[], bool], clock: FakeClock | None = None, step: float = 1.0
) -> None:
    """Bounded wait for real I/O; with a clock, time moves `step` seconds at a time meanwhile
    (a sleeper that registers late never misses its wake-up)."""
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        if clock is not None:
            await clock.advance(step)
        await asyncio.sleep(0.01)


def seed_thread_we_answered(api: FakeSlackApi) -> None:
    """A thread in C1 where we were mentioned and answered, unknown to a fresh database."""
    api.add_user_message("C1", ts(5), f"<@{BOT_USER}> help", user="U2")
    api.add_user_message("C1", ts(6), "answer", user=BOT_USER, thread_ts=ts(5))
    api.messages[-1].bot_id = BOT_ID


# threads: known, remembered, or held and decided later ----------------------------------------
async def test_thread_follow_up_while_replies_is_rate_limited_is_answered_once(
    api: FakeSlackApi,
) -> None:
    seed_thread_we_answered(api)
    api.fail("conversations.replies", RATE_LIMITED, times=2)
    async with running_bot(api) as bot:  # a fresh store: the thread is unknown
        follow_up = channel_message(ts(7), "thanks! one more", thread_ts=ts(5))
        assert await bot.send(follow_up) == 200  # acked at once: held, not dropped
        assert await bot.send(follow_up, retry_num=1) == 200  # Slack's retry: held once
        await until(lambda: api.methods().count("conversations.replies") == 3, bot.clock)
        await bot.settle()
        await bot.step(1.5)
        await bot.step(10)
        [post] = api.posts(channel="C1")[1:]  # [0] is the seeded earlier answer
        assert post.thread_ts == ts(5)
        assert [c.texts for c in bot.replier.calls] == [["thanks! one more"]]
        assert await bot.app.threads.memory.held("slack", 10) == []
        key = ConversationKey("slack", TEAM, "C1", ts(5))
        [stored] = await bot.store.messages(key.id)
        assert stored.via == "held"
        await check_invariants(bot.store, [key.id])


async def test_thread_answers_are_remembered_in_the_store_across_restarts(
    api: FakeSlackApi, tmp_path: Path
) -> None:
    seed_thread_we_answered(api)
    api.add_user_message("C1", ts(1), "humans only")
    db = str(tmp_path / "b.db")
    async with running_bot(api, db=db) as bot:
        assert await bot.send(channel_message(ts(2), "chatter", thread_ts=ts(1))) == 200
        assert await bot.send(channel_message(ts(7), "one more", thread_ts=ts(5))) == 200
        await bot.settle()
        await bot.step(1.5)
        assert [c.texts for c in bot.replier.calls] == [["one more"]]
        assert api.methods().count("conversations.replies") == 2
    async with running_bot(api, db=db) as bot:
        assert await bot.send(channel_message(ts(3), "more chatter", thread_ts=ts(1))) == 200
        assert await bot.send(channel_message(ts(8), "and again", thread_ts=ts(5))) == 200
        await bot.settle()
        await bot.step(1.5)
        assert [c.texts for c in bot.replier.calls] == [["and again"]]
    assert api.methods().count("conversations.replies") == 2  # no lookup after the restart


async def test_a_thread_that_cannot_be_read_is_logged_and_not_answered(api: FakeSlackApi) -> None:
    api.fail("conversations.replies", Failure(error="channel_not_found"))
    async with running_bot(api) as bot:
        assert await bot.send(channel_message(ts(2), "hm", channel="C7", thread_ts=ts(1))) == 200
        await bot.settle()
        await bot.step(10)
        assert api.posts() == [] and await bot.app.threads.memory.held("slack", 10) == []


# catch-up -------------------------------------------------------------------------------------
async def test_downtime_in_a_dm_a_listened_channel_and_a_thread_is_answered_once(
    api: FakeSlackApi, tmp_path: Path
) -> None:
    db, clock = str(tmp_path / "b.db"), FakeClock(start=START)
    async with running_bot(api, db=db, clock=clock, catch_up=True, listen_channels=["C9"]) as bot:
        await bot.send(dm(ts(1), "hello"))
        mention = f"<@{BOT_USER}> quarterly numbers?"
        await bot.send(channel_message(ts(10), mention, event_type="app_mention"))
        await bot.settle()
        await bot.step(1.5)
        assert len(api.posts()) == 2
    # no process runs: people keep writing
    api.add_user_message("D1", ts(20), "are you there?")
    api.add_user_message("D1", ts(21), "it's urgent")
    api.add_user_message("C9", ts(22), "deploy failed", user="U2")
    api.add_user_message("C9", ts(23), "rollback?", user="U2")
    api.add_user_message("C1", ts(24), "and the EU numbers?", thread_ts=ts(10))
    api.add_user_message("C1", ts(25), "also APAC", thread_ts=ts(10))
    api.add_user_message("C1", ts(26), "chatter in a channel we only serve when mentioned")
    api.add_user_message("C9", "1699900000.000001", "a day and more ago: left alone")
    async with running_bot(api, db=db, clock=clock, catch_up=True, listen_channels=["C9"]) as bot:
        await bot.settle()
        await bot.step(1.5)
        posts = api.posts()[2:]
        assert sorted((p.channel, p.thread_ts) for p in posts) == [
            ("C1", ts(10)),
            ("C9", None),
            ("D1", None),
        ]
        assert sorted(c.texts for c in bot.replier.calls) == [
            ["and the EU numbers?", "also APAC"],
            ["are you there?", "it's urgent"],
            ["deploy failed", "rollback?"],
        ]
        names = {c.prompt.burst[0].author_name for c in bot.replier.calls}
        assert names == {"alice", "bob"}  # users.info: history carries no profile
        caught = await bot.store.messages(LISTENED_KEY.id)
        assert [(m.text, m.via) for m in caught] == [
            ("deploy failed", "catch-up"),
            ("rollback?", "catch-up"),
        ]
        await check_invariants(bot.store, [DM_KEY.id, THREAD_KEY.id, LISTENED_KEY.id])
    async with running_bot(api, db=db, clock=clock, catch_up=True, listen_channels=["C9"]) as bot:
        versions = [await bot.store.current_version(k.id) for k in (DM_KEY, THREAD_KEY)]
        await bot.settle()
        await bot.step(10)
        assert len(api.posts()) == 5 and bot.replier.calls == []  # nothing new posted
        assert [await bot.store.current_version(k.id) for k in (DM_KEY, THREAD_KEY)] == versions


async def test_catch_up_waits_out_rate_limits_and_reads_every_page(api: FakeSlackApi) -> None:
    for n in range(1, 451):  # more than two pages of 200
        api.add_user_message("C9", ts(n), f"message {n}")
    api.fail("conversations.history", RATE_LIMITED)
    clock = FakeClock(start=START)
    async with running_bot(api, clock=clock, catch_up=True, listen_channels=["C9"]) as bot:
        await until(lambda: api.methods().count("conversations.history") == 4, clock)
        await bot.settle()
        assert len(await bot.store.messages(LISTENED_KEY.id)) == 450
        await bot.step(1.5)
        [call] = bot.replier.calls
        assert call.texts[0] == "message 1" and call.texts[-1] == "message 450"


async def test_a_live_message_after_the_restart_does_not_hide_the_gap(api: FakeSlackApi) -> None:
    clock = FakeClock(start=START)
    async with running_bot(api, clock=clock, catch_up=True, mode="socket") as bot:
        await api.push_envelope(dm(ts(1), "before the gap"))
        await until(lambda: len(api.acks) == 1)
        await bot.settle()
        await bot.step(1.5)
        assert len(api.posts()) == 1
        # the connection drops; one message is sent meanwhile, one after it is back
        api.add_user_message("D1", ts(2), "during the gap")
        await api.sockets[-1].close()
        await until(lambda: len(api.sockets) == 2 and not api.sockets[-1].closed)
        await api.push_envelope(dm(ts(3), "after it"))
        await until(lambda: len(api.acks) == 2)
        await bot.settle()
        await bot.step(1.5)
        texts = [m.text for m in await bot.store.messages(DM_KEY.id)]
        assert sorted(texts) == ["after it", "before the gap", "during the gap"]
        assert sorted(bot.replier.calls[-1].texts) == ["after it", "during the gap"]


async def test_a_catch_up_waiting_out_a_rate_limit_never_delays_live_events(
    api: FakeSlackApi,
) -> None:
    api.add_user_message("C9", ts(1), "sent while down")
    api.fail("conversations.history", Failure(429, "ratelimited", {"Retry-After": "600"}))
    clock = FakeClock(start=START)
    async with running_bot(api, clock=clock, catch_up=True, listen_channels=["C9"]) as bot:
        await until(lambda: "conversations.history" in api.methods())
        assert await bot.send(dm(ts(2), "hi, live")) == 200
        await bot.step(1.5)
        assert [c.texts for c in bot.replier.calls] == [["hi, live"]]  # catch-up still waits
        await until(lambda: api.methods().count("conversations.history") == 2, clock, step=30)
        await bot.settle()
        await bot.step(1.5)
        assert [c.texts for c in bot.replier.calls][1:] == [["sent while down"]]


async def test_a_thread_whose_lookup_keeps_failing_does_not_hold_up_the_others(
    api: FakeSlackApi,
) -> None:
    seed_thread_we_answered(api)  # ts(5)
    api.add_user_message("C1", ts(15), f"<@{BOT_USER}> another", user="U2")
    api.add_user_message("C1", ts(16), "answer", user=BOT_USER, thread_ts=ts(15))
    api.messages[-1].bot_id = BOT_ID
    api.fail("conversations.replies", Failure(status=500), times=12)  # two rounds of tries
    async with running_bot(api) as bot:
        assert await bot.send(channel_message(ts(7), "first thread", thread_ts=ts(5))) == 200
        assert await bot.send(channel_message(ts(17), "second thread", thread_ts=ts(15))) == 200
        await until(lambda: api.methods().count("conversations.replies") == 14, bot.clock, 2)
        await bot.settle()
        await bot.step(1.5)
        threads = [a["ts"] for m, a in api.calls if m == "conversations.replies"]
        assert threads[12:] == [ts(15), ts(5)]  # the second was decided before the first
        assert sorted(c.texts for c in bot.replier.calls) == [["first thread"], ["second thread"]]


async def test_a_dm_in_a_conversation_quiet_longer_than_the_window_is_answered(
    api: FakeSlackApi, tmp_path: Path
) -> None:
    window = {"max_age_hours": 0.03}  # 108 s
    db, clock = str(tmp_path / "b.db"), FakeClock(start=START)
    async with running_bot(api, db=db, clock=clock, catch_up=True, catch_up_section=window) as bot:
        await bot.send(dm(f"{START:.6f}", "hello"))
        await bot.settle()
        await bot.step(1.5)
        assert len(api.posts()) == 1
    await clock.advance(300)  # five quiet minutes; the bot is down for the last ones
    api.add_user_message("D1", f"{START + 100:.6f}", "sent before the window: left alone")
    api.add_user_message("D1", f"{START + 290:.6f}", "are you still there?")
    async with running_bot(api, db=db, clock=clock, catch_up=True, catch_up_section=window) as bot:
        await bot.settle()
        await bot.step(1.5)
        assert [c.texts for c in bot.replier.calls] == [["are you still there?"]]
        assert [p.channel for p in api.posts()] == ["D1", "D1"]
        await check_invariants(bot.store, [DM_KEY.id])
    async with running_bot(api, db=db, clock=clock, catch_up=True, catch_up_section=window) as bot:
        await bot.settle()
        await bot.step(10)
        assert len(api.posts()) == 2 and bot.replier.calls == []  # nothing new posted


async def test_a_long_walk_stops_at_its_request_budget_most_recently_active_first(
    api: FakeSlackApi, tmp_path: Path
) -> None:
    db, clock = str(tmp_path / "b.db"), FakeClock(start=START)
    budget = {"max_requests": 3}
    async with running_bot(api, db=db, clock=clock, catch_up=True, catch_up_section=budget) as bot:
        for n, channel in enumerate(["D3", "D2", "D1"], start=1):  # D1 the most recently active
            await bot.send(dm(ts(n), f"hello from {channel}", channel=channel))
            await clock.advance(60)
        await bot.settle()
        await bot.step(1.5)
        assert len(api.posts()) == 3
    for n, channel in enumerate(["D1", "D2", "D3"], start=10):
        api.add_user_message(channel, ts(n), f"back in {channel}")
    reads = api.methods().count("conversations.history")
    async with running_bot(api, db=db, clock=clock, catch_up=True, catch_up_section=budget) as bot:
        await bot.settle()
        await bot.step(1.5)
        read = [a["channel"] for m, a in api.calls if m == "conversations.history"][reads:]
        assert read == ["D1", "D2"]  # most recently active first, then D1's author's name: 3
        assert sorted(c.texts for c in bot.replier.calls) == [["back in D1"], ["back in D2"]]
