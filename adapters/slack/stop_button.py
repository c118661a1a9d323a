"""The Stop button on a streamed draft (docs/controls.md): Block Kit out, a click in.

Out: a draft posted with `chat.postMessage` and edited with `chat.update` shows its text as
`section` blocks and, under them, one `actions` block with the Stop button, whose value names
the draft and its conversation (what the store decides a stop against); `text` stays the
notification fallback. `chat.update` keeps a message's blocks when it is sent none, so every
draft edit sends both, and the reply that finishes the draft sends `blocks=[]`: the answer's
final text shows without the button. Native streams (assistant threads) carry no button.

In: a click arrives as a `block_actions` payload (HTTP: a signed `payload=` form; Socket Mode:
an `interactive` envelope) and is handed to the host, which stores and decides it in one
transaction, before Bolt acks (`process_before_response`, transport.py). Its id is Slack's
`action_ts` with the `trigger_id`: the same on a redelivery, so a click counts once. If it cannot
be stored the listener answers 500 (HTTP) or sends no ack (Socket Mode): Slack never retries an
interaction, and shows the clicker that it failed. A refused or late click is told to the
clicker alone (`chat.postEphemeral`), after the ack.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slack_bolt.app.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.inbound import Payload
from adapters.slack.mrkdwn import mrkdwn_sections
from adapters.slack.presses import PressListener, pressed, shows_action
from bot.core.clicks import Click, ClickAnswer
from bot.core.events import ConversationKey

STOP_ACTION = "burstbot_stop"
STOP_LABEL = "Stop"
MAX_VALUE_CHARS = 2000  # ... on a button's value


def stop_value(draft_key: str, key: ConversationKey) -> str:
    """What the button carries back: the draft it stops and that draft's conversation."""
    return json.dumps({"draft": draft_key, "conversation": key.id}, separators=(",", ":"))


def draft_blocks(shown: str, value: str) -> list[dict[str, Any]]:
    """A draft's blocks: its text (in sections of Slack's size), then the Stop button."""
    sections = mrkdwn_sections(shown)
    button = {"type": "button", "action_id": STOP_ACTION, "value": value,
              "text": {"type": "plain_text", "text": STOP_LABEL}}  # fmt: skip
    return [*sections, {"type": "actions", "elements": [button]}]


def shows_stop(message: Mapping[str, Any]) -> bool:
    """Whether a message (as the Web API reads it back) still shows the Stop button."""
    return shows_action(message, STOP_ACTION)


@dataclass(frozen=True)
class StopPress:
    """A Stop click as the payload gives it: the click, and where to tell the clicker."""

    click: Click
    channel: str
    thread: str

    @property
    def clicker_id(self) -> str:
        return self.click.clicker_id


def stop_press(body: Payload) -> StopPress | None:
    """The Stop click of a `block_actions` payload; None when it is not one we can act on."""
    press = pressed(body, (STOP_ACTION,))
    draft = "" if press is None else str(press.value.get("draft") or "")
    if press is None or not draft:
        return None
    click = Click(press.click_id, press.key, "stop", draft, press.clicker, press.name)
    return StopPress(click, press.channel, press.thread)


class StopButtons(PressListener):
    """The listener of the Stop button."""

    def listen(self, bolt: AsyncApp) -> None:
        bolt.action(STOP_ACTION)(self._on_stop)

    async def _on_stop(
        self, ack: AsyncAck, body: Payload, client: AsyncWebClient
    ) -> BoltResponse | None:
        return await self._decide(ack, client, stop_press(body), "a Stop click", self._click)

    async def _click(self, press: StopPress) -> ClickAnswer:
        return await self.host.click(press.click)
