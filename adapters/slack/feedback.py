"""👍/👎 on Slack answers (docs/controls.md#feedback): Block Kit out, a vote in.

Out: an answer that carries the buttons (`Reply.feedback`) shows its last part as `section`
blocks and, under them, a `context_actions` block with Slack's `feedback_buttons` element; each
button's value names the answer (its reply id), its conversation and the vote. Posted with the
part (`chat.postMessage`), or with the update that finishes a streamed draft when that part is
the last: the buttons are on the answer once, whichever way it reached Slack. `text` stays the
notification fallback.

In: a press arrives as a `block_actions` payload (HTTP: a signed `payload=` form; Socket Mode: an
`interactive` envelope) and is handed to the host, which stores and decides it in one transaction,
before Bolt acks (`process_before_response`, transport.py). Its id is Slack's `action_ts` with the
`trigger_id` (the same on a redelivery, so a press counts once) and `action_ts` is its time (a
newer press replaces the person's vote, an older one does not). If it cannot be stored the
listener answers 500 (HTTP) or sends no ack (Socket Mode), and Slack shows the clicker that it
failed. A counted vote is acknowledged only (Slack's feedback buttons show the press); a press on
an answer that takes no votes is told to the clicker alone (`chat.postEphemeral`), after the ack.
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
from bot.core.clicks import Click
from bot.core.events import ConversationKey
from bot.core.votes import THUMBS, Vote, VoteAnswer, VoteValue, vote_target, vote_value

FEEDBACK_ACTION = "burstbot_feedback"
LABELS: dict[VoteValue, str] = {"up": "Good answer", "down": "Bad answer"}  # screen readers


def feedback_value(reply_id: str, key: ConversationKey, value: VoteValue) -> str:
    """What a button carries back: the answer, its conversation and the vote."""
    named = {"reply": reply_id, "conversation": key.id, "vote": value}
    return json.dumps(named, separators=(",", ":"))


def feedback_blocks(text: str, reply_id: str, key: ConversationKey) -> list[dict[str, Any]]:
    """An answer's last part with the buttons: its text (in sections of Slack's size), then the
    `context_actions` block with the `feedback_buttons` element."""
    sections = mrkdwn_sections(text)

    def button(value: VoteValue) -> dict[str, Any]:
        return {"text": {"type": "plain_text", "text": THUMBS[value]},
                "value": feedback_value(reply_id, key, value),
                "accessibility_label": LABELS[value]}  # fmt: skip

    element = {"type": "feedback_buttons", "action_id": FEEDBACK_ACTION,
               "positive_button": button("up"), "negative_button": button("down")}  # fmt: skip
    return [*sections, {"type": "context_actions", "elements": [element]}]


def shows_feedback(message: Mapping[str, Any]) -> bool:
    """Whether a message (as the Web API reads it back) shows the 👍/👎 buttons."""
    return shows_action(message, FEEDBACK_ACTION)


@dataclass(frozen=True)
class VotePress:
    """A 👍/👎 press as the payload gives it: the vote, and where to tell the clicker."""

    vote: Vote
    channel: str
    thread: str

    @property
    def clicker_id(self) -> str:
        return self.vote.click.clicker_id


def vote_press(body: Payload) -> VotePress | None:
    """The vote of a `block_actions` payload; None when it is not one we can act on."""
    press = pressed(body, (FEEDBACK_ACTION,))
    if press is None:
        return None
    try:
        reply_id = str(press.value["reply"])
        value = vote_value(str(press.value["vote"]))
        pressed_at = float(str(press.action.get("action_ts")))
    except (ValueError, TypeError, KeyError):
        return None
    if not reply_id or value is None:
        return None
    target = vote_target(reply_id, value)
    click = Click(press.click_id, press.key, "vote", target, press.clicker, press.name)
    return VotePress(Vote(click, reply_id, value, pressed_at), press.channel, press.thread)


class FeedbackButtons(PressListener):
    """The listener of the 👍/👎 buttons."""

    def listen(self, bolt: AsyncApp) -> None:
        bolt.action(FEEDBACK_ACTION)(self._on_vote)

    async def _on_vote(
        self, ack: AsyncAck, body: Payload, client: AsyncWebClient
    ) -> BoltResponse | None:
        return await self._decide(ack, client, vote_press(body), "a vote", self._vote)

    async def _vote(self, press: VotePress) -> VoteAnswer:
        return await self.host.vote(press.vote)
