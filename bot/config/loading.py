"""The whole config (`Config`), read from TOML and turned into one-line errors; secrets by name.

Every mistake becomes one `ConfigError` line naming the key (`debounce.quiet_secnds: unknown key`),
so the CLI can print it and exit 2 instead of showing a traceback.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, Field, ValidationError, model_validator

from bot.config.channels import ChannelConfig, check_channels
from bot.config.platforms import DiscordConfig, SlackConfig
from bot.config.sections import (
    AccessConfig,
    AttachmentsConfig,
    CatchUpConfig,
    ConsoleConfig,
    DebounceConfig,
    EngineConfig,
    FeedbackConfig,
    LeaseConfig,
    LimitsConfig,
    LlmConfig,
    LoggingConfig,
    MetricsConfig,
    PriceConfig,
    RetentionConfig,
    Section,
    StorageConfig,
    StreamingConfig,
    TelemetryConfig,
    WebConfig,
)
from bot.config.tools import ToolsConfig
from bot.core.errors import ConfigError
from bot.core.secrets import remember_secret

ENV_SUFFIX = "_env"
"""A field whose name ends so holds the name of an environment variable holding a secret."""


class Config(Section):
    storage: StorageConfig = StorageConfig()
    debounce: DebounceConfig = DebounceConfig()
    lease: LeaseConfig = LeaseConfig()
    engine: EngineConfig = EngineConfig()
    llm: LlmConfig = LlmConfig()
    console: ConsoleConfig = ConsoleConfig()
    slack: SlackConfig = SlackConfig()
    discord: DiscordConfig = DiscordConfig()
    catch_up: CatchUpConfig = CatchUpConfig()
    retention: RetentionConfig = RetentionConfig()
    logging: LoggingConfig = LoggingConfig()
    metrics: MetricsConfig = MetricsConfig()
    web: WebConfig = WebConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    access: AccessConfig = AccessConfig()
    limits: LimitsConfig = LimitsConfig()
    attachments: AttachmentsConfig = AttachmentsConfig()
    streaming: StreamingConfig = StreamingConfig()
    feedback: FeedbackConfig = FeedbackConfig()
    tools: ToolsConfig = ToolsConfig()
    channels: list[ChannelConfig] = Field(default_factory=list)
    prices: dict[str, PriceConfig] = Field(default_factory=dict)
    """Added to (or replacing entries of) the built-in table in `bot/ops/usage.py`."""

    @model_validator(mode="after")
    def _retention_outlives_catch_up(self) -> Config:
        days, catch_up = self.retention.max_age_days, self.catch_up
        if days and catch_up.enabled and days * 24 <= catch_up.max_age_hours:
            raise ValueError(
                "retention.max_age_days must be longer than catch_up.max_age_hours, or catch-up "
                "would fetch deleted messages again as new ones"
            )
        return self

    @model_validator(mode="after")
    def _channels_consistent(self) -> Config:
        check_channels(self.channels, self.debounce, self.tools.mcp)
        return self

    def deprecations(self) -> list[str]:
        """Keys still accepted but ignored: one line each, logged when the config is used."""
        if self.engine.delivery_max_attempts is None:
            return []
        return [
            "engine.delivery_max_attempts is deprecated and ignored: delivery now retries a "
            "transient failure for engine.delivery_give_up_hours; remove the key"
        ]

    def secret_env_names(self) -> list[str]:
        """Every environment variable this config reads a secret from: the value of each field
        named `*_env`, in any section, list (`[[tools.mcp]]`, `[[channels]]`) or table. Derived
        from the model, so a new secret setting is redacted from the logs without a list to keep
        (bot/ops/logs.py)."""
        return list(dict.fromkeys(_env_names(self)))


def _env_names(value: object) -> Iterator[str]:
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            field = getattr(value, name)
            if not name.endswith(ENV_SUFFIX):
                yield from _env_names(field)
            elif isinstance(field, str):
                yield from (field,) if field else ()  # "": that secret is not used
            elif isinstance(field, list | tuple):
                yield from (str(item) for item in field if item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _env_names(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _env_names(item)


class Reconfigurable(Protocol):
    """A front end whose own section is partly live: a reload hands it the new config (a
    front-end ability, declared and checked at wiring as those in `bot/core/frontend.py`)."""

    def reconfigure(self, config: Config) -> None: ...


def parse_config(data: dict[str, object]) -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "config"
        if error["type"] == "extra_forbidden":
            raise ConfigError(f"{where}: unknown key") from None
        message = str(error["msg"]).removeprefix("Value error, ")
        if not error["loc"]:
            raise ConfigError(message) from None
        raise ConfigError(f"{where}: {message}") from None


def load_config(path: str | Path) -> Config:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config ({exc.strerror})") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    return parse_config(data)


def default_config() -> Config:
    """The no-config-file setup: terminal chat on ./burstbot.db; Claude if a key is set."""
    provider = "anthropic" if os.environ.get("ANTHROPIC_API_KEY") else "offline"
    return parse_config({"llm": {"provider": provider}})


def require_secret(env_name: str, setting: str, environ: Mapping[str, str] | None = None) -> str:
    """Read a secret from the environment or fail with one line naming the variable; from now
    on the value is redacted wherever this process writes text (bot/core/secrets.py)."""
    env = os.environ if environ is None else environ
    value = env.get(env_name, "")
    if not value.strip():
        raise ConfigError(f"{setting}: environment variable {env_name} is not set")
    remember_secret(value)
    return value
