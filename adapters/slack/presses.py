"""A press of one of this app's Block Kit buttons: read from a `block_actions` payload, then
stored and decided before Slack hears back (`PressListener`).

Stop, 👍/👎, Approve and Deny read a press the same way: the button's value is JSON naming its
conversation, and a press counts only when that conversation is the button's own (the channel
and workspace the payload says it was pressed in). Its click id is Slack's `action_ts` with the
`trigger_id`: the same on every delivery of one press, different for each press.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.calls import call
from adapters.slack.inbound import Payload
from bot.core.errors import BurstbotError, StoreError
from bot.core.events import ConversationKey
from bot.core.frontend import Host

log = logging.getLogger("burstbot.slack")


@dataclass(frozen=True)
class Pressed:
    """Who pressed which of our buttons, where, and what its value names."""

    action: Mapping[str, Any]
    value: Mapping[str, Any]
    key: ConversationKey
    click_id: str
    clicker: str
    name: str
    channel: str
    thread: str


def pressed(body: Payload, action_ids: Collection[str]) -> Pressed | None:
    """The press of one of `action_ids` in a `block_actions` payload; None when it is not one
    we can act on (malformed, or a value naming another conversation than the button's own)."""
    actions = body.get("actions")
    user, team, container = body.get("user"), body.get("team"), body.get("container")
    if not (isinstance(actions, list) and isinstance(user, Mapping) and isinstance(team, Mapping)):
        return None
    action = next((a for a in actions if isinstance(a, Mapping)
                   and a.get("action_id") in action_ids), None)  # fmt: skip
    if action is None or not isinstance(container, Mapping):
        return None
    try:
        value = json.loads(str(action.get("value", "")))
        key = ConversationKey.parse(str(value["conversation"]))
    except (ValueError, TypeError, KeyError):
        return None
    clicker, action_ts = str(user.get("id") or ""), str(action.get("action_ts") or "")
    channel = str(container.get("channel_id") or "")
    if not (clicker and action_ts) or key.platform != "slack" or key.channel != channel:
        return None
    if key.workspace != str(team.get("id") or ""):
        return None
    name = str(user.get("name") or user.get("username") or clicker)
    click_id = f"slack:{key.workspace}:{action_ts}:{body.get('trigger_id') or clicker}"
    thread = str(container.get("thread_ts") or key.thread)
    return Pressed(action, value, key, click_id, clicker, name, channel, thread)


def shows_action(message: Mapping[str, Any], action_id: str) -> bool:
    """Whether a message (as the Web API reads it back) shows a button with `action_id`."""
    for block in message.get("blocks") or []:
        for element in block.get("elements") or [] if isinstance(block, Mapping) else []:
            if isinstance(element, Mapping) and element.get("action_id") == action_id:
                return True
    return False


class Located(Protocol):
    """Where a press was made, and by whom: where to tell the clicker."""

    @property
    def channel(self) -> str: ...
    @property
    def thread(self) -> str: ...
    @property
    def clicker_id(self) -> str: ...


class Answered(Protocol):
    @property
    def notice(self) -> str | None:
        """What the clicker alone is told (why the press changed nothing), if anything."""
        ...


P = TypeVar("P", bound=Located)


@dataclass(eq=False)
class PressListener:
    """A listener of some of our buttons: a press is stored and decided before the ack (not
    stored: no ack, so Slack shows its clicker that it failed), then the clicker alone is told
    why it changed nothing, if it did not."""

    host: Host
    _telling: set[asyncio.Task[None]] = field(default_factory=set, init=False)

    async def _decide(
        self, ack: AsyncAck, client: AsyncWebClient, press: P | None, what: str,
        decide: Callable[[P], Awaitable[Answered]],
    ) -> BoltResponse | None:  # fmt: skip
        """Bolt answers Slack when this returns: only after `decide` stored the press."""
        if press is None:
            log.warning("slack: ignored %s that names nothing of this channel", what)
            await ack()
            return None
        try:
            answer = await decide(press)
        except StoreError as exc:
            log.warning("slack: %s was not stored (%s); not acknowledged, so Slack shows its "
                        "clicker that it failed", what, exc)  # fmt: skip
            return BoltResponse(status=500, body="")
        await ack()
        if answer.notice is not None:
            task = asyncio.create_task(self._tell(client, press, answer.notice))
            self._telling.add(task)
            task.add_done_callback(self._telling.discard)
        return None

    async def _tell(self, client: AsyncWebClient, press: Located, notice: str) -> None:
        """The clicker alone sees why nothing happened (best effort: the press is decided)."""
        request = client.chat_postEphemeral(
            channel=press.channel, user=press.clicker_id, text=notice,
            thread_ts=press.thread or None,
        )  # fmt: skip
        try:
            await call("chat.postEphemeral", request)
        except BurstbotError as exc:
            log.info("slack: the clicker was not told why nothing happened (%s)", exc)

    async def idle(self) -> None:
        """Wait for the notices on their way (shutdown, tests)."""
        while self._telling:
            await asyncio.wait(set(self._telling))
