"""The Stop button on a streamed Discord draft, and its clicks (G16 in docs/design.md).

The button's `custom_id` names everything a click needs: the draft it stops (the core's draft key)
and the part of the conversation key Discord does not give back (the author, with
`scope = "user"`); the guild and channel come with the interaction. So a click needs nothing kept
in memory: it is understood after a restart, by any process on the shard. Clicks are read in the
client's `on_interaction`, not by discord.py's view store (which would keep a view per message):
the view here only renders the button.

A click is input: it is stored and decided (`Host.click`, one transaction, deduped by the
interaction id, which a gateway replay repeats) before Discord is answered, within Discord's 3 s:
a stop that applied, or a repeat delivery of one already answered, gets a deferred update (the
message changes through the outbox: the stopped text, and the button removed); any other outcome
gets its one-line notice, ephemeral (the clicker alone sees it). A click the store could not take
is answered with an ephemeral error and logged: it is lost visibly, and pressing again is a new
click.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import discord

from adapters.discord.presses import pressed_custom_id, respond
from bot.core.clicks import Click, ClickAnswer
from bot.core.events import ConversationKey

log = logging.getLogger("burstbot.discord")

STOP_PREFIX = "burstbot:stop:"
STOP_LABEL = "Stop"
NOT_RECORDED = "Your stop could not be recorded; press Stop again."
Decide = Callable[[Click], Awaitable[ClickAnswer]]


class StopButton(discord.ui.View):
    """One action row with the Stop button. Not dispatchable: discord.py keeps no view for the
    message (clicks are read in `on_interaction`, from the `custom_id` alone)."""

    def __init__(self, key: ConversationKey, draft_key: str) -> None:
        super().__init__(timeout=None)
        self.add_item(
            discord.ui.Button(
                style=discord.ButtonStyle.secondary,
                label=STOP_LABEL,
                custom_id=stop_custom_id(key, draft_key),
            )
        )

    def is_dispatchable(self) -> bool:
        return False


def stop_custom_id(key: ConversationKey, draft_key: str) -> str:
    """The button's id: the draft it stops, then the conversation's author part ("" if shared)."""
    return f"{STOP_PREFIX}{draft_key}:{key.thread}"


def stop_target(interaction: discord.Interaction) -> tuple[str, str] | None:
    """(draft key, conversation author part) of a Stop button's click; None for any other
    interaction (a slash command, someone else's component)."""
    pressed = pressed_custom_id(interaction, (STOP_PREFIX,))
    if pressed is None:
        return None
    draft_key, _, thread = pressed[1].partition(":")
    return (draft_key, thread) if draft_key else None


async def answer_click(
    interaction: discord.Interaction, click: Click, decide: Decide,
    not_recorded: str = NOT_RECORDED,
) -> None:  # fmt: skip
    """Store and decide the click, then answer Discord: never the other way round."""
    try:
        answer = await decide(click)
    except Exception:  # the clicker sees it failed, instead of a click that silently did nothing
        log.exception("discord: the %s click %s in %s was not recorded", click.kind,
                      click.click_id, click.key.id)  # fmt: skip
        await respond(interaction, not_recorded)
        return
    await respond(interaction, answer.notice)
