"""A press of one of this bot's Discord buttons: which button (its `custom_id`, read in the
client's `on_interaction`), and Discord's answer once the press is stored and decided: a deferred
update when there is nothing to say, else one line the clicker alone sees."""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

import discord

from adapters.discord.calls import call
from bot.core.errors import DeliveryError

log = logging.getLogger("burstbot.discord")


def pressed_custom_id(
    interaction: discord.Interaction, prefixes: Collection[str]
) -> tuple[str, str] | None:
    """(prefix, the rest of the id) of a press of a button whose `custom_id` starts with one of
    `prefixes`; None for any other interaction (a slash command, someone else's component)."""
    if interaction.type is not discord.InteractionType.component:
        return None
    data: Any = interaction.data or {}
    custom_id = data.get("custom_id")
    if not isinstance(custom_id, str):
        return None
    prefix = next((p for p in prefixes if custom_id.startswith(p)), None)
    return None if prefix is None else (prefix, custom_id.removeprefix(prefix))


async def respond(interaction: discord.Interaction, notice: str | None) -> None:
    """A deferred update (type 6) when there is nothing to say, else the ephemeral notice (type 4,
    flags 64). A repeat delivery's answer is refused by Discord (acknowledged already): fine."""
    try:
        if notice is None:
            await call(interaction.response.defer())
        else:
            await call(interaction.response.send_message(notice, ephemeral=True))
    except DeliveryError as exc:  # the decision stands; only this answer is lost
        log.info("discord: press %s not answered (%s)", interaction.id, exc)
