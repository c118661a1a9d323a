"""Configuration: TOML validated by pydantic, secrets referenced by environment variable name.

The bot's own sections are in `sections.py`, the front ends' in `platforms.py`, Claude's tools in
`tools.py`, per-channel overrides in `channels.py`, the whole `Config` in `loading.py`; the rest
of the bot imports from `bot.config` itself.
"""

from bot.config.channels import ChannelConfig, ChannelToolsConfig
from bot.config.loading import (
    Config,
    Reconfigurable,
    default_config,
    load_config,
    parse_config,
    require_secret,
)
from bot.config.platforms import (
    DiscordConfig,
    SlackAssistantConfig,
    SlackConfig,
    SuggestedPrompt,
)
from bot.config.sections import (
    CHANNEL_DAILY_TOKENS,
    DAY,
    MAX_MESSAGE_CHARS,
    USER_DAILY_TOKENS,
    AccessConfig,
    AttachmentsConfig,
    DebounceConfig,
    LimitsConfig,
    PriceConfig,
    RetentionConfig,
)
from bot.config.tools import McpServerConfig, ToolsConfig

__all__ = [
    "CHANNEL_DAILY_TOKENS",
    "DAY",
    "MAX_MESSAGE_CHARS",
    "USER_DAILY_TOKENS",
    "AccessConfig",
    "AttachmentsConfig",
    "ChannelConfig",
    "ChannelToolsConfig",
    "Config",
    "DebounceConfig",
    "DiscordConfig",
    "LimitsConfig",
    "McpServerConfig",
    "PriceConfig",
    "Reconfigurable",
    "RetentionConfig",
    "SlackAssistantConfig",
    "SlackConfig",
    "SuggestedPrompt",
    "ToolsConfig",
    "default_config",
    "load_config",
    "parse_config",
    "require_secret",
]
