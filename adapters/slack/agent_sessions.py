"""Slack agent sessions: a thread's answer shows as Slack's own "processing" session, with Slack's
own Stop by it, instead of our Stop button (docs/controls.md, "On Slack").

Out: the session's status is the thinking indicator's (bot/core/indicator.py): on is
`agents.sessions.setStatus` `processing`, off is `active`. It keeps the indicator's rules: it is
recorded in the store before it is shown, coalesced (one on, one off per burst), ordered per
conversation, taken down by whoever posts the reply (another process too), run in the
background, and best effort: a failing call is logged once and the answer goes on, with the
thinking reaction (or assistant status) instead. The calls share the workspace's pacer
(outbound.py, `SESSION_STATUS`): `processing` only when the budget has a spare call now (else
the reaction shows instead), `active` in its turn, and a 429 holds both for its Retry-After.
Before `processing` is set, the message it goes on for is noted on the conversation
(`NOTE_SESSION`): a stop of the session names that message, so it stops the burst that message
is in, and only while it is pending.

Where: sessions are thread-based, so a thread (a mention's thread in a channel, a thread in a
DM); a top-level DM or a listened channel's top level has none. Whether the workspace has them
is learnt from Slack's answers: an error code that is not about one conversation or an outage
(the app is not declared an agent, a missing scope, an unknown method) turns them off in that
workspace until a restart; the warning that the app does not subscribe to
`agent_session_stopped` leaves the status on but keeps our Stop button (Slack's would do
nothing). A draft carries our Stop button unless a session is known to serve its conversation
(`serves_stop`): the first answers after a start, before Slack first answered, show both.

In: `agent_session_stopped` (over HTTP or Socket Mode) is a click (G16): stored and decided
(`Host.click`) before it is acknowledged, with an id made of what the event names (team, channel,
thread, `event_ts`), the same on every redelivery, so it counts once. A store failure raises:
Slack delivers the event again. A refused or late stop is told to the presser alone
(`chat.postEphemeral`), after the ack. Slack does not move the session on by itself; the stopped
answer's reply takes the indicator, and with it the session, down to `active`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from adapters.slack.calls import call, slack_code
from adapters.slack.inbound import PLATFORM, Payload, is_slack_ts
from adapters.slack.outbound import SESSION_STATUS, Outbound
from bot.core.clicks import Click
from bot.core.errors import BurstbotError, DeliveryError, RateLimited, StoreError
from bot.core.events import ConversationKey
from bot.core.frontend import Host

log = logging.getLogger("burstbot.slack")

METHOD = SESSION_STATUS
NOTE_SESSION = "agent_session"  # the message the session's "processing" went on for
NO_STOP_EVENTS = "missing_agent_session_stopped_event_subscription"
ONE_CONVERSATION = frozenset(
    {"channel_not_found", "thread_not_found", "not_in_channel", "is_archived",
     "invalid_arguments", "invalid_thread_ts", "user_not_in_channel"}
)  # fmt: skip
"""Codes that say the session cannot be had in this conversation, not in the whole workspace."""
OUTAGE = frozenset({"internal_error", "fatal_error", "service_unavailable", "request_timeout"})
NAME_LOOKUP_SECONDS = 1.0  # users.info before the ack: bounded, the id stands in after it
REMEMBERED = 10_000  # conversations refused a session, remembered per process


@dataclass(eq=False)
class AgentSessions:
    """One workspace's agent sessions (one bot token)."""

    outbound: Outbound  # the workspace's client and pacer
    host: Host
    accepted: bool | None = None  # Slack took a status here (None: not asked yet)
    stoppable: bool = True  # ... and its Stop reaches us (the app subscribes to the event)
    _refused: set[str] = field(default_factory=set, init=False)  # conversations without one
    _logged: set[str] = field(default_factory=set, init=False)  # what was logged once
    _names: dict[str, str] = field(default_factory=dict, init=False)
    _telling: set[asyncio.Task[None]] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self.client = self.outbound.client
        self.team_id = self.outbound.identity.team_id

    def applies(self, key: ConversationKey) -> bool:
        """A session may show this conversation's status (not known to be refused)."""
        return bool(key.thread) and self.accepted is not False and key.id not in self._refused

    def serves_stop(self, key: ConversationKey) -> bool:
        """Slack's session Stop serves this conversation: its drafts need no Stop button."""
        return self.applies(key) and self.accepted is True and self.stoppable

    # out: the status ----------------------------------------------------------------------------
    async def show(self, key: ConversationKey, busy: bool, message_id: str) -> bool:
        """The indicator's on (`processing`, for the burst `message_id` is in) or off (`active`);
        False when the session did not take it (the caller shows its indicator instead)."""
        if not self.applies(key):
            return False
        pacer, team = self.outbound.pacer, self.team_id
        if busy and not pacer.try_take(METHOD, team):
            self._once("budget", logging.INFO, "slack: no %s budget now in workspace %s; a "
                       "reaction shows instead", METHOD, team)  # fmt: skip
            return False
        try:
            if busy:
                await self.host.notes.put_note(key.id, NOTE_SESSION, message_id, time.time())
            else:
                await pacer.take(METHOD, team)  # the session must not stay "processing"
            status = "processing" if busy else "active"
            request = self.client.agents_sessions_setStatus(
                channel_id=key.channel, thread_ts=key.thread, status=status
            )
            response = await self.outbound.paced(METHOD, team, METHOD, request)
        except DeliveryError as exc:
            self._failed(key, exc)
            return False
        except StoreError as exc:  # not noted: a stop could not name the burst
            pacer.refund(METHOD, team)
            self._once("store", logging.WARNING, "slack: %s not set in %s (%s)", METHOD, key.id,
                       exc)  # fmt: skip
            return False
        if self.accepted is not True:
            self.accepted = True
            log.info("slack: agent sessions in workspace %s: threads show Slack's Stop",
                     self.team_id)  # fmt: skip
        if NO_STOP_EVENTS in str(response.get("warning") or "") and self.stoppable:
            self.stoppable = False
            log.warning("slack: %s warns %s: answers keep the Stop button (subscribe the app to "
                        "agent_session_stopped: adapters/slack/manifest.yml)", METHOD,
                        NO_STOP_EVENTS)  # fmt: skip
        return True

    def _failed(self, key: ConversationKey, exc: DeliveryError) -> None:
        code = slack_code(exc)
        if isinstance(exc, RateLimited) or not code or code in OUTAGE:
            self._once("outage", logging.WARNING, "slack: %s failed in %s (%s); the answer goes "
                       "on", METHOD, key.id, exc)  # fmt: skip
        elif code in ONE_CONVERSATION:
            if len(self._refused) >= REMEMBERED:
                self._refused.clear()
            self._refused.add(key.id)
            self._once(code, logging.INFO, "slack: %s refused in %s (%s); the Stop button "
                       "stays there", METHOD, key.id, code)  # fmt: skip
        else:
            self.accepted = False  # the usual answer where the app is no agent: not a fault
            log.info("slack: %s refused (%s): no agent sessions in workspace %s; answers "
                        "show the Stop button (docs/slack.md, agent sessions)", METHOD, code,
                        self.team_id)  # fmt: skip

    def _once(self, kind: str, level: int, message: str, *args: object) -> None:
        """Logged at `level` the first time, at debug after."""
        log.log(logging.DEBUG if kind in self._logged else level, message, *args)
        self._logged.add(kind)

    # in: the stop -------------------------------------------------------------------------------
    async def stopped(self, body: Payload) -> None:
        """`agent_session_stopped`: stored and decided before Bolt acks (see the module)."""
        event = body.get("event") or {}
        channel, thread = str(event.get("channel") or ""), str(event.get("thread_ts") or "")
        user, event_ts = str(event.get("user") or ""), str(event.get("event_ts") or "")
        team = str(body.get("team_id") or event.get("team") or self.team_id)
        if not (channel and user and is_slack_ts(thread) and is_slack_ts(event_ts)):
            log.warning("slack: ignored a malformed agent_session_stopped event %r",
                        body.get("event_id"))  # fmt: skip
            return
        key = ConversationKey(PLATFORM, team, channel, thread)
        target = await self.host.notes.note(key.id, NOTE_SESSION) or ""
        name = await self._name(user)
        click_id = f"slack:{team}:{channel}:{thread}:session-stop:{event_ts}"
        answer = await self.host.click(Click(click_id, key, "stop", target, user, name))
        if answer.notice is not None:
            task = asyncio.create_task(self._tell(key, user, answer.notice))
            self._telling.add(task)
            task.add_done_callback(self._telling.discard)

    async def _name(self, user: str) -> str:
        """The presser's name for the stopped line (`users.info`, bounded; else their user id:
        a `<@U…>` mention would not survive the reply's rendering, which escapes every `<` so
        that no text pings anyone)."""
        if user in self._names:
            return self._names[user]
        try:
            async with asyncio.timeout(NAME_LOOKUP_SECONDS):
                info = await call("users.info", self.client.users_info(user=user))
        except (DeliveryError, TimeoutError) as exc:
            log.info("slack: no name for %s (%s); the stop names them by their id", user, exc)
            return user
        found = info.get("user")
        found = found if isinstance(found, Mapping) else {}
        profile = found.get("profile")
        profile = profile if isinstance(profile, Mapping) else {}
        names = (profile.get("display_name"), profile.get("real_name"), found.get("name"))
        name = next((str(n) for n in names if n), user)
        if len(self._names) >= REMEMBERED:
            self._names.clear()
        self._names[user] = name
        return name

    async def _tell(self, key: ConversationKey, user: str, notice: str) -> None:
        """The presser alone sees why nothing happened (best effort: the stop is decided)."""
        request = self.client.chat_postEphemeral(
            channel=key.channel, user=user, text=notice, thread_ts=key.thread
        )
        try:
            await call("chat.postEphemeral", request)
        except BurstbotError as exc:
            log.info("slack: the presser was not told why nothing stopped (%s)", exc)

    async def idle(self) -> None:
        """Wait for the notices on their way (shutdown, tests)."""
        while self._telling:
            await asyncio.wait(set(self._telling))
