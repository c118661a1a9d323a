"""Nothing acknowledged is lost, nothing sent while no process ran is missed (Discord).

The real discord.py client against the fake Discord on 127.0.0.1, which keeps each channel's
history and serves it as Discord does (`after`, pages of 100, snowflake ids that carry their
creation time). The engine runs on a fake clock set to the wall clock's time, so the catch-up
window and the messages' ids agree; background reads are real HTTP, waited for with `settle`.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import discord
import pytest

from adapters.discord import DiscordFrontend
from bot.app import App
from bot.config import DiscordConfig
from bot.core.errors import StoreError
from bot.core.events import ConversationKey
from storage.sqlite import SqliteStore
from testkit import ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from testkit.engine import shut_down
from testkit.fake_discord import BOT_ID, Failure, FakeDiscord, Json, frontend_for, snowflake_at
from tests.discord_harness import engine_config

GUILD, LISTENED, GENERAL, THREAD, DM = (
    400_000_000_000_000_001,
    400_000_000_000_000_002,
    400_000_000_000_000_003,
    400_000_000_000_000_004,
    400_000_000_000_000_005,
)
ALICE = {"id": "200000000000000001", "username": "alice", "discriminator": "0",
         "global_name": "Alice", "avatar": None}  # fmt: skip
BOB = {**ALICE, "id": "200000000000000002", "username": "bob", "global_name": "Bob"}
DM_KEY = ConversationKey("discord", "dm", str(DM))
LISTENED_KEY = ConversationKey("discord", str(GUILD), str(LISTENED))
THREAD_KEY = ConversationKey("discord", str(GUILD), str(THREAD))


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as server:
        monkeypatch.setattr(discord.http.Route, "BASE", server.api_base)
        monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", server.gateway_url)
        server.guilds.append(GUILD)
        server.add_channel(LISTENED, "text", guild_id=GUILD)
        server.add_channel(GENERAL, "text", guild_id=GUILD)
        server.add_channel(THREAD, "thread", guild_id=GUILD, parent_id=GENERAL, owner_id=BOT_ID)
        server.add_channel(DM, "dm", recipient=ALICE)
        yield server


@dataclass
class Bot:
    app: App
    frontend: DiscordFrontend
    store: SqliteStore
    clock: FakeClock
    replier: ScriptedReplier

    async def settle(self) -> None:
        for catch_up in self.app.catch_ups:
            await catch_up.idle()

    async def step(self, seconds: float = 0.0) -> None:
        await self.clock.advance(seconds)
        await self.app.engine.run_due()
        await self.app.engine.idle()
        await self.app.engine.outbox.deliver_due()
        await self.app.engine.idle()


@asynccontextmanager
async def running(
    fake: FakeDiscord,
    db: str,
    clock: FakeClock,
    catch_up: bool = True,
    catch_up_section: dict[str, Any] | None = None,
    **options: Any,
) -> AsyncIterator[Bot]:
    config = DiscordConfig(enabled=True, listen_channels=[str(LISTENED)])
    frontend = frontend_for(fake, clock, config, **options)
    store = SqliteStore(db)
    replier = ScriptedReplier()
    engine = engine_config(catch_up=catch_up_section)
    app = App(engine, store, replier, [frontend], clock=clock, owner="w1")
    await store.open()
    connecting_at = clock.now()
    await frontend.start(app)
    if catch_up:  # what App.run does once its front ends are up
        app.start_catch_up([frontend], connecting_at)
    try:
        yield Bot(app, frontend, store, clock, replier)
    finally:
        await frontend.stop()
        await shut_down(app.engine)
        await store.close()


async def until(condition: Callable[[], Any], clock: FakeClock | None = None) -> None:
    """Bounded wait for real I/O; with a clock, time moves a quarter second at a time meanwhile
    (a sleeper that registers late never misses its wake-up). The bound only catches a hang: on
    a machine loaded by parallel workers the rate-limited catch-up took over 10 s."""
    deadline = time.monotonic() + 30
    while True:
        done = condition()
        if inspect.isawaitable(done):
            done = await done
        if done:
            return
        assert time.monotonic() < deadline, "timed out"
        if clock is not None:
            await clock.advance(0.25)
        await asyncio.sleep(0.01)


def failing_first(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch, times: int, method: str = "ingest"
) -> list[str]:
    """The store refuses the first `times` calls of `method` (`ingest`, `edit`, `delete`: a busy
    database); returns every attempt's message id."""
    attempts: list[str] = []
    real = getattr(store, method)

    async def refusing(event: Any, *args: Any) -> Any:
        attempts.append(event.message_id)
        if len(attempts) <= times:
            raise StoreError("database is locked")
        return await real(event, *args)

    monkeypatch.setattr(store, method, refusing)
    return attempts


def in_guild(message: Json) -> Json:
    return {**message, "guild_id": str(GUILD)}


# ingest that fails ---------------------------------------------------------------------------
async def test_a_message_whose_first_two_store_attempts_fail_is_answered_once(
    fake: FakeDiscord, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(start=time.time())
    async with running(fake, str(tmp_path / "d.db"), clock, catch_up=False) as bot:
        attempts = failing_first(bot.store, monkeypatch, times=2)
        message = fake.message(DM, ALICE, "are you up?")
        await fake.dispatch("MESSAGE_CREATE", message)
        await until(lambda: len(attempts) == 3, clock)
        await bot.step(1.5)
        [post] = fake.created
        assert post["request"]["content"] == "reply to: are you up?"
        assert attempts == [message["id"]] * 3
        await check_invariants(bot.store, [DM_KEY.id])


async def test_an_edit_whose_first_two_store_attempts_fail_is_applied(
    fake: FakeDiscord, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(start=time.time())
    async with running(fake, str(tmp_path / "d.db"), clock, catch_up=False) as bot:
        message = fake.message(DM, ALICE, "helo")
        await fake.dispatch("MESSAGE_CREATE", message)
        await until(lambda: bot.store.current_version(DM_KEY.id))
        attempts = failing_first(bot.store, monkeypatch, times=2, method="edit")
        edited = datetime.datetime.now(datetime.UTC).isoformat()
        await fake.dispatch(
            "MESSAGE_UPDATE", {**message, "content": "hello", "edited_timestamp": edited}
        )
        await until(lambda: len(attempts) == 3, clock)
        await bot.step(1.5)
        assert [c.texts for c in bot.replier.calls] == [["hello"]]
        await check_invariants(bot.store, [DM_KEY.id])


async def test_a_delete_whose_first_two_store_attempts_fail_is_applied(
    fake: FakeDiscord, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(start=time.time())
    async with running(fake, str(tmp_path / "d.db"), clock, catch_up=False) as bot:
        kept, regretted = fake.message(DM, ALICE, "hello"), fake.message(DM, ALICE, "oops")
        await fake.dispatch("MESSAGE_CREATE", kept)
        await fake.dispatch("MESSAGE_CREATE", regretted)

        async def both_stored() -> bool:
            return len(await bot.store.messages(DM_KEY.id)) == 2

        await until(both_stored)
        attempts = failing_first(bot.store, monkeypatch, times=2, method="delete")
        await fake.dispatch("MESSAGE_DELETE", {"id": regretted["id"], "channel_id": str(DM)})
        await until(lambda: len(attempts) == 3, clock)
        await bot.step(1.5)
        assert [c.texts for c in bot.replier.calls] == [["hello"]]
        await check_invariants(bot.store, [DM_KEY.id])


async def test_messages_the_store_refuses_for_long_are_held_and_stored_in_order_once_it_answers(
    fake: FakeDiscord, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(start=time.time())
    async with running(fake, str(tmp_path / "d.db"), clock, catch_up=False) as bot:
        attempts = failing_first(bot.store, monkeypatch, times=12)  # a minute or so of outage
        first, second = fake.message(DM, ALICE, "hello?"), fake.message(DM, ALICE, "anyone?")
        await fake.dispatch("MESSAGE_CREATE", first)
        await until(lambda: bot.frontend.unstored.holding, clock)
        await fake.dispatch("MESSAGE_CREATE", second)
        await until(lambda: len(attempts) == 14, clock)
        await until(lambda: not bot.frontend.unstored.holding, clock)
        assert attempts[-2:] == [first["id"], second["id"]]
        stored = await bot.store.messages(DM_KEY.id)
        assert [(m.message_id, m.via) for m in stored] == [(first["id"], ""), (second["id"], "")]
        await bot.step(1.5)
        [post] = fake.created
        assert post["request"]["content"] == "reply to: hello? | anyone?"
        await check_invariants(bot.store, [DM_KEY.id])


async def test_a_message_that_does_not_fit_in_the_held_queue_is_fetched_by_catch_up(
    fake: FakeDiscord, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(start=time.time())
    async with running(fake, str(tmp_path / "d.db"), clock, unstored_limit=0) as bot:
        await bot.settle()
        attempts = failing_first(bot.store, monkeypatch, times=4)  # every in-process attempt
        message = fake.message(DM, ALICE, "hello?")
        await fake.dispatch("MESSAGE_CREATE", message)
        await until(lambda: len(attempts) == 5, clock)  # the fifth: catch-up's
        await bot.settle()
        await bot.step(1.5)
        [post] = fake.created
        assert post["request"]["content"] == "reply to: hello?"
        [stored] = await bot.store.messages(DM_KEY.id)
        assert (stored.message_id, stored.via) == (message["id"], "catch-up")


# catch-up ------------------------------------------------------------------------------------
async def test_downtime_in_a_dm_a_listened_channel_and_a_thread_is_answered_once(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    db, clock = str(tmp_path / "d.db"), FakeClock(start=time.time())
    async with running(fake, db, clock) as bot:
        await fake.dispatch("MESSAGE_CREATE", fake.message(DM, ALICE, "hello"))
        await fake.dispatch("MESSAGE_CREATE", in_guild(fake.message(THREAD, ALICE, "in yours")))

        async def both_stored() -> bool:
            return all([await bot.store.conversation_state(k.id) for k in (DM_KEY, THREAD_KEY)])

        await until(both_stored)
        await bot.settle()
        await bot.step(1.5)
        assert len(fake.created) == 2
    # no process runs: people keep writing
    fake.said(DM, ALICE, "are you there?")
    fake.said(DM, ALICE, "it's urgent")
    fake.said(LISTENED, BOB, "deploy failed")
    fake.said(LISTENED, {**BOB, "id": "200000000000000009", "bot": True}, "a bot: never counts")
    fake.said(LISTENED, BOB, "rollback?")
    fake.said(THREAD, ALICE, "and the EU numbers?")
    fake.said(THREAD, ALICE, "also APAC")
    fake.said(GENERAL, ALICE, "chatter where we only answer mentions")
    long_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=30)
    fake.said(LISTENED, BOB, "a day and more ago: left alone", id=str(snowflake_at(long_ago)))
    async with running(fake, db, clock) as bot:
        await bot.settle()
        await bot.step(1.5)
        posts = fake.created[2:]
        assert sorted(int(p["channel_id"]) for p in posts) == sorted([DM, LISTENED, THREAD])
        assert sorted(c.texts for c in bot.replier.calls) == [
            ["and the EU numbers?", "also APAC"],
            ["are you there?", "it's urgent"],
            ["deploy failed", "rollback?"],
        ]
        caught = await bot.store.messages(LISTENED_KEY.id)
        assert [(m.text, m.via) for m in caught] == [
            ("deploy failed", "catch-up"),
            ("rollback?", "catch-up"),
        ]
        await check_invariants(bot.store, [DM_KEY.id, THREAD_KEY.id, LISTENED_KEY.id])
    async with running(fake, db, clock) as bot:
        await bot.settle()
        await bot.step(10)
        assert len(fake.created) == 5 and bot.replier.calls == []  # nothing new posted


async def test_catch_up_after_a_new_gateway_session_and_past_a_rate_limit(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    clock = FakeClock(start=time.time())
    async with running(fake, str(tmp_path / "d.db"), clock) as bot:
        await fake.dispatch("MESSAGE_CREATE", fake.message(DM, ALICE, "before the gap"))
        await until(lambda: bot.store.current_version(DM_KEY.id))  # stored, not just sent
        await bot.settle()
        await bot.step(1.5)
        assert len(fake.created) == 1
        fake.said(DM, ALICE, "during the gap")
        limited = {"message": "You are being rate limited.", "retry_after": 60.0, "global": False}
        fake.read_failures[DM] = [Failure(429, limited, {"Retry-After": "60"})]
        await fake.close_gateway()  # Discord cannot resume the session: READY again

        async def caught_up() -> bool:
            return len(await bot.store.messages(DM_KEY.id)) == 2

        await until(caught_up, clock)  # past the 429 on the DM's first read
        await bot.settle()
        await bot.step(1.5)
        assert [c.texts for c in bot.replier.calls] == [["before the gap"], ["during the gap"]]


async def test_a_dm_in_a_conversation_quiet_longer_than_the_window_is_answered(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    window = {"max_age_hours": 0.03}  # 108 s
    db, now = str(tmp_path / "d.db"), datetime.datetime.now(datetime.UTC)
    earlier = now - datetime.timedelta(seconds=300)
    async with running(fake, db, FakeClock(start=earlier.timestamp()), True, window) as bot:
        first = fake.message(DM, ALICE, "hello", id=str(snowflake_at(earlier)))
        await fake.dispatch("MESSAGE_CREATE", first)
        await until(lambda: bot.store.current_version(DM_KEY.id))
        await bot.settle()
        await bot.step(1.5)
        assert len(fake.created) == 1
    # five quiet minutes; the bot is down for the last ones
    too_old = now - datetime.timedelta(seconds=200)
    fake.said(DM, ALICE, "sent before the window: left alone", id=str(snowflake_at(too_old)))
    fake.said(DM, ALICE, "are you still there?")
    fake.said(GENERAL, ALICE, "chatter in a channel we never served")
    async with running(fake, db, FakeClock(start=now.timestamp()), True, window) as bot:
        await bot.settle()
        await bot.step(1.5)
        assert [c.texts for c in bot.replier.calls] == [["are you still there?"]]
        assert [int(p["channel_id"]) for p in fake.created] == [DM, DM]
        await check_invariants(bot.store, [DM_KEY.id])
    async with running(fake, db, FakeClock(start=now.timestamp() + 5), True, window) as bot:
        await bot.settle()
        await bot.step(10)
        assert len(fake.created) == 2 and bot.replier.calls == []  # nothing new posted
