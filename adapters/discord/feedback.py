"""👍/👎 on Discord answers (docs/controls.md#feedback), and their presses (G16 in
docs/design.md).

An answer that carries the buttons (`Reply.feedback`) shows them on its last part: one action row
with two buttons, whose `custom_id`s name the answer (its reply id), the vote, and the part of the
conversation key Discord does not give back (the author, with `scope = "user"`); the guild and
channel come with the interaction. So a press needs nothing kept in memory. Presses are read in
the client's `on_interaction` (as Stop's are), not by discord.py's view store.

A press is stored and decided (`Host.vote`, one transaction, deduped by the interaction id, which
a gateway replay repeats; ordered by the time in that id) before Discord is answered, within its
3 s: a counted vote gets a one-line thanks only the clicker sees (a button shows no state of its
own); a repeat delivery or an older press than the vote standing, a deferred update (nothing to
say); a press on an answer that takes no votes, its notice, ephemeral. A press the store could not
take is answered with an ephemeral error and logged: pressing again is a new press.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import discord

from adapters.discord.presses import pressed_custom_id, respond
from bot.core.clicks import Click
from bot.core.events import ConversationKey, Reply
from bot.core.votes import (
    THUMBS,
    VOTE_VALUES,
    Vote,
    VoteAnswer,
    VoteValue,
    thanks,
    vote_target,
    vote_value,
)

log = logging.getLogger("burstbot.discord")

VOTE_PREFIX = "burstbot:vote:"
NOT_RECORDED = "Your vote could not be recorded; press the button again."
Decide = Callable[[Vote], Awaitable[VoteAnswer]]


class FeedbackButtons(discord.ui.View):
    """One action row with 👍 and 👎. Not dispatchable: discord.py keeps no view for the message
    (presses are read in `on_interaction`, from the `custom_id` alone)."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(timeout=None)
        for value in VOTE_VALUES:
            self.add_item(
                discord.ui.Button(
                    style=discord.ButtonStyle.secondary,
                    emoji=THUMBS[value],
                    custom_id=vote_custom_id(reply.key, reply.id, value),
                )
            )

    def is_dispatchable(self) -> bool:
        return False


def vote_custom_id(key: ConversationKey, reply_id: str, value: VoteValue) -> str:
    """A button's id: the answer, the vote, then the conversation's author part ("" if shared)."""
    return f"{VOTE_PREFIX}{reply_id}:{value}:{key.thread}"


def vote_button(interaction: discord.Interaction) -> tuple[str, VoteValue, str] | None:
    """(reply id, vote, conversation author part) of a press of a vote button; None for any
    other interaction."""
    pressed = pressed_custom_id(interaction, (VOTE_PREFIX,))
    if pressed is None:
        return None
    reply_id, _, rest = pressed[1].partition(":")
    named, _, thread = rest.partition(":")
    value = vote_value(named)
    return (reply_id, value, thread) if reply_id and value else None


def pressed_vote(
    interaction: discord.Interaction, key: ConversationKey, reply_id: str, value: VoteValue
) -> Vote:
    """The vote of a press: its id is the interaction's, its time the one that id encodes."""
    user = interaction.user
    click = Click(str(interaction.id), key, "vote", vote_target(reply_id, value),
                  str(user.id), user.display_name)  # fmt: skip
    pressed_at = discord.utils.snowflake_time(interaction.id).timestamp()
    return Vote(click, reply_id, value, pressed_at)


async def answer_vote(interaction: discord.Interaction, vote: Vote, decide: Decide) -> None:
    """Store and decide the press, then answer Discord: never the other way round."""
    try:
        answer = await decide(vote)
    except Exception:  # the clicker sees it failed, instead of a vote silently not counted
        log.exception("discord: the vote %s in %s was not recorded", vote.click.click_id,
                      vote.click.key.id)  # fmt: skip
        await respond(interaction, NOT_RECORDED)
        return
    notice = thanks(vote.value) if answer.outcome == "voted" else answer.notice
    await respond(interaction, notice)
