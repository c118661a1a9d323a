"""A gateway event discord.py cannot read costs one log line, not the connection (or the process).

Real discord.py against the fake Discord gateway on 127.0.0.1: every example object of Discord's
API docs that this test sends as a dispatch (tests/fixtures/discord_gateway_examples.json, taken
from github.com/discord/discord-api-docs, commit named in the file), and deliberately broken
dispatches. Some of the docs' own examples do not parse in discord.py (a guild member without
`flags`). After all of them the same connection is up and a DM sent next is answered once (the
docs' example messages carry no guild: Discord's DMs, answered like any).
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from adapters.discord import DiscordFrontend
from bot.app import App
from bot.core.events import ConversationKey
from storage.sqlite import SqliteStore
from testkit import ScriptedReplier
from testkit.clock import FakeClock
from testkit.engine import shut_down
from testkit.fake_discord import FakeDiscord, frontend_for
from tests.discord_harness import engine_config

EXAMPLES = Path(__file__).parent / "fixtures" / "discord_gateway_examples.json"
GUILD_ID, CHANNEL_ID, DM_ID = (
    400_000_000_000_000_001,
    400_000_000_000_000_002,
    400_000_000_000_000_003,
)
ALICE = {"id": "200000000000000001", "username": "alice", "discriminator": "0",
         "global_name": "Alice", "avatar": None}  # fmt: skip
DM_KEY = ConversationKey("discord", "dm", str(DM_ID))


def docs_examples() -> list[tuple[str, dict[str, Any]]]:
    """The docs' examples as dispatches; a guild member joins the guild the bot is in (else
    discord.py discards the event before reading the member), once as the docs show it (an
    empty user) and once with a user (the member still has no `flags`)."""
    events = []
    for event in json.loads(EXAMPLES.read_text())["events"]:
        data = copy.deepcopy(event["d"])
        if event["t"] == "GUILD_MEMBER_ADD":
            data["guild_id"] = str(GUILD_ID)
            events.append((event["t"], copy.deepcopy(data)))
            data["user"] = {"id": "53908099506183681", "username": "Mason", "discriminator": "0",
                            "global_name": None, "avatar": None}  # fmt: skip
        events.append((event["t"], data))
    return events


def broken() -> list[tuple[str, Any]]:
    """Dispatches no Discord should send: a field missing, a wrong type, a body of the wrong
    shape, an event type discord.py does not know."""
    message = {"id": "500000000000000001", "channel_id": str(DM_ID), "author": ALICE,
               "content": "x", "timestamp": "2024-01-01T00:00:00+00:00", "type": 0,
               "attachments": [], "embeds": [], "mentions": [], "mention_roles": [],
               "pinned": False, "mention_everyone": False, "tts": False}  # fmt: skip
    return [
        ("MESSAGE_CREATE", {k: v for k, v in message.items() if k != "channel_id"}),
        ("MESSAGE_CREATE", {**message, "id": "not a snowflake"}),
        ("MESSAGE_UPDATE", {"id": "500000000000000002"}),
        ("MESSAGE_DELETE", "a string, not an object"),
        ("CHANNEL_CREATE", {"id": "500000000000000003"}),
        ("GUILD_MEMBER_REMOVE", {"guild_id": str(GUILD_ID), "user": None}),
        ("TYPING_START", {"channel_id": str(DM_ID), "user_id": "x", "timestamp": "soon"}),
        ("NOT_AN_EVENT", {"anything": [1, 2]}),
    ]


@pytest.fixture
async def frontend(fake_discord: FakeDiscord, clock: FakeClock) -> AsyncIterator[DiscordFrontend]:
    fake_discord.guilds.append(GUILD_ID)
    fake_discord.add_channel(CHANNEL_ID, "text", guild_id=GUILD_ID)
    front = frontend_for(fake_discord, clock)
    yield front
    await front.stop()


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 5.0) -> None:
    """Bounded wait for real I/O (gateway events crossing a socket) to land."""
    async with asyncio.timeout(within):
        while not await check():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def test_events_discord_py_cannot_read_are_dropped_with_a_line_and_the_bot_answers_on(
    fake_discord: FakeDiscord,
    frontend: DiscordFrontend,
    store: SqliteStore,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = fake_discord
    app = App(engine_config(), store, ScriptedReplier(), [frontend], clock=clock, owner="w1")
    await frontend.start(app)
    connections = fake.connections
    caplog.set_level(logging.WARNING, logger="burstbot.discord")
    for event, data in [*docs_examples(), *broken()]:
        await fake.dispatch(event, data)
    hello = fake.message(DM_ID, ALICE, "still there?")
    await fake.dispatch("MESSAGE_CREATE", hello)  # after every bad one, on the same connection

    async def stored() -> bool:
        state = await store.conversation_state(DM_KEY.id)
        return state is not None and state.version == 1

    await eventually(stored)
    await clock.advance(1.5)
    await app.engine.run_due()
    await app.engine.idle()
    assert fake.shown(DM_ID) == ["reply to: still there?"]  # answered once
    assert fake.connections == connections  # never reconnected: the connection stayed up
    dropped = [r for r in caplog.records if "could not be read" in r.getMessage()]
    assert all(r.exc_info is None for r in dropped)  # one line each, no traceback
    dropped_types = [r.getMessage().split()[2] for r in dropped]
    assert dropped_types.count("GUILD_MEMBER_ADD") == 2  # the docs' own member example
    assert {"MESSAGE_CREATE", "MESSAGE_UPDATE", "MESSAGE_DELETE"} <= set(dropped_types)
    assert "Supa Hot" not in caplog.text  # an event's content is never logged
    await shut_down(app.engine)
