"""Configuration: TOML validated by pydantic, secrets referenced by environment variable name.

Every mistake becomes one `ConfigError` line naming the key (`debounce.quiet_secnds: unknown key`),
so the CLI can print it and exit 2 instead of showing a traceback.

Validation is strict: a value must already have its type (`"yes"` is not a boolean, `"0.5"` not a
number; an integer is a fine number of seconds), numbers are finite and every one has bounds, so a
typo like `1e308` seconds is refused instead of breaking the scheduler. The storage URL is never
echoed in an error past its scheme: it may hold a password.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Literal, Protocol
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from bot.core.attachments import MAX_ATTACHMENT_BYTES, MAX_REQUEST_FILE_BYTES
from bot.core.errors import ConfigError

DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_SYSTEM_PROMPT = (
    "You are burstbot, a helpful assistant in a team chat. People often send one thought as "
    "several quick messages; answer the whole burst once, briefly and in plain Markdown."
)


HOUR = 3600.0
DAY = 86_400.0
MANY = 1_000_000_000_000
"""The ceiling of counters and budgets: far above any real use, far below integer overflow."""
STORAGE_SCHEMES = ("sqlite", "postgresql", "postgres")
MAX_PARTS_PER_REPLY = 10
"""Posts one reply may become: 35,000 characters on Slack, 20,000 on Discord (about 9,000 and
5,000 tokens, several times the default `llm.max_tokens`); the rest is cut with a note."""
MAX_MESSAGE_CHARS = 16_000
"""About 4,000 tokens: half the default `llm.max_context_tokens`, so one message cannot crowd
out the rest of its burst and the history; well above Discord's 2,000 (4,000 with Nitro) and
any everyday Slack message. Longer ones are refused at arrival with `size_notice`."""
USER_DAILY_TOKENS = 500_000
"""Per person and UTC day, by default: about fifty full-context answers (a few US dollars at
Sonnet's list price), so a stranger who finds the bot cannot spend the API key without bound."""
CHANNEL_DAILY_TOKENS = 2_000_000
"""Per channel (a DM is a channel) and UTC day, by default: four busy people's worth."""
FILE_RETENTION_DAYS = 30.0
"""Downloaded file bytes are deleted after this many days by default; message text is kept."""
MAX_SUGGESTED_PROMPTS = 4  # Slack's limit for one assistant thread
MAX_PROMPT_TITLE_CHARS = 100
MAX_PROMPT_MESSAGE_CHARS = 4_000
MAX_GREETING_CHARS = 4_000
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,29}")


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class StorageConfig(Section):
    url: str = "sqlite:///burstbot.db"
    pool_size: int = Field(default=10, ge=1, le=200)
    busy_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    statement_timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    acquire_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    connect_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    keepalive_seconds: float = Field(default=10.0, ge=1, le=3600)

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, url: str) -> str:
        problem = storage_url_problem(url)
        if problem:
            raise ValueError(problem)
        return url


def storage_url_problem(url: str) -> str | None:
    """What is wrong with a storage URL, naming at most its scheme (None: nothing)."""
    scheme, separator, _ = url.partition("://")
    if not separator or not _SCHEME.fullmatch(scheme):
        return (
            "not a storage URL: use sqlite:///path or postgresql://user@host/db "
            "(the value is not shown: it may hold a password)"
        )
    if scheme not in STORAGE_SCHEMES:
        return f"unsupported scheme {scheme!r} (use sqlite:/// or postgresql://)"
    if scheme != "sqlite":
        try:
            _ = urlsplit(url).port  # a malformed host or port raises here, not at connect time
        except ValueError:
            return f"malformed {scheme} URL: check the host and port (the value is not shown)"
    return None


class DebounceConfig(Section):
    quiet_seconds: float = Field(default=1.5, ge=0, le=HOUR)
    max_wait_seconds: float = Field(default=8.0, gt=0, le=DAY)
    typing_aware: bool = True
    """Discord: wait while an author of the pending burst is typing (never past the deadline)."""
    typing_seconds: float = Field(default=10.0, gt=0, le=HOUR)
    """How long one typing notice keeps the burst open (Discord shows one for 10 seconds)."""
    adaptive: bool = True
    """Each burst's window from its authors' rhythm and the last message's shape (between the two
    bounds below); false: `quiet_seconds` for every burst."""
    min_quiet_seconds: float = Field(default=0.5, ge=0, le=HOUR)
    max_quiet_seconds: float = Field(default=5.0, ge=0, le=HOUR)
    speculate: bool = True
    """Start generating before the window closes (nothing shows or commits before the close)."""
    speculate_after_seconds: float = Field(default=0.3, ge=0, le=HOUR)
    """The silence after a burst's last message before a speculative generation may start."""

    @model_validator(mode="after")
    def _quiet_within_cap(self) -> DebounceConfig:
        _check_windows(self.quiet_seconds, self.min_quiet_seconds, self.max_quiet_seconds,
                       self.max_wait_seconds)  # fmt: skip
        return self


def _check_windows(quiet: float, low: float, high: float, cap: float, where: str = "") -> None:
    if quiet > cap:
        raise ValueError(f"{where}quiet_seconds must not exceed max_wait_seconds")
    if low > high:  # a window past max_wait_seconds is cut by the deadline, as typing's is
        raise ValueError(f"{where}min_quiet_seconds must not exceed max_quiet_seconds")


class LeaseConfig(Section):
    ttl_seconds: float = Field(default=30.0, gt=0, le=HOUR)


class EngineConfig(Section):
    max_concurrent_generations: int = Field(default=8, ge=1, le=10_000)
    poll_seconds: float = Field(default=1.0, gt=0, le=HOUR)
    busy_retry_seconds: float = Field(default=1.0, gt=0, le=HOUR)
    delivery_max_attempts: int | None = Field(default=None, ge=1, le=1000)
    """Deprecated and ignored (see `deprecations`): delivery retries for a horizon instead."""
    delivery_backoff_seconds: float = Field(default=1.0, gt=0, le=HOUR)
    delivery_backoff_max_seconds: float = Field(default=30.0, gt=0, le=HOUR)
    """The longest wait between two attempts: how soon a reply goes out after a recovery."""
    delivery_give_up_hours: float = Field(default=24.0, gt=0, le=24 * 365)
    """A reply whose delivery keeps failing (transiently) since this long is marked failed."""
    indicator_delay_seconds: float = Field(default=1.0, ge=0, le=HOUR)
    owner: str = ""
    pid_file: str = ""
    """Where `burstbot run` writes its process id for `burstbot reload` ("": nowhere)."""


class LlmConfig(Section):
    provider: Literal["anthropic", "offline"] = "anthropic"
    model: str = DEFAULT_MODEL
    api_key_env: str = "ANTHROPIC_API_KEY"
    base_url: str = ""
    max_tokens: int = Field(default=1024, ge=1, le=1_000_000)
    temperature: float | None = None  # refused with a reason: see `_no_sampling`
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    max_context_tokens: int = Field(default=8000, ge=100, le=100_000_000)
    timeout_seconds: float = Field(default=60.0, gt=0, le=DAY)
    max_retries: int = Field(default=2, ge=0, le=100)
    max_attempts: int = Field(default=3, ge=1, le=1000)
    retry_backoff_seconds: float = Field(default=2.0, ge=0, le=HOUR)
    failure_message: str = "Sorry, I couldn't answer that just now. Please try again in a moment."
    cut_note: str = "_(This answer was cut short: it reached its length limit.)_"
    """Ends a reply the model stopped at `max_tokens` ("" adds nothing)."""

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, value: float | None) -> None:
        return _no_sampling(value)


def _no_sampling(value: float | None) -> None:
    """A known key with a clear refusal instead of "unknown key": the Messages API version the
    SDK speaks (2026-10-21) answers any sampling parameter with a 400, on every model."""
    if value is not None:
        raise ValueError(
            "not supported: the Claude Messages API no longer accepts sampling parameters "
            "(temperature, top_p, top_k); remove it"
        )


class StreamingConfig(Section):
    """Replies appear as the model writes them: one message per burst, edited as it grows."""

    enabled: bool = True
    interval_seconds: float = Field(default=1.0, ge=0.05, le=HOUR)


class ConsoleConfig(Section):
    enabled: bool = True
    user_name: str = "you"


class SuggestedPrompt(Section):
    """One button of an assistant thread: `title` shows, `message` is sent as the person's."""

    title: str = Field(min_length=1, max_length=MAX_PROMPT_TITLE_CHARS)
    message: str = Field(min_length=1, max_length=MAX_PROMPT_MESSAGE_CHARS)


class SlackAssistantConfig(Section):
    """Slack's AI app surface (assistant threads): `[slack.assistant]`. Live on reload."""

    enabled: bool = True
    suggested_prompts: list[SuggestedPrompt] = Field(
        default_factory=list, max_length=MAX_SUGGESTED_PROMPTS
    )
    channel_prompts: dict[str, list[SuggestedPrompt]] = Field(default_factory=dict)
    prompts_title: str = Field(default="", max_length=MAX_PROMPT_TITLE_CHARS)
    greeting: str = Field(default="", max_length=MAX_GREETING_CHARS)
    set_title: Literal["first_message", "answer", "off"] = "first_message"
    channel_context: bool = False
    channel_context_messages: int = Field(default=20, ge=1, le=200)

    @field_validator("channel_prompts")
    @classmethod
    def _at_most_four(
        cls, prompts: dict[str, list[SuggestedPrompt]]
    ) -> dict[str, list[SuggestedPrompt]]:
        for channel, listed in prompts.items():
            if len(listed) > MAX_SUGGESTED_PROMPTS:
                raise ValueError(
                    f"{channel}: at most {MAX_SUGGESTED_PROMPTS} prompts (Slack shows no more)"
                )
        return prompts


class SlackConfig(Section):
    enabled: bool = False
    mode: Literal["socket", "http"] = "socket"
    bot_token_env: str = "SLACK_BOT_TOKEN"
    app_token_env: str = "SLACK_APP_TOKEN"
    signing_secret_env: str = "SLACK_SIGNING_SECRET"
    # one workspace with `bot_token_env`, or any number installed through "Add to Slack"
    # (adapters/slack/install.py, docs/slack.md "Distributing to several workspaces")
    install: Literal["token", "oauth"] = "token"
    client_id_env: str = "SLACK_CLIENT_ID"
    client_secret_env: str = "SLACK_CLIENT_SECRET"
    state_secret_env: str = "SLACK_STATE_SECRET"
    token_key_env: str = "BURSTBOT_TOKEN_KEY"  # Fernet keys, newest first, comma-separated
    redirect_url: str = ""  # the public URL of `redirect_path`, when the app lists several
    install_path: str = "/slack/install"
    redirect_path: str = "/slack/oauth_redirect"
    forget_on_uninstall: bool = True
    api_base_url: str = ""
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=3000, ge=0, le=65535)
    http_path: str = "/slack/events"
    http_reuse_port: bool = False
    listen_channels: list[str] = Field(default_factory=list)
    thinking_indicator: Literal["auto", "reaction", "off"] = "auto"
    thinking_reaction: str = Field(default="hourglass_flowing_sand", min_length=1)
    max_parts_per_reply: int = Field(default=MAX_PARTS_PER_REPLY, ge=1, le=100)
    assistant: SlackAssistantConfig = Field(default_factory=SlackAssistantConfig)
    # the platform's limits, shared by every conversation streaming at once (0: not paced)
    updates_per_minute: float = Field(default=50.0, ge=0, le=100_000)  # chat.update, workspace
    posts_per_minute: float = Field(default=60.0, ge=0, le=100_000)  # chat.postMessage, channel


class DiscordConfig(Section):
    enabled: bool = False
    token_env: str = "DISCORD_TOKEN"
    listen_channels: list[str] = Field(default_factory=list)
    allowed_guilds: list[str] = Field(default_factory=list)
    scope: Literal["channel", "user"] = "channel"
    allow_dms: bool = True
    mention_author: bool = True
    max_parts_per_reply: int = Field(default=MAX_PARTS_PER_REPLY, ge=1, le=100)
    shard_id: int | None = Field(default=None, ge=0, le=100_000)
    shard_count: int | None = Field(default=None, ge=1, le=100_000)
    nonce_window_seconds: float = Field(default=120.0, ge=0, le=600)
    # message posts and edits per channel, shared by every conversation streaming there (0: not
    # paced); Discord allows about five per five seconds
    edits_per_minute: float = Field(default=60.0, ge=0, le=100_000)

    @model_validator(mode="after")
    def _shard_pair(self) -> DiscordConfig:
        if (self.shard_id is None) != (self.shard_count is None):
            raise ValueError("shard_id and shard_count must be set together")
        if self.shard_count is not None and (self.shard_id or 0) >= self.shard_count:
            raise ValueError("shard_id must be less than shard_count")
        return self


class CatchUpConfig(Section):
    """Fetching what was sent while no process listened (start, reconnects)."""

    enabled: bool = True
    max_age_hours: float = Field(default=24.0, gt=0)
    max_pages: int = Field(default=10, ge=1)
    max_requests: int = Field(default=1000, ge=1)


class RetentionConfig(Section):
    """Deleting old stored data (`bot/ops/retention.py`); 0 keeps it."""

    max_age_days: float = Field(default=0, ge=0, le=36_500)
    """Answered text, settled replies and generation records (and their files)."""
    file_max_age_days: float = Field(default=FILE_RETENTION_DAYS, ge=0, le=36_500)
    """Downloaded file bytes only: a later burst that shows one again fetches it again."""
    sweep_seconds: float = Field(default=HOUR, gt=0, le=DAY)


class LoggingConfig(Section):
    format: Literal["plain", "json"] = "plain"
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING"
    redact_env: list[str] = Field(default_factory=list)


class MetricsConfig(Section):
    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = Field(default=9464, ge=0, le=65535)


class AccessConfig(Section):
    allow_users: list[str] = Field(default_factory=list)
    block_users: list[str] = Field(default_factory=list)
    allow_channels: list[str] = Field(default_factory=list)
    block_channels: list[str] = Field(default_factory=list)
    allow_workspaces: list[str] = Field(default_factory=list)
    block_workspaces: list[str] = Field(default_factory=list)
    admin_ids: list[str] = Field(default_factory=list)
    dm_policy: Literal["open", "allowlist", "off"] = "open"


class LimitsConfig(Section):
    """Cost guards; 0 switches a limit off."""

    user_messages_per_window: int = Field(default=0, ge=0, le=MANY)
    window_seconds: float = Field(default=60.0, gt=0, le=DAY)
    user_daily_tokens: int = Field(default=USER_DAILY_TOKENS, ge=0, le=MANY)
    channel_daily_tokens: int = Field(default=CHANNEL_DAILY_TOKENS, ge=0, le=MANY)
    global_daily_tokens: int = Field(default=0, ge=0, le=MANY)
    workspace_daily_tokens: int = Field(default=0, ge=0, le=MANY)
    search_tokens: int = Field(default=3_000, ge=0, le=MANY)
    """What one web search counts against the daily token budgets: about the input tokens its
    $0.01 buys on a Sonnet model, so a budget bounds searches as it bounds tokens."""
    max_message_chars: int = Field(default=MAX_MESSAGE_CHARS, ge=0, le=MANY)
    max_burst_chars: int = Field(default=0, ge=0, le=MANY)
    max_burst_messages: int = Field(default=0, ge=0, le=MANY)
    admins_exempt: bool = True
    rate_notice: str = "You're sending messages faster than I can take them; please slow down."
    size_notice: str = "That's more text than I can take at once; please send something shorter."
    budget_notice: str = "I've reached my usage limit for today; please try again tomorrow."


class AttachmentsConfig(Section):
    """Files on messages (images, PDFs, text) sent to the model; the rest become one-line notes.

    Claude takes images up to 5 MB each and requests up to 32 MB, which base64 fills with 24 MB
    of files: `max_bytes` applies on top of the per-kind limits, `max_total_bytes` to a request."""

    enabled: bool = True
    max_bytes: int = Field(default=MAX_ATTACHMENT_BYTES, ge=1, le=MAX_REQUEST_FILE_BYTES)
    max_per_message: int = Field(default=5, ge=0, le=100)
    max_total_bytes: int = Field(default=4 * MAX_ATTACHMENT_BYTES, ge=1, le=MAX_REQUEST_FILE_BYTES)


class PriceConfig(Section):
    """One model's prices in USD per million tokens (`[prices."claude-…"]`); cache prices
    default to the usual ratios: reads a tenth of input, writes 1.25 times input."""

    input: float = Field(ge=0, le=100_000)
    output: float = Field(ge=0, le=100_000)
    cache_read: float | None = Field(default=None, ge=0, le=100_000)
    cache_write: float | None = Field(default=None, ge=0, le=100_000)
    web_search: float = Field(default=10.0, ge=0, le=100_000)
    """USD per 1,000 web searches (Anthropic bills each search on top of the tokens)."""


DOMAIN = r"^[A-Za-z0-9*][A-Za-z0-9.*/_-]{0,252}$"
"""A domain as the web search tool takes it (`example.com`, `docs.example.com/api`)."""


class ChannelToolsConfig(Section):
    """A channel's `tools` table (`[channels.tools]`): unset keys fall back to `[tools]`."""

    web_search: bool | None = None
    web_search_max_uses: int | None = Field(default=None, ge=1, le=1000)
    web_search_allowed_domains: list[str] | None = None
    web_search_blocked_domains: list[str] | None = None
    web_fetch: bool | None = None
    mcp: list[str] | None = None
    """The `[[tools.mcp]]` servers this channel may use, by name (none unless listed here)."""

    @field_validator("web_search_allowed_domains", "web_search_blocked_domains")
    @classmethod
    def _domains(cls, domains: list[str] | None) -> list[str] | None:
        return None if domains is None else _valid_domains(domains)

    @model_validator(mode="after")
    def _one_domain_list(self) -> ChannelToolsConfig:
        _exclusive_domains(self.web_search_allowed_domains, self.web_search_blocked_domains)
        return self


SERVER_NAME = r"^[a-z][a-z0-9_-]{0,31}$"
TOOL_NAME = r"^[A-Za-z0-9_-]{1,64}$"
MAX_TOOL_RESULT_CHARS = 20_000
"""A tool's result as the model reads it, by default: about 5,000 tokens, so one chatty tool
cannot crowd out the conversation (the rest is cut with a note)."""


class McpServerConfig(Section):
    """One MCP server (`[[tools.mcp]]`): a stdio command, or a Streamable HTTP URL."""

    name: str = Field(pattern=SERVER_NAME)
    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    url: str | None = None
    bearer_token_env: str | None = Field(default=None, min_length=1)
    """The environment variable holding the bearer token sent to an HTTP server."""
    allowed_tools: list[str] = Field(min_length=1)
    """The server's tools Claude may call; each must be one the server lists at start."""
    timeout_seconds: float = Field(default=60.0, gt=0, le=HOUR)
    max_result_chars: int = Field(default=MAX_TOOL_RESULT_CHARS, ge=100, le=1_000_000)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is None:
            return None
        scheme, separator, rest = url.partition("://")
        if not separator or scheme not in ("http", "https") or not rest:
            raise ValueError(f"{url!r} is not an http:// or https:// URL")
        return url

    @field_validator("allowed_tools")
    @classmethod
    def _tool_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.fullmatch(TOOL_NAME, name):
                raise ValueError(f"{name!r} is not a tool name")
        return names

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("set either command (a stdio server) or url (Streamable HTTP)")
        if self.bearer_token_env and self.url is None:
            raise ValueError("bearer_token_env is for a url server (a stdio server gets none)")
        return self


class ToolsConfig(Section):
    """Claude's tools (`[tools]`): web search and fetch, run and billed by Anthropic; and the
    MCP servers (`[[tools.mcp]]`) that channels enable by name."""

    web_search: bool = False
    web_search_max_uses: int = Field(default=3, ge=1, le=1000)
    """Searches per burst, counted across the continuations of one reply."""
    web_search_allowed_domains: list[str] = Field(default_factory=list)
    web_search_blocked_domains: list[str] = Field(default_factory=list)
    web_fetch: bool = False
    mcp: list[McpServerConfig] = Field(default_factory=list)
    max_tool_calls: int = Field(default=8, ge=1, le=100)
    """MCP tool calls per burst, across its generations."""

    @field_validator("web_search_allowed_domains", "web_search_blocked_domains")
    @classmethod
    def _domains(cls, domains: list[str]) -> list[str]:
        return _valid_domains(domains)

    @model_validator(mode="after")
    def _one_domain_list(self) -> ToolsConfig:
        _exclusive_domains(self.web_search_allowed_domains, self.web_search_blocked_domains)
        return self

    @model_validator(mode="after")
    def _servers_named_once(self) -> ToolsConfig:
        names = [server.name for server in self.mcp]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"tools.mcp: server {name!r} is defined twice")
        return self


def _valid_domains(domains: list[str]) -> list[str]:
    for domain in domains:
        if not re.fullmatch(DOMAIN, domain) or "://" in domain:
            raise ValueError(f"{domain!r} is not a domain (write example.com, no scheme)")
    return domains


def _exclusive_domains(allowed: list[str] | None, blocked: list[str] | None) -> None:
    if allowed and blocked:
        raise ValueError(
            "web_search_allowed_domains and web_search_blocked_domains cannot both be set"
        )


class ChannelConfig(Section):
    """Per-channel overrides (`[[channels]]`); unset keys fall back to the global ones."""

    platform: str
    channel: str
    quiet_seconds: float | None = Field(default=None, ge=0, le=HOUR)
    max_wait_seconds: float | None = Field(default=None, gt=0, le=DAY)
    adaptive: bool | None = None
    min_quiet_seconds: float | None = Field(default=None, ge=0, le=HOUR)
    max_quiet_seconds: float | None = Field(default=None, ge=0, le=HOUR)
    speculate: bool | None = None
    speculate_after_seconds: float | None = Field(default=None, ge=0, le=HOUR)
    system_prompt: str | None = None
    model: str | None = Field(default=None, min_length=1)
    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    temperature: float | None = None  # refused with a reason, as `llm.temperature`

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, value: float | None) -> None:
        return _no_sampling(value)

    streaming: bool | None = None
    tools: ChannelToolsConfig | None = None


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
    access: AccessConfig = AccessConfig()
    limits: LimitsConfig = LimitsConfig()
    attachments: AttachmentsConfig = AttachmentsConfig()
    streaming: StreamingConfig = StreamingConfig()
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
    def _channel_timing_consistent(self) -> Config:
        seen: set[tuple[str, str]] = set()
        for index, channel in enumerate(self.channels):
            where = f"channels.{index}"
            if (channel.platform, channel.channel) in seen:
                raise ValueError(f"{where}: {channel.platform}/{channel.channel} listed twice")
            seen.add((channel.platform, channel.channel))
            d, c = self.debounce, channel
            _check_windows(
                d.quiet_seconds if c.quiet_seconds is None else c.quiet_seconds,
                d.min_quiet_seconds if c.min_quiet_seconds is None else c.min_quiet_seconds,
                d.max_quiet_seconds if c.max_quiet_seconds is None else c.max_quiet_seconds,
                d.max_wait_seconds if c.max_wait_seconds is None else c.max_wait_seconds,
                f"{where}: ",
            )
        return self

    @model_validator(mode="after")
    def _known_servers(self) -> Config:
        known = {server.name for server in self.tools.mcp}
        for index, channel in enumerate(self.channels):
            for name in (channel.tools.mcp or []) if channel.tools else []:
                if name not in known:
                    raise ValueError(
                        f"channels.{index}.tools.mcp: unknown server {name!r} "
                        f"(define it in a [[tools.mcp]] entry)"
                    )
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
        """Every environment variable this config reads a secret from (for log redaction)."""
        slack, discord = self.slack, self.discord
        names = [self.llm.api_key_env, slack.bot_token_env, slack.app_token_env,
                 slack.signing_secret_env, discord.token_env, *self.logging.redact_env,
                 *(server.bearer_token_env or "" for server in self.tools.mcp)]  # fmt: skip
        return list(dict.fromkeys(name for name in names if name))


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


def default_config(environ: dict[str, str] | None = None) -> Config:
    """The no-config-file setup: terminal chat on ./burstbot.db; Claude if a key is set."""
    env = os.environ if environ is None else environ
    provider = "anthropic" if env.get("ANTHROPIC_API_KEY") else "offline"
    return parse_config({"llm": {"provider": provider}})


def require_secret(env_name: str, setting: str, environ: dict[str, str] | None = None) -> str:
    """Read a secret from the environment or fail with one line naming the variable."""
    env = os.environ if environ is None else environ
    value = env.get(env_name, "")
    if not value.strip():
        raise ConfigError(f"{setting}: environment variable {env_name} is not set")
    return value
