"""Approval cards on Slack (docs/controls.md#approve-and-deny): Block Kit out, clicks in.

Out: a card is one `chat.postMessage` labelled with its reply's metadata (found again on a
retry, like any part, so it is posted once): its text as `section` blocks, then an `actions`
block with Approve and Deny, whose values name the card (its reply id) and its conversation.
The card's ending is a `chat.update` of that message to the outcome's text with only sections:
the buttons go. An update changes nothing when made twice, so a retry after a crash is safe; a
card someone deleted gets its ending as a message of its own.

Where the conversation shows the model's steps as tasks (an assistant or agent thread: its
drafts are native streams), the card also shows the wait as a task above its text ("Waiting for
approval: *tool*", in progress; a `task_card`, in a `plan` with `task_display = "plan"`), and
its ending shows that task ended: complete when the call was approved and its result is in (a
call that ran and failed too: the ending's text does not tell them apart), error otherwise
(denied, expired, superseded, or approved with its outcome unknown), the outcome's line as its
output. The reply carries only the card's text, so both are read from it (bot/core/approvals.py
writes it: the tool in the first backquotes, the outcome last).

In: a press arrives as `block_actions` (HTTP: a signed form; Socket Mode: an `interactive`
envelope) and is stored and decided before Bolt acks, exactly as a Stop press is
(stop_button.py): its id is Slack's `action_ts` with the `trigger_id`, the same on a
redelivery; a refused, repeated or late press is told to the clicker alone, after the ack.
"""

from __future__ import annotations

import json
import re
from typing import Any

from slack_bolt.app.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.inbound import Payload, split_message_id
from adapters.slack.mrkdwn import mrkdwn_sections, to_mrkdwn
from adapters.slack.native_stream import TaskDisplay, laid_out, task_card
from adapters.slack.outbound import UPDATE, Outbound, part_metadata
from adapters.slack.presses import pressed
from adapters.slack.stop_button import StopButtons, StopPress
from bot.core.clicks import Click, ClickKind
from bot.core.errors import MessageGone
from bot.core.events import ConversationKey, Reply

APPROVE_ACTION = "burstbot_approve"
DENY_ACTION = "burstbot_deny"
KINDS: dict[str, ClickKind] = {APPROVE_ACTION: "approve", DENY_ACTION: "deny"}
WAIT_TASK = "approval"  # the card's one task: the same id from its post to its ending
TOOL = re.compile(r"`([^`\n]+)`")  # the card names `server.tool` first
RAN = "✅ Approved by"  # how an approved call's outcome line starts (bot/core/approvals.py)
UNKNOWN = "its outcome is unknown"  # ... when a crash cut it off (it may have run)


def card_value(card: str, key: ConversationKey) -> str:
    """What each button carries back: the card and its conversation."""
    return json.dumps({"card": card, "conversation": key.id}, separators=(",", ":"))


def card_blocks(text: str, value: str) -> list[dict[str, Any]]:
    """The card: its text, then Approve and Deny."""
    buttons = [
        {"type": "button", "action_id": APPROVE_ACTION, "value": value, "style": "primary",
         "text": {"type": "plain_text", "text": "Approve"}},
        {"type": "button", "action_id": DENY_ACTION, "value": value, "style": "danger",
         "text": {"type": "plain_text", "text": "Deny"}},
    ]  # fmt: skip
    return [*mrkdwn_sections(to_mrkdwn(text)), {"type": "actions", "elements": buttons}]


def wait_task(card_text: str, display: TaskDisplay | None, ended: bool) -> list[dict[str, Any]]:
    """The wait as a task card above the card's text (none where `display` is None): in
    progress while it waits; once `ended`, complete or error with the outcome's line."""
    if display is None:
        return []
    named = TOOL.search(card_text)
    tool = named.group(1).split(".", 1)[-1] if named else ""
    title = f"Waiting for approval: {tool}" if tool else "Waiting for approval"
    if not ended:
        return laid_out([task_card(WAIT_TASK, title, "in_progress")], display)
    lines = [line.strip() for line in card_text.splitlines() if line.strip()]
    outcome = lines[-1] if lines else ""
    ran = outcome.startswith(RAN) and UNKNOWN not in outcome
    shown = outcome.split(" ", 1)[-1] if outcome and not outcome[0].isalnum() else outcome
    card = task_card(WAIT_TASK, title, "complete" if ran else "error", shown)
    return laid_out([card], display)


async def post_card(
    outbound: Outbound,
    reply: Reply,
    text: str,
    feedback: bool = False,
    display: TaskDisplay | None = None,
) -> str:
    """The card's one post (`Outbound.deliver`'s first part), with its buttons (never 👍/👎: a
    card is not an answer, so `feedback` is always False for it); with `display`, the wait as a
    task above them."""
    assert reply.card is not None
    metadata = part_metadata(reply.id, 0, reply.key)
    blocks = wait_task(reply.text, display, ended=False)
    blocks += card_blocks(reply.text, card_value(reply.card, reply.key))
    return await outbound.post(reply.key, text, metadata, f"card {reply.id}", blocks=blocks)


async def end_card(
    outbound: Outbound,
    reply: Reply,
    text: str,
    feedback: bool = False,
    display: TaskDisplay | None = None,
) -> str:
    """The card edited to its ending, without buttons (with `display`, its task ended); a
    deleted card gets a message of its own. (`feedback`: as for `post_card`.)"""
    assert reply.ends_card is not None
    metadata = part_metadata(reply.id, 0, reply.key)
    channel, ts = split_message_id(reply.ends_card)
    team = outbound.identity.team_id
    await outbound.pacer.take(UPDATE, team)
    task = wait_task(reply.text, display, ended=True)
    blocks = task + mrkdwn_sections(to_mrkdwn(reply.text))
    request = outbound.client.chat_update(
        channel=channel, ts=ts, text=text, metadata=metadata, blocks=blocks
    )
    try:
        await outbound.paced(UPDATE, team, f"card ending {reply.id}", request)
    except MessageGone:
        what = f"card ending {reply.id}"
        return await outbound.post(reply.key, text, metadata, what, blocks=blocks if task else None)
    return reply.ends_card


def approval_press(body: Payload) -> StopPress | None:
    """The Approve or Deny click of a `block_actions` payload; None when it is not one we can
    act on (a value naming another conversation than the button's own)."""
    press = pressed(body, KINDS)
    if press is None:
        return None
    try:
        card = str(int(press.value["card"]))
    except (ValueError, TypeError, KeyError):
        return None
    kind = KINDS[str(press.action["action_id"])]
    click = Click(press.click_id, press.key, kind, card, press.clicker, press.name)
    return StopPress(click, press.channel, press.thread)


class ApprovalButtons(StopButtons):
    """The listener of Approve and Deny: stored and decided before the ack, like Stop."""

    def listen(self, bolt: AsyncApp) -> None:
        for action_id in KINDS:
            bolt.action(action_id)(self._on_approval)

    async def _on_approval(
        self, ack: AsyncAck, body: Payload, client: AsyncWebClient
    ) -> BoltResponse | None:
        press = approval_press(body)
        return await self._decide(ack, client, press, "an Approve or Deny click", self._click)
