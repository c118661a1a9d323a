"""Which Discord messages count, and which conversation each belongs to.

A message counts when it comes from a person (never a bot, ours or another, nor a webhook), is a
plain message or a reply (not a join or pin notice), is in a served place (`allowed_guilds`, DMs
unless `allow_dms` is off) and is one of: a DM; a message mentioning the bot; a reply to one of
the bot's messages; a message in a thread the bot started; any message in a listened channel or a
thread under one.

Conversation key: ("discord", guild id or "dm", channel id, "" or the author id with
`scope = "user"`). A thread has its own channel id, so it is its own conversation.
"""

from __future__ import annotations

from dataclasses import dataclass

import discord

from bot.config import DiscordConfig
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey

PLATFORM = "discord"
DM_WORKSPACE = "dm"
_USER_MESSAGE_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})


@dataclass(frozen=True, slots=True)
class Routing:
    listen_channels: frozenset[int] = frozenset()
    allowed_guilds: frozenset[int] = frozenset()
    per_user: bool = False
    allow_dms: bool = True

    @classmethod
    def from_config(cls, config: DiscordConfig) -> Routing:
        return cls(
            listen_channels=_snowflakes(config.listen_channels, "discord.listen_channels"),
            allowed_guilds=_snowflakes(config.allowed_guilds, "discord.allowed_guilds"),
            per_user=config.scope == "user",
            allow_dms=config.allow_dms,
        )

    def serves(self, guild_id: int | None) -> bool:
        if guild_id is None:
            return self.allow_dms
        return not self.allowed_guilds or guild_id in self.allowed_guilds

    def counts(self, message: discord.Message, me: int) -> bool:
        """Should this new message be answered (as part of a burst)?"""
        if message.author.bot or message.webhook_id is not None or message.author.id == me:
            return False
        if message.type not in _USER_MESSAGE_TYPES:
            return False
        if not self.serves(message.guild.id if message.guild else None):
            return False
        channel = message.channel
        if message.guild is None:
            return True
        if any(user.id == me for user in message.mentions) or _replies_to(message, me):
            return True
        if isinstance(channel, discord.Thread):
            return channel.owner_id == me or channel.parent_id in self.listen_channels
        return channel.id in self.listen_channels

    def key(self, guild_id: int | None, channel_id: int, author_id: int | None) -> ConversationKey:
        thread = str(author_id) if self.per_user and author_id is not None else ""
        workspace = str(guild_id) if guild_id is not None else DM_WORKSPACE
        return ConversationKey(PLATFORM, workspace, str(channel_id), thread)

    def key_of(self, message: discord.Message) -> ConversationKey:
        guild_id = message.guild.id if message.guild else None
        return self.key(guild_id, message.channel.id, message.author.id)


def message_text(message: discord.Message) -> str:
    """What the model reads: mentions shown as names (files travel as attachments)."""
    return message.clean_content if message.content else ""


def _replies_to(message: discord.Message, me: int) -> bool:
    reference = message.reference
    if reference is None:
        return False
    replied = reference.resolved if reference.resolved is not None else reference.cached_message
    return isinstance(replied, discord.Message) and replied.author.id == me


def _snowflakes(values: list[str], setting: str) -> frozenset[int]:
    for value in values:
        if not str(value).strip().isdigit():
            raise ConfigError(f"{setting}: {value!r} is not a Discord id (enable Developer Mode, "
                              "then right-click → Copy ID)")  # fmt: skip
    return frozenset(int(value) for value in values)
