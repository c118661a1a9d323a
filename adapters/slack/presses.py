"""A press of one of this app's Block Kit buttons, read from a `block_actions` payload.

Stop, 👍/👎, Approve and Deny read a press the same way: the button's value is JSON naming its
conversation, and a press counts only when that conversation is the button's own (the channel
and workspace the payload says it was pressed in). Its click id is Slack's `action_ts` with the
`trigger_id`: the same on every delivery of one press, different for each press.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from adapters.slack.inbound import Payload
from bot.core.events import ConversationKey


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
