"""Slack's agent surface (`agent_view`): conversations in the app's Messages tab, each exchange a
thread under the person's message; docs/slack-assistant.md says what happens there, and why.

Opening the tab (`app_home_opened`, `tab` "messages") marks the DM as an agent's (noted once, so
only a DM Slack shows as an agent's has its messages threaded: an older app's plain DMs stay as
they were) and sets the suggested prompts once per exchange: a redelivery, or the tab opened
again, finds the note and calls nothing. `app_context_changed` notes the channel the person looks
at, on the person (the event names no DM; its envelope's `authorizations` name the person).

A top-level message in such a DM starts an exchange, keyed as the thread under it, unless the
DM's latest exchange is still open (a burst pending, or chosen so recently that its first message
may not be stored yet): then it joins that one, so a burst typed as several top-level messages is
one burst, answered once in one thread. The DM's latest exchange is moved on only from the value
read, by one conditional write in the store (`swap_note`): of two processes taking two messages of
one burst at the same instant, one opens the exchange and the other, its write refused, reads
that choice and joins it. A per-DM lock keeps a process's choice and its store write together, so
it never finds its own choice not yet stored.

The exchange is rooted at the message whose choice was written first. Slack sends a DM's events
in order, so that is the first typed, except when the first is held up past the next one (two
deliveries at the same instant, in one process or two): then the burst is answered under the
later line, still once. Rooting it at the earlier one would mean moving a stored message, and
what was done for it (its exchange's title and session), to another conversation.

Lines typed while no process listened are keyed the same way by catch-up (agent_catch_up.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from adapters.slack.inbound import PLATFORM, Payload, is_slack_ts
from bot.config import SlackAssistantConfig
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.frontend import Host

log = logging.getLogger("burstbot.slack")

NOTE_AGENT_DM = "agent_dm"  # on the DM: Slack showed it as an agent's Messages tab (the person)
NOTE_EXCHANGE = "exchange"  # on the DM: the root ts of its latest exchange
NOTE_AGENT_THREAD = "agent_thread"  # on an exchange: it is one (its drafts stream, its title)
NOTE_VIEWING = "viewing"  # on the person: the channel they look at (JSON, as assistant.py's)
PROMPTS_SHOWN = "prompts:"  # on the DM, with the exchange the prompts were set after ("-": none)
CHANNEL_ENTITY = "slack#/types/channel_id"
REMEMBERED = 10_000  # agent DMs and exchanges remembered per process
# how long an exchange whose first message is not stored yet takes the DM's next messages: longer
# than any process takes from its choice to its store write (Slack wants the ack within 3 s, and
# an event not acked is sent again); after it, an opener that died in between is given up on
OPENING_GRACE = 60.0

SurfaceCall = Callable[..., Awaitable[None]]


def person_id(team: str, user: str) -> str:
    """Where a person's notes live: the conversation id a DM with them would have, with their
    user id for its channel (user ids never collide with channel ids)."""
    return ConversationKey(PLATFORM, team, user).id


def viewer_of(body: Payload) -> str:
    """The person an `app_context_changed` is about: the envelope's non-bot authorization."""
    for authorization in body.get("authorizations") or []:
        if isinstance(authorization, Mapping) and not authorization.get("is_bot"):
            user = authorization.get("user_id")
            if isinstance(user, str) and user:
                return user
    user = (body.get("event") or {}).get("user")
    return user if isinstance(user, str) else ""


def viewed_context(event: Payload) -> dict[str, str]:
    """The first channel among the event's `context.entities` (by relevance), as the assistant
    surface notes a viewed channel (`channel_id`, `team_id`); {} when none."""
    context = event.get("context")
    entities = context.get("entities") if isinstance(context, Mapping) else None
    for entity in entities if isinstance(entities, list) else []:
        if not isinstance(entity, Mapping) or entity.get("type") != CHANNEL_ENTITY:
            continue
        channel, team = entity.get("value"), entity.get("team_id")
        if isinstance(channel, str) and channel and "/" not in channel:
            return {"channel_id": channel} | ({"team_id": team} if isinstance(team, str) else {})
    return {}


@dataclass(eq=False)
class AgentView:
    """The agent surface of one workspace; `call` is the surface's best-effort Web API call and
    `run` puts work in the background (both assistant.py's)."""

    host: Host
    settings: Callable[[], SlackAssistantConfig]  # `[slack.assistant]` as it is now (a reload)
    call: SurfaceCall
    run: Callable[[Awaitable[None]], None]
    _agent_dms: set[str] = field(default_factory=set, init=False)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict, init=False)

    # events (the ack follows the return) ------------------------------------------------------
    async def opened(self, team: str, event: Payload) -> None:
        """`app_home_opened` in the Messages tab: the DM is an agent's; its prompts, once."""
        user, channel = event.get("user"), event.get("channel")
        if not (isinstance(user, str) and user and isinstance(channel, str)
                and channel.startswith("D") and "/" not in channel + user):  # fmt: skip
            log.warning("slack: ignored an app_home_opened event without its DM and person")
            return
        dm = ConversationKey(PLATFORM, team, channel)
        now = time.time()
        if dm.id not in self._agent_dms:
            await self.host.notes.put_note(dm.id, NOTE_AGENT_DM, user, now)
            self._remember(dm.id)
        latest = await self.host.notes.note(dm.id, NOTE_EXCHANGE) or "-"
        if not await self.host.notes.add_note(dm.id, PROMPTS_SHOWN + latest, user, now):
            log.debug("slack: prompts of %s already set (%s)", dm.id, latest)
            return
        self.run(self._prompts(dm, user, self.settings()))

    async def context_changed(self, team: str, body: Payload) -> None:
        """`app_context_changed`: the channel the person looks at now, noted on the person."""
        user = viewer_of(body)
        if not user or "/" in user:
            log.warning("slack: ignored an app_context_changed event %r naming no person",
                        body.get("event_id"))  # fmt: skip
            return
        viewing = viewed_context(body.get("event") or {})
        await self.host.notes.put_note(
            person_id(team, user), NOTE_VIEWING, json.dumps(viewing), time.time()
        )

    async def _prompts(self, dm: ConversationKey, user: str, config: SlackAssistantConfig) -> None:
        viewed = await self.viewed_channel_of(dm.workspace, user)
        prompts = config.channel_prompts.get(viewed, config.suggested_prompts)
        if not prompts:
            return
        listed = [{"title": p.title, "message": p.message} for p in prompts]
        # no thread_ts: for an agent app Slack sets them for the DM's latest message (with one,
        # the call "silently fails")
        await self.call("assistant_threads_setSuggestedPrompts", channel_id=dm.channel,
                        prompts=listed, title=config.prompts_title or None)  # fmt: skip

    # the exchanges -----------------------------------------------------------------------------
    def lock(self, message: IncomingMessage) -> asyncio.Lock:
        """Held from choosing a top-level DM message's exchange until it is stored (across
        processes, the store's conditional write decides)."""
        dm = message.key.id
        if len(self._locks) >= REMEMBERED:
            self._locks = {k: v for k, v in self._locks.items() if v.locked()}
        return self._locks.setdefault(dm, asyncio.Lock())

    async def in_exchange(self, message: IncomingMessage, ts: str) -> IncomingMessage:
        """A top-level message of an agent's DM, keyed to its exchange (the open one, or a new
        one under it); any other message as it is. Opening one moves the DM's latest exchange on
        from the value read, in one conditional write: of two processes choosing at once, one
        opens it and the other, its write refused, reads that choice and joins it."""
        dm = message.key
        if dm.thread or not dm.channel.startswith("D") or not is_slack_ts(ts):
            return message
        if not await self.is_agent_dm(dm):
            return message
        while True:
            latest = await self.host.notes.note(dm.id, NOTE_EXCHANGE)
            if latest and await self._is_open(dataclasses.replace(dm, thread=latest), ts):
                exchange = dataclasses.replace(dm, thread=latest)
                break
            if await self.host.notes.swap_note(dm.id, NOTE_EXCHANGE, latest, ts, time.time()):
                exchange = dataclasses.replace(dm, thread=ts)
                break
            # another process moved it on since we read it: its choice is read next
        # by every message (a no-op but for the first), so that an exchange whose opener died
        # after choosing it, or that a message joined before its opener noted it, is an agent's
        await self.host.notes.add_note(exchange.id, NOTE_AGENT_THREAD, message.author_id,
                                       time.time())  # fmt: skip
        return dataclasses.replace(message, key=exchange)

    async def _is_open(self, exchange: ConversationKey, ts: str) -> bool:
        """Its burst is pending, or it is so new that its first message may not be stored yet
        (another process is between choosing it and storing the message) for a message typed
        within `OPENING_GRACE` of it."""
        if not await self.host.is_settled(exchange):
            return True
        if await self.host.threads.status(exchange) is not None:  # it holds messages: answered
            return False
        return float(ts) - float(exchange.thread) < OPENING_GRACE

    async def is_agent_dm(self, dm: ConversationKey) -> bool:
        if dm.id in self._agent_dms:
            return True
        if await self.host.notes.note(dm.id, NOTE_AGENT_DM) is None:
            return False
        self._remember(dm.id)
        return True

    async def viewed_channel_of(self, team: str, user: str) -> str:
        noted = await self.host.notes.note(person_id(team, user), NOTE_VIEWING)
        try:
            context: Any = json.loads(noted or "{}")
        except ValueError:
            return ""
        channel = context.get("channel_id") if isinstance(context, dict) else None
        return channel if isinstance(channel, str) else ""

    async def viewed_channel(self, exchange: ConversationKey) -> str:
        """The channel the person of an exchange's DM looks at ("" when unknown)."""
        dm = dataclasses.replace(exchange, thread="")
        user = await self.host.notes.note(dm.id, NOTE_AGENT_DM)
        return await self.viewed_channel_of(exchange.workspace, user) if user else ""

    def _remember(self, dm_id: str) -> None:
        if len(self._agent_dms) >= REMEMBERED:
            self._agent_dms.clear()
        self._agent_dms.add(dm_id)
