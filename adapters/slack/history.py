"""Reading Slack's history: is a thread ours, and what was sent while no process listened
(docs/catch-up.md: what is read, in which order, at what cost).

Both read pages (`cursor`) of `conversations.replies` (a thread, oldest first) or
`conversations.history` (a channel's or DM's top-level messages, newest first). A failed read
becomes a `FetchError`: with Slack's `Retry-After` on a 429 (these methods are heavily
rate-limited for many apps), permanent when Slack says it can never work (channel gone, not in
the channel, missing scope). The caller (bot/core/catch_up.py) waits and reads again.

A thread is ours when one of its messages (on any page, up to `LOOKUP_MAX_PAGES`) is ours or
mentions us. Catch-up reads each conversation after its newest stored message (`oldest` is
exclusive on Slack), never before the window start, and puts each message through the rules of a
live event (inbound.py). History carries no `channel_type` and no `user_profile`: the channel id
tells a DM (`D…`), and `users.info` names the author (once per user and process; the id stands
in when that fails).
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import inbound
from adapters.slack.agent_catch_up import AgentDmCatchUp
from adapters.slack.calls import read
from adapters.slack.inbound import Identity, Payload
from bot.core.catch_up import CatchUpRun
from bot.core.errors import FetchError
from bot.core.events import ConversationKey, IncomingMessage

log = logging.getLogger("burstbot.slack")

PAGE = 200
LOOKUP_MAX_PAGES = 50


def _ts(message: Payload) -> float:
    return float(message.get("ts") or 0)


@dataclass(eq=False)
class History:
    """Reads for one workspace (one bot token)."""

    client: AsyncWebClient
    identity: Identity
    listen_channels: frozenset[str]
    agent_dms: AgentDmCatchUp | None = None  # the agent view's DMs, read by a full pass
    _names: dict[str, str] = field(default_factory=dict, init=False)

    async def _call(self, method: str, **args: Any) -> dict[str, Any]:
        response = await read(method.replace("_", "."), getattr(self.client, method)(**args))
        return dict(response.data) if isinstance(response.data, dict) else {}

    # is this thread ours? ---------------------------------------------------------------------
    async def thread_is_ours(self, key: ConversationKey) -> bool:
        cursor = ""
        for _ in range(LOOKUP_MAX_PAGES):
            page = await self._call("conversations_replies", channel=key.channel, ts=key.thread,
                                    limit=PAGE, cursor=cursor or None)  # fmt: skip
            if any(self._ours(m) for m in page.get("messages") or []):
                return True
            cursor = (page.get("response_metadata") or {}).get("next_cursor") or ""
            if not cursor:
                return False
        log.warning("thread %s: no sign of us in %d pages; taken as not ours", key.id,
                    LOOKUP_MAX_PAGES)  # fmt: skip
        return False

    def _ours(self, message: Payload) -> bool:
        ours = (None, self.identity.bot_id)
        mine = inbound.is_from_bot(message, self.identity) and message.get("bot_id") in ours
        return mine or inbound.mentions(message, self.identity)

    # catch-up ---------------------------------------------------------------------------------
    async def catch_up(self, run: CatchUpRun) -> None:
        """Fetch what was missed and `run.ingest` what counts, conversation by conversation, in
        the run's order (listened channels first), until the budget is spent."""
        team = self.identity.team_id
        targets: dict[ConversationKey, str | None] = {}
        if run.listened:
            for channel in sorted(self.listen_channels):
                targets[ConversationKey(inbound.PLATFORM, team, channel, "")] = None
        points = {k: v for k, v in run.points.items() if k.workspace == team}
        agent_dms: frozenset[ConversationKey] = frozenset()
        if run.listened and self.agent_dms is not None:
            points, agent_dms = await self.agent_dms.walk(team, points)
        targets.update(points)
        queue = deque(targets)
        while queue:
            if run.exhausted:
                run.unchecked(len(queue))
                return
            key = queue.popleft()
            run.checked(len(targets))
            newest = targets[key]
            after = max(float(inbound.split_message_id(newest)[1] or 0) if newest else 0.0,
                        run.window_start)  # fmt: skip
            try:
                messages = await self._read(run, key, after)
            except FetchError as exc:
                if not exc.permanent:
                    raise
                run.skip(key.id, str(exc))
                continue
            counted = []
            for message in messages:
                for thread in self._threads_with_news(key, message, after, key in agent_dms):
                    if thread not in targets:
                        targets[thread] = None
                        queue.appendleft(thread)
                event = await self._counted(run, key, message)
                if event is not None:
                    counted.append(event)
            route = None
            if key in agent_dms and self.agent_dms is not None:
                route = functools.partial(self.agent_dms.ingest, run)
            await run.ingest(key.id, counted, route)

    async def _read(self, run: CatchUpRun, key: ConversationKey, after: float) -> list[Payload]:
        """The messages after `after`, oldest first; at most `run.max_pages` pages."""
        args: dict[str, Any] = {"channel": key.channel, "oldest": f"{after:.6f}", "limit": PAGE}
        method = "conversations_history"
        if key.thread:
            method, args["ts"] = "conversations_replies", key.thread
        messages: list[Payload] = []
        cursor = ""
        for number in range(1, run.max_pages + 1):
            read = functools.partial(self._call, method, **args, cursor=cursor or None)
            page = await run.read(f"catch-up {key.id} page {number}", read)
            messages += page.get("messages") or []
            cursor = (page.get("response_metadata") or {}).get("next_cursor") or ""
            if not cursor:
                break
        else:
            run.truncated(key.id)
        return sorted((m for m in messages if _ts(m) > after), key=_ts)

    def _threads_with_news(
        self, key: ConversationKey, message: Payload, after: float, agent_dm: bool
    ) -> list[ConversationKey]:
        """A thread with replies since `after` (history shows only parents) in a listened channel
        or an agent's DM (read after the DM's messages: its exchange is chosen by then)."""
        if key.thread or not (agent_dm or key.channel in self.listen_channels):
            return []
        if not message.get("reply_count") or float(message.get("latest_reply") or 0) <= after:
            return []
        return [ConversationKey(inbound.PLATFORM, key.workspace, key.channel, str(message["ts"]))]

    async def _counted(
        self, run: CatchUpRun, key: ConversationKey, message: Payload
    ) -> IncomingMessage | None:
        """The live rules (inbound.py) applied to a message read from history."""
        channel = key.channel
        channel_type = "im" if channel.startswith("D") else "channel"
        payload = {**message, "channel": channel, "channel_type": channel_type}
        if str(message.get("subtype") or "") not in inbound.NEW_MESSAGE_SUBTYPES:
            return None
        if inbound.is_from_bot(message, self.identity):
            return None
        placement = inbound.place(key.workspace, channel, channel_type, payload, self.identity,
                                  self.listen_channels)  # fmt: skip
        if placement is None or (placement.needs_thread_check and placement.key != key):
            return None  # a thread reply counts when its thread is ours: the one being read
        if not payload.get("user_profile") and payload.get("user"):
            payload["user_profile"] = {"display_name": await self._name(run, str(payload["user"]))}
        return inbound.new_message(placement, channel, payload, self.identity)

    async def _name(self, run: CatchUpRun, user: str) -> str:
        if user not in self._names:
            read = functools.partial(self._call, "users_info", user=user)
            try:
                info = await run.read(f"user {user}", read)
            except FetchError as exc:  # a name is a nicety: the id will do, this process long
                log.info("slack: no name for %s (%s); using the id", user, exc)
                self._names[user] = user
                return user
            profile = (info.get("user") or {}).get("profile") or {}
            name = profile.get("display_name") or profile.get("real_name")
            self._names[user] = str(name or (info.get("user") or {}).get("name") or user)
        return self._names[user]
