"""Configuration: TOML validated by pydantic, secrets referenced by environment variable name.

- `sections.py`: the bot's own sections (storage, debounce, engine, llm, limits, …), strict types
  and bounds on every value;
- `platforms.py`: the front ends' sections (`[slack]`, `[discord]`);
- `tools.py`: Claude's tools and MCP servers;
- `channels.py`: per-channel overrides and the checks that need them with the global keys;
- `loading.py`: the whole `Config`, read from TOML into one-line `ConfigError`s, and secrets read
  from the environment by name.

The rest of the bot imports from `bot.config` itself.
"""

from bot.config.channels import ChannelConfig, ChannelToolsConfig
from bot.config.loading import Config, default_config, load_config, parse_config, require_secret
from bot.config.platforms import (
    DiscordConfig,
    Reconfigurable,
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
