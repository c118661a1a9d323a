"""Catch-up on Discord: what was sent while no process listened, read from channel history
(what is read, what it costs and what it cannot see: docs/catch-up.md).

Each channel object carries its `last_message_id`, so a guild's channel and active-thread lists
(two calls) tell which channels have anything new; a DM, or a channel neither list holds (an
archived thread, a guild not in the cache), costs one `GET /channels/{id}`. With `scope = "user"`
one channel holds several conversations: the newest message stored in any of them marks how far
the channel was seen. A channel cut at `max_pages` goes on at the next pass. Messages go through
the live rules (routing.py), which see the channel object as they would live. With shards, a
process catches up only its own guilds (and DMs on shard 0).

Errors: `RateLimited` (a wait longer than discord.py sits out itself) and 429/5xx/connection
failures are worth another try (`FetchError` with `retry_after`); a 403 (no Read Message History)
or 404 (channel gone) skips the channel, logged; a guild whose lists cannot be read falls back to
reading its channels one by one.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import discord

from adapters.discord.calls import fetch_errors
from adapters.discord.routing import DM_WORKSPACE, Routing
from bot.core.catch_up import CatchUpRun
from bot.core.errors import FetchError
from bot.core.events import ConversationKey, IncomingMessage

log = logging.getLogger("burstbot.discord")

PAGE = 100
Incoming = Callable[[discord.Message], IncomingMessage | None]
WITH_HISTORY = (discord.TextChannel, discord.Thread, discord.VoiceChannel, discord.StageChannel)
Listed = tuple[discord.abc.Messageable, int | None]  # a channel and its last message id


@dataclass(eq=False)
class History:
    client: discord.Client
    routing: Callable[[], Routing]  # read at each pass: tests and reloads may replace it
    incoming: Incoming

    async def catch_up(self, run: CatchUpRun) -> None:
        listened = sorted(self.routing().listen_channels) if run.listened else []
        channels = dict.fromkeys(listened, 0)  # id → newest message id stored (0: none), in order
        guilds: dict[int, None] = {}
        for key, newest in run.points.items():
            if self._ours(key):
                after = int(newest) if newest and newest.isdigit() else 0
                channels[int(key.channel)] = max(channels.get(int(key.channel), 0), after)
                if key.workspace != DM_WORKSPACE:
                    guilds[int(key.workspace)] = None
        start = datetime.fromtimestamp(run.window_start, UTC)
        floor = discord.utils.time_snowflake(start, high=True)
        listed = await self._listed(run, self._guilds_of(channels, guilds))
        for number, (channel_id, after) in enumerate(channels.items()):
            if run.exhausted:
                run.unchecked(len(channels) - number)
                return
            run.checked(len(channels))
            where = f"discord channel {channel_id}"
            try:
                found = listed.get(channel_id)
                if found is None:
                    found = await run.read(where, functools.partial(self._channel, channel_id))
                channel, last = found
                if last is None or last <= max(after, floor):
                    continue  # nothing new, or nothing within the window
                messages = await self._read(run, where, channel, max(after, floor))
            except FetchError as exc:
                if not exc.permanent:
                    raise
                run.skip(where, str(exc))
                continue
            await run.ingest(where, [e for m in messages if (e := self.incoming(m)) is not None])

    def _guilds_of(self, channels: dict[int, int], guilds: dict[int, None]) -> list[discord.Guild]:
        """The cached guilds of the conversations' and listened channels (this shard's)."""
        for channel_id in channels:
            cached = self.client.get_channel(channel_id)
            guild = getattr(cached, "guild", None)
            if isinstance(guild, discord.Guild):
                guilds[guild.id] = None
        return [g for gid in guilds if (g := self.client.get_guild(gid)) is not None]

    async def _listed(self, run: CatchUpRun, guilds: list[discord.Guild]) -> dict[int, Listed]:
        """Each guild's channels and active threads with their last message id: two calls per
        guild. A guild whose lists cannot be read is left to the channel-by-channel reads."""
        listed: dict[int, Listed] = {}
        for guild in guilds:
            where = f"discord guild {guild.id}"
            try:
                found = [
                    *await run.read(f"{where} channels", functools.partial(_channels, guild)),
                    *await run.read(f"{where} threads", functools.partial(_threads, guild)),
                ]
            except FetchError as exc:
                if not exc.permanent:
                    raise
                log.info("catch-up %s: cannot list channels (%s); reading them one by one",
                         where, exc)  # fmt: skip
                continue
            for channel in found:
                if isinstance(channel, WITH_HISTORY):
                    listed[channel.id] = (channel, channel.last_message_id)
        return listed

    def _ours(self, key: ConversationKey) -> bool:
        """This shard's guilds (Discord's formula), and DMs on shard 0."""
        count, shard = self.client.shard_count, self.client.shard_id or 0
        if key.workspace == DM_WORKSPACE:
            return shard == 0
        return not count or (int(key.workspace) >> 22) % count == shard

    async def _channel(self, channel_id: int) -> Listed:
        """One `GET /channels/{id}`: the channel as the live rules see it, and its last message
        id. discord.py keeps no `last_message_id` on a DM, so the raw object is read and the DM
        addressed by id."""
        with fetch_errors():
            data = await self.client.http.get_channel(channel_id)
            last = data.get("last_message_id")
            last_id = int(str(last)) if last else None
            if data["type"] in (discord.ChannelType.private.value, discord.ChannelType.group.value):
                return self.client.get_partial_messageable(channel_id), last_id
            channel = self.client.get_channel(channel_id)
            if channel is None:
                channel = await self.client.fetch_channel(channel_id)
        if not isinstance(channel, discord.abc.Messageable):
            raise FetchError(f"discord: channel {channel_id} holds no messages", permanent=True)
        return channel, last_id

    async def _read(
        self, run: CatchUpRun, where: str, channel: discord.abc.Messageable, after: int
    ) -> list[discord.Message]:
        messages: list[discord.Message] = []
        for number in range(1, run.max_pages + 1):
            read = functools.partial(self._page, channel, after)
            page = await run.read(f"{where} page {number}", read)
            messages += page
            if len(page) < PAGE:
                return messages
            after = page[-1].id
        run.truncated(where)
        return messages

    @staticmethod
    async def _page(channel: discord.abc.Messageable, after: int) -> list[discord.Message]:
        """One request: the 100 messages right after `after`, oldest first."""
        since = discord.Object(id=after)
        with fetch_errors():
            return [m async for m in channel.history(limit=PAGE, after=since, oldest_first=True)]


async def _channels(guild: discord.Guild) -> Sequence[object]:
    with fetch_errors():
        return await guild.fetch_channels()


async def _threads(guild: discord.Guild) -> Sequence[object]:
    with fetch_errors():
        return await guild.active_threads()
