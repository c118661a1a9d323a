"""Catch-up on Discord: what was sent while no process listened, read from channel history.

Which channels: every channel holding a conversation the store knows (active within the window;
with `scope = "user"` one channel holds several, and the newest message stored in any of them
marks how far the channel was seen), and, on a full pass, every listened channel. What: the
messages after that newest one (`GET /channels/{id}/messages?after=`, pages of 100, oldest
first), never older than the window start, up to `max_pages` pages per channel and pass (a later
pass goes on from where this one stopped). Each message goes through the live rules
(routing.py) and is ingested as caught up.

The channel is fetched first (one `GET /channels/{id}` unless cached), so the rules see a DM, a
thread (who started it, its parent) or a text channel as they would live. With shards, a process
catches up only its own guilds (and DMs on shard 0). A new DM from someone the bot never talked
to, and a thread under a listened channel that is not a conversation yet, are not found: Discord
offers bots no list of either.

Errors: `RateLimited` (a wait longer than discord.py sits out itself) and 429/5xx/connection
failures are worth another try (`FetchError` with `retry_after`); a 403 (no Read Message History)
or 404 (channel gone) skips the channel, logged.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from datetime import UTC, datetime

import aiohttp
import discord

from adapters.discord.posting import delivery_error
from adapters.discord.routing import DM_WORKSPACE, Routing
from bot.core.catch_up import CatchUpRun
from bot.core.errors import FetchError, PermanentDeliveryError, RetryableDeliveryError
from bot.core.events import ConversationKey, IncomingMessage

log = logging.getLogger("burstbot.discord")

PAGE = 100
Incoming = Callable[[discord.Message], IncomingMessage | None]


def fetch_error(exc: Exception) -> FetchError:
    if isinstance(exc, discord.HTTPException | discord.RateLimited):
        mapped = delivery_error(exc)
        retry_after = mapped.retry_after if isinstance(mapped, RetryableDeliveryError) else None
        return FetchError(str(mapped), retry_after, isinstance(mapped, PermanentDeliveryError))
    return FetchError(f"discord: connection failed ({exc!r})")


class History:
    def __init__(self, client: discord.Client, routing: Callable[[], Routing], incoming: Incoming):
        self.client = client
        self._routing = routing  # read at each pass: tests and reloads may replace it
        self._incoming = incoming

    async def catch_up(self, run: CatchUpRun) -> None:
        channels: dict[int, int] = {}  # channel id → newest message id stored (0: none)
        for key, newest in run.points.items():
            if self._ours(key):
                after = int(newest) if newest and newest.isdigit() else 0
                channels[int(key.channel)] = max(channels.get(int(key.channel), 0), after)
        if run.listened:
            for channel_id in sorted(self._routing().listen_channels):
                channels.setdefault(channel_id, 0)
        start = datetime.fromtimestamp(run.window_start, UTC)
        floor = discord.utils.time_snowflake(start, high=True)
        for channel_id, after in sorted(channels.items()):
            where = f"discord channel {channel_id}"
            try:
                channel = await run.read(where, functools.partial(self._channel, channel_id))
                messages = await self._read(run, where, channel, max(after, floor))
            except FetchError as exc:
                if not exc.permanent:
                    raise
                run.skip(where, str(exc))
                continue
            await run.ingest(where, [e for m in messages if (e := self._incoming(m)) is not None])

    def _ours(self, key: ConversationKey) -> bool:
        """This shard's guilds (Discord's formula), and DMs on shard 0."""
        count, shard = self.client.shard_count, self.client.shard_id or 0
        if key.workspace == DM_WORKSPACE:
            return shard == 0
        return not count or (int(key.workspace) >> 22) % count == shard

    async def _channel(self, channel_id: int) -> discord.abc.Messageable:
        cached = self.client.get_channel(channel_id)
        if isinstance(cached, discord.abc.Messageable):
            return cached
        try:
            channel = await self.client.fetch_channel(channel_id)
        except (discord.HTTPException, discord.RateLimited, aiohttp.ClientError, OSError) as exc:
            raise fetch_error(exc) from exc
        if not isinstance(channel, discord.abc.Messageable):
            raise FetchError(f"discord: channel {channel_id} holds no messages", permanent=True)
        return channel

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
        try:
            since = discord.Object(id=after)
            return [m async for m in channel.history(limit=PAGE, after=since, oldest_first=True)]
        except (discord.HTTPException, discord.RateLimited, aiohttp.ClientError, OSError) as exc:
            raise fetch_error(exc) from exc
