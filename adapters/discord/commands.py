"""Slash commands: `/reset` forgets the conversation so far, so the next reply starts fresh.

Discord only offers a command it has been told about: `register_commands` creates or updates
`/reset` after connecting (docs/discord.md); a failure there is logged, never fatal.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import discord
from discord import app_commands

from adapters.discord.calls import delivery_errors
from bot.core.errors import DeliveryError

log = logging.getLogger("burstbot.discord")

RESET_NAME = "reset"
RESET_DESCRIPTION = "Forget this conversation so far; my next reply starts fresh"
RESET_DONE = "History cleared: my next reply here starts fresh."
RESET_REFUSED = "Not allowed here."
RESET_FAILED = "Could not clear the history just now; please try again."

ResetHandler = Callable[[discord.Interaction], Awaitable[None]]


def command_tree(client: discord.Client, on_reset: ResetHandler) -> app_commands.CommandTree:
    """The client's one command tree, holding `/reset` (in servers and in DMs with the bot)."""
    tree = app_commands.CommandTree(client)

    @app_commands.command(name=RESET_NAME, description=RESET_DESCRIPTION)
    @app_commands.allowed_contexts(guilds=True, dms=True, private_channels=False)
    @app_commands.allowed_installs(guilds=True, users=False)
    async def reset(interaction: discord.Interaction) -> None:
        await on_reset(interaction)

    tree.add_command(reset)
    return tree


async def register_commands(client: discord.Client, tree: app_commands.CommandTree) -> None:
    """Create or update our global commands that Discord lacks or describes differently."""
    try:
        with delivery_errors():
            known = {(c.name, c.description) for c in await tree.fetch_commands()}
            application_id = client.application_id
            if application_id is None:  # known from READY; fetch_commands has refused already
                raise app_commands.MissingApplicationID
            for command in tree.get_commands(type=discord.AppCommandType.chat_input):
                if (command.name, command.description) in known:
                    continue
                payload: Any = command.to_dict(tree)  # the JSON Discord expects for a command
                await client.http.upsert_global_command(application_id, payload)
                log.info("discord: registered the /%s command", command.name)
    except (DeliveryError, discord.DiscordException) as exc:
        log.warning(
            "discord: could not register the slash commands (%s); /reset stays unavailable "
            "until the next start succeeds",
            exc,
        )
