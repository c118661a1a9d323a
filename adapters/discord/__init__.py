"""The Discord front end (discord.py): `build_discord_frontend(config)` is all the app needs."""

from __future__ import annotations

from adapters.discord.client import DiscordFrontend, gateway_intents
from bot.config import DiscordConfig, require_secret

__all__ = ["DiscordFrontend", "build_discord_frontend"]


def build_discord_frontend(config: DiscordConfig, typing_intents: bool = True) -> DiscordFrontend:
    """The front end for `config`; a missing token fails here, before anything connects.
    `typing_intents`: receive typing notices (`[debounce] typing_aware`)."""
    token = require_secret(config.token_env, "discord.token_env")
    intents = gateway_intents(typing=typing_intents)
    return DiscordFrontend(config, token=token, intents=intents)
