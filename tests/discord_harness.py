"""A dpytest guild wired to the real engine: gateway events in, dpytest's fake HTTP out.

Messages are dispatched as the gateway would (`MESSAGE_CREATE` / `MESSAGE_UPDATE` payloads parsed by
discord.py's own connection state), so a RESUME replay is the same payload parsed twice. dpytest
builds its guild through the member cache, which needs the members intent; production does not
request it, so only the test client enables it.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field, replace
from typing import Any

import discord
import discord.ext.test as dpytest
from discord.ext.test import backend, callbacks
from discord.ext.test import factories as facts

from adapters.discord import DiscordFrontend
from adapters.discord.client import gateway_intents
from bot.app import App
from bot.config import Config, DiscordConfig, parse_config
from bot.core.events import ConversationKey
from bot.core.replier import Replier
from storage.sqlite import SqliteStore
from testkit.clock import FakeClock
from testkit.engine import shut_down

Payload = dict[str, Any]


@dataclass
class DiscordWorld:
    app: App
    frontend: DiscordFrontend
    clock: FakeClock
    guild: discord.Guild
    listened: discord.TextChannel
    chatter: discord.TextChannel
    alice: discord.Member
    bob: discord.Member
    typing_in: list[int] = field(default_factory=list)

    @property
    def me(self) -> discord.ClientUser:
        user = self.frontend.client.user
        assert user is not None
        return user

    @property
    def state(self) -> Any:
        return backend.get_state()

    def key(self, channel: Any, thread: str = "") -> ConversationKey:
        guild = getattr(channel, "guild", None)
        workspace = str(guild.id) if guild is not None else "dm"
        return ConversationKey("discord", workspace, str(channel.id), thread)

    def payload(self, channel: Any, author: Any, content: str, **extra: Any) -> Payload:
        """A MESSAGE_CREATE payload as Discord sends it (a partial member for guild messages)."""
        guild = getattr(channel, "guild", None)
        user = author._user if isinstance(author, discord.Member) else author
        fields: dict[str, Any] = {}
        if guild is not None:
            fields["guild_id"] = guild.id
            fields["member"] = facts.make_member_dict(guild, user, [])
        mentions = [u for u in extra.pop("mentions", [])]
        data: Payload = facts.make_message_dict(
            channel, user, content=content, mentions=mentions, **fields
        )
        data.update(extra)
        return data

    async def gateway(self, event: str, data: Payload) -> None:
        """Parse a gateway event as discord.py would and wait for every handler it started."""
        getattr(self.state, f"parse_{event.lower()}")(data)
        await dpytest.run_all_events()

    async def dispatch_create(self, data: Payload) -> None:
        await self.gateway("MESSAGE_CREATE", data)

    async def say(self, channel: Any, author: Any, content: str, **extra: Any) -> Payload:
        data = self.payload(channel, author, content, **extra)
        await self.dispatch_create(data)
        return data

    async def edit(self, data: Payload, content: str) -> None:
        now = datetime.datetime.now(datetime.UTC).isoformat()
        self.state.parse_message_update({**data, "content": content, "edited_timestamp": now})
        await dpytest.run_all_events()

    async def delete(self, data: Payload) -> None:
        deleted = {"id": data["id"], "channel_id": data["channel_id"]}
        if "guild_id" in data:
            deleted["guild_id"] = data["guild_id"]
        self.state.parse_message_delete(deleted)
        await dpytest.run_all_events()

    async def advance(self, seconds: float) -> None:
        """Move the fake clock a second at a time, letting typing loops finish their I/O."""
        while seconds > 0:
            await self.clock.advance(min(seconds, 1.0))
            await self.app.engine.indicator.idle()
            await self.frontend.typing.idle()
            seconds -= 1.0

    async def step(self, seconds: float = 0.0) -> None:
        """Advance the fake clock, start due work and wait for it (never the wall clock)."""
        await self.advance(seconds)
        await self.app.engine.run_due()
        await self.app.engine.idle()
        await self.app.engine.indicator.idle()
        await self.frontend.typing.idle()

    def sent(self) -> list[discord.Message]:
        messages = []
        while not dpytest.sent_queue.empty():
            messages.append(dpytest.sent_queue.get_nowait())
        return messages

    def route(self, **changes: Any) -> None:
        self.frontend.routing = replace(self.frontend.routing, **changes)


def engine_config(
    access: dict[str, Any] | None = None, catch_up: dict[str, Any] | None = None
) -> Config:
    return parse_config(
        {"llm": {"provider": "offline"}, "console": {"enabled": False}, "engine": {"owner": "w1"},
         "access": access or {}, "catch_up": catch_up or {},
         "debounce": {"adaptive": False, "speculate": False}}  # they step the fixed window
    )  # fmt: skip


async def open_world(
    store: SqliteStore,
    clock: FakeClock,
    replier: Replier,
    config: DiscordConfig | None = None,
    access: dict[str, Any] | None = None,
) -> DiscordWorld:
    intents = gateway_intents()
    intents.members = True  # dpytest's fake guild needs a member cache (see module docstring)
    frontend = DiscordFrontend(
        config or DiscordConfig(enabled=True),
        clock=clock,
        intents=intents,
    )
    client = frontend.client
    await client._async_setup_hook()
    dpytest.configure(client, text_channels=["listened", "chatter"], members=["alice", "bob"])
    runner = dpytest.get_config()
    app = App(engine_config(access), store, replier, [frontend], clock=clock, owner="w1")
    frontend.attach(app)
    listened, chatter = runner.channels[0], runner.channels[1]
    world = DiscordWorld(
        app, frontend, clock, runner.guilds[0], listened, chatter, *runner.members[:2]
    )
    world.route(listen_channels=frozenset({listened.id}))

    async def typed(channel: Any) -> None:
        world.typing_in.append(channel.id)

    callbacks.set_callback(typed, "send_typing")
    return world


async def close_world(world: DiscordWorld) -> None:
    await world.frontend.typing.close()
    await shut_down(world.app.engine)
    callbacks.remove_callback("send_typing")
    await dpytest.empty_queue()
