"""Approval cards on Discord (docs/controls.md#approve-and-deny), and their clicks.

Out: a card is one message with an action row of Approve and Deny, posted with the reply's stable
nonce (a post made again after a crash returns the earlier message). Each button's `custom_id`
names the card (its reply id) and the conversation's author part, like the Stop button's
(stop.py): a click is understood by any process, after a restart too. The card's ending edits
that message to the outcome and removes the row (an edit made twice changes nothing); a card
someone deleted gets its ending as a message of its own.

In: a press is an INTERACTION_CREATE, stored and decided (deduped by the interaction id) before
Discord is answered, as a Stop press is (`answer_click`).
"""

from __future__ import annotations

import logging

import discord

from adapters.discord.calls import call
from adapters.discord.posting import reply_reference, send_part
from adapters.discord.presses import pressed_custom_id
from adapters.discord.render import nonce_for
from bot.core.clicks import ClickKind
from bot.core.errors import MessageGone
from bot.core.events import ConversationKey, Reply

log = logging.getLogger("burstbot.discord")

PREFIXES: dict[str, ClickKind] = {"burstbot:approve:": "approve", "burstbot:deny:": "deny"}
NOT_RECORDED = "Your choice could not be recorded; press the button again."


def card_custom_id(kind: ClickKind, key: ConversationKey, card: str) -> str:
    prefix = next(p for p, k in PREFIXES.items() if k == kind)
    return f"{prefix}{card}:{key.thread}"


class ApprovalView(discord.ui.View):
    """Approve and Deny in one action row. Not dispatchable: clicks are read in
    `on_interaction` from the `custom_id` alone."""

    def __init__(self, key: ConversationKey, card: str) -> None:
        super().__init__(timeout=None)
        buttons: tuple[tuple[ClickKind, str, discord.ButtonStyle], ...] = (
            ("approve", "Approve", discord.ButtonStyle.success),
            ("deny", "Deny", discord.ButtonStyle.danger),
        )
        for kind, label, style in buttons:
            self.add_item(
                discord.ui.Button(
                    style=style, label=label, custom_id=card_custom_id(kind, key, card)
                )
            )

    def is_dispatchable(self) -> bool:
        return False


def approval_target(interaction: discord.Interaction) -> tuple[ClickKind, str, str] | None:
    """(approve or deny, the card, the conversation's author part) of a card's click; None for
    any other interaction."""
    pressed = pressed_custom_id(interaction, PREFIXES)
    if pressed is None:
        return None
    card, _, thread = pressed[1].partition(":")
    return (PREFIXES[pressed[0]], card, thread) if card.isdigit() else None


async def post_card(
    channel: discord.abc.Messageable,
    mentions: discord.AllowedMentions,
    reply: Reply,
    text: str,
    feedback: bool = False,
) -> str:
    """The card's one post (`post_reply`'s first part), with its buttons (never 👍/👎: a card is
    not an answer, so `feedback` is always False for it)."""
    assert reply.card is not None
    reference = reply_reference(reply.reply_to_message_id, reply.key.channel)
    nonce = nonce_for(reply.id, reply.key.id, 0, text)
    view = ApprovalView(reply.key, reply.card)
    return str((await send_part(channel, text, nonce, reference, mentions, view)).id)


async def end_card(
    channel: discord.abc.Messageable,
    partial: discord.PartialMessageable,
    mentions: discord.AllowedMentions,
    reply: Reply,
    text: str,
    feedback: bool = False,
) -> str:
    """The card edited to its ending, without buttons. (`feedback`: as for `post_card`.)"""
    assert reply.ends_card is not None
    message = partial.get_partial_message(int(reply.ends_card))
    try:
        await call(message.edit(content=text, allowed_mentions=mentions, view=None))
    except MessageGone:
        log.info("reply %s: its card was deleted; posting its ending anew", reply.id)
        nonce = nonce_for(reply.id, reply.key.id, 0, text)
        return str((await send_part(channel, text, nonce, None, mentions)).id)
    return reply.ends_card
