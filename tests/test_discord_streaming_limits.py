"""Several conversations streaming at once in one Discord channel (scope "user": one per person)
share the channel's limit of about five posts and edits per five seconds: real discord.py against
the fake Discord enforcing it as a token bucket (429 with `retry_after`), all on one fake clock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import discord
import pytest

from bot.app import App
from bot.config import DiscordConfig, parse_config
from storage.sqlite import SqliteStore
from testkit import ReplierCall, ScriptedReplier
from testkit.clock import FakeClock
from testkit.engine import shut_down
from testkit.fake_discord import FakeDiscord, frontend_for
from tests.clock_steps import step

GUILD, CHANNEL = 300_000_000_000_000_001, 400_000_000_000_000_001
PEOPLE = [{"id": str(200_000_000_000_000_001 + n), "username": f"person{n}", "discriminator": "0",
           "global_name": f"Person {n}", "avatar": None} for n in range(4)]  # fmt: skip
TICK = 0.25


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as server:
        monkeypatch.setattr(discord.http.Route, "BASE", server.api_base)
        monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", server.gateway_url)
        server.guilds.append(GUILD)
        server.add_channel(CHANNEL, "text", guild_id=GUILD)
        yield server


async def stream_for(clock: FakeClock, calls: list[ReplierCall], seconds: float, tag: str) -> None:
    for tick in range(int(seconds / TICK)):
        for call in calls:
            call.stream(1, f"{tag}{tick} ")
        await step(clock, TICK, within=0.2)


async def test_people_streaming_in_one_channel_share_its_budget_and_finals_go_first(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    clock = FakeClock(start=time.time())
    fake.enforce_rate_limits(clock=clock.monotonic)
    config = DiscordConfig(enabled=True, listen_channels=[str(CHANNEL)], scope="user")
    frontend = frontend_for(fake, clock, config)
    store, replier = SqliteStore(str(tmp_path / "d.db")), ScriptedReplier(hold=True)
    engine = parse_config({"llm": {"provider": "offline"}, "console": {"enabled": False},
                           "catch_up": {"enabled": False}})  # fmt: skip
    app = App(engine, store, replier, [frontend], clock=clock, owner="w1")
    await store.open()
    await frontend.start(app)
    try:
        for n, person in enumerate(PEOPLE):
            await fake.dispatch("MESSAGE_CREATE", fake.message(
                CHANNEL, person, f"question {n}", guild_id=str(GUILD)))  # fmt: skip
        async with asyncio.timeout(5.0):
            while len(replier.calls) < len(PEOPLE):
                await clock.advance(0.5)
                await app.engine.run_due()
                await asyncio.sleep(0.01)
        calls = list(replier.calls)
        await stream_for(clock, calls, 8.0, "w")
        for turn, call in enumerate(list(calls)):  # one answer ends every two seconds
            answer = f"the whole answer to {call.texts[0]}."
            call.finish(answer)
            calls.remove(call)
            async with asyncio.timeout(5.0):  # no fake time passes: the final edit goes first
                while answer not in fake.shown(CHANNEL):  # noqa: ASYNC110
                    await asyncio.sleep(0.005)
            await stream_for(clock, calls, 2.0, f"t{turn}-")
        assert fake.rate_limited == 0
        assert sorted(fake.shown(CHANNEL)) == sorted(
            f"the whole answer to question {n}." for n in range(len(PEOPLE))
        )
        assert len(fake.edits) > 2 * len(PEOPLE)  # the drafts grew, sharing the budget
    finally:
        await frontend.stop()
        await shut_down(app.engine)
        await store.close()
