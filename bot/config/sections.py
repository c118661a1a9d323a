"""The TOML model's sections for the bot itself: storage, timing, the model, guards, operations.

A key that the core also reads takes its default from the core's settings (`CORE`,
`bot/core/settings.py`), so each default is declared once; `[[channels]]` overrides are built
from these sections' fields (`bot/config/channels.py`).

Every section is strict (`Section`): a value must already have its type (`"yes"` is not a boolean,
`"0.5"` not a number; an integer is a fine number of seconds), numbers are finite and every one has
bounds, so a typo like `1e308` seconds is refused instead of breaking the scheduler. The storage URL
is never echoed in an error past its scheme: it may hold a password.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from bot.core.settings import (
    MAX_REQUEST_FILE_BYTES,
    AttachmentLimits,
    CatchUpSettings,
    EngineSettings,
    WebTools,
)

DEFAULT_MODEL = "claude-sonnet-5-5"
CORE = EngineSettings()
"""The core's defaults, which the sections below take as theirs."""
CORE_CATCH_UP = CatchUpSettings()
CORE_FILES = AttachmentLimits()
CORE_TOOLS = WebTools()


HOUR = 3600.0
DAY = 86_400.0
MANY = 1_000_000_000_000
"""The ceiling of counters and budgets: far above any real use, far below integer overflow."""
STORAGE_SCHEMES = ("sqlite", "postgresql", "postgres")
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
        """What is wrong with a storage URL, naming at most its scheme."""
        scheme, separator, _ = url.partition("://")
        if not separator or not _SCHEME.fullmatch(scheme):
            raise ValueError(
                "not a storage URL: use sqlite:///path or postgresql://user@host/db "
                "(the value is not shown: it may hold a password)"
            )
        if scheme not in STORAGE_SCHEMES:
            raise ValueError(f"unsupported scheme {scheme!r} (use sqlite:/// or postgresql://)")
        if scheme != "sqlite":
            try:
                _ = urlsplit(url).port  # a malformed host or port raises here, not at connect time
            except ValueError:
                raise ValueError(
                    f"malformed {scheme} URL: check the host and port (the value is not shown)"
                ) from None
        return url


class DebounceConfig(Section):
    quiet_seconds: float = Field(default=CORE.quiet_seconds, ge=0, le=HOUR)
    max_wait_seconds: float = Field(default=CORE.max_wait_seconds, gt=0, le=DAY)
    typing_aware: bool = True
    """Discord: wait while an author of the pending burst is typing (never past the deadline)."""
    typing_seconds: float = Field(default=10.0, gt=0, le=HOUR)
    """How long one typing notice keeps the burst open (Discord shows one for 10 seconds)."""
    adaptive: bool = CORE.adaptive
    """Each burst's window from its authors' rhythm and the last message's shape (between the two
    bounds below); false: `quiet_seconds` for every burst."""
    min_quiet_seconds: float = Field(default=CORE.min_quiet_seconds, ge=0, le=HOUR)
    max_quiet_seconds: float = Field(default=CORE.max_quiet_seconds, ge=0, le=HOUR)
    speculate: bool = CORE.speculate
    """Start generating before the window closes (nothing shows or commits before the close)."""
    speculate_after_seconds: float = Field(default=CORE.speculate_after_seconds, ge=0, le=HOUR)
    """The silence after a burst's last message before a speculative generation may start."""

    @model_validator(mode="after")
    def _quiet_within_cap(self) -> DebounceConfig:
        check_windows(self.quiet_seconds, self.min_quiet_seconds, self.max_quiet_seconds,
                       self.max_wait_seconds)  # fmt: skip
        return self


def check_windows(quiet: float, low: float, high: float, cap: float, where: str = "") -> None:
    if quiet > cap:
        raise ValueError(f"{where}quiet_seconds must not exceed max_wait_seconds")
    if low > high:  # a window past max_wait_seconds is cut by the deadline, as typing's is
        raise ValueError(f"{where}min_quiet_seconds must not exceed max_quiet_seconds")


class LeaseConfig(Section):
    ttl_seconds: float = Field(default=CORE.lease_ttl_seconds, gt=0, le=HOUR)


class EngineConfig(Section):
    max_concurrent_generations: int = Field(
        default=CORE.max_concurrent_generations, ge=1, le=10_000
    )
    poll_seconds: float = Field(default=CORE.poll_seconds, gt=0, le=HOUR)
    busy_retry_seconds: float = Field(default=CORE.busy_retry_seconds, gt=0, le=HOUR)
    delivery_max_attempts: int | None = Field(default=None, ge=1, le=1000)
    """Deprecated and ignored (see `deprecations`): delivery retries for a horizon instead."""
    delivery_backoff_seconds: float = Field(default=CORE.delivery_backoff_seconds, gt=0, le=HOUR)
    delivery_backoff_max_seconds: float = Field(
        default=CORE.delivery_backoff_max_seconds, gt=0, le=HOUR
    )
    """The longest wait between two attempts: how soon a reply goes out after a recovery."""
    delivery_give_up_hours: float = Field(default=CORE.delivery_give_up_hours, gt=0, le=24 * 365)
    """A reply whose delivery keeps failing (transiently) since this long is marked failed."""
    indicator_delay_seconds: float = Field(default=CORE.indicator_delay_seconds, ge=0, le=HOUR)
    owner: str = ""
    pid_file: str = ""
    """Where `burstbot run` writes its process id for `burstbot reload` ("": nowhere)."""


def no_sampling(value: float | None) -> None:
    """A known key with a clear refusal instead of "unknown key": the Messages API version the
    SDK speaks (2026-10-21) answers any sampling parameter with a 400, on every model."""
    if value is not None:
        raise ValueError(
            "not supported: the Claude Messages API no longer accepts sampling parameters "
            "(temperature, top_p, top_k); remove it"
        )


NoSampling = Annotated[float | None, AfterValidator(no_sampling)]
"""`temperature` (in `[llm]` and `[[channels]]`): refused with a reason, see `no_sampling`."""


class LlmConfig(Section):
    provider: Literal["anthropic", "offline"] = "anthropic"
    model: str = Field(default=DEFAULT_MODEL, min_length=1)
    api_key_env: str = "ANTHROPIC_API_KEY"
    base_url: str = ""
    max_tokens: int = Field(default=1024, ge=1, le=1_000_000)
    temperature: NoSampling = None
    system_prompt: str = CORE.system_prompt
    max_context_tokens: int = Field(default=CORE.max_context_tokens, ge=100, le=100_000_000)
    timeout_seconds: float = Field(default=60.0, gt=0, le=DAY)
    max_retries: int = Field(default=2, ge=0, le=100)
    max_attempts: int = Field(default=CORE.model_max_attempts, ge=1, le=1000)
    retry_backoff_seconds: float = Field(default=CORE.model_backoff_seconds, ge=0, le=HOUR)
    failure_message: str = CORE.failure_message
    cut_note: str = "_(This answer was cut short: it reached its length limit.)_"
    """Ends a reply the model stopped at `max_tokens` ("" adds nothing)."""


class StreamingConfig(Section):
    """Replies appear as the model writes them: one message per burst, edited as it grows."""

    enabled: bool = CORE.streaming
    interval_seconds: float = Field(default=CORE.streaming_interval_seconds, ge=0.05, le=HOUR)


class FeedbackConfig(Section):
    """👍/👎 buttons on answers (docs/controls.md#feedback)."""

    enabled: bool = CORE.feedback


class ConsoleConfig(Section):
    enabled: bool = True
    user_name: str = "you"


class CatchUpConfig(Section):
    """Fetching what was sent while no process listened (start, reconnects)."""

    enabled: bool = CORE_CATCH_UP.enabled
    max_age_hours: float = Field(default=CORE_CATCH_UP.max_age_seconds / HOUR, gt=0)
    max_pages: int = Field(default=CORE_CATCH_UP.max_pages, ge=1)
    max_requests: int = Field(default=CORE_CATCH_UP.max_requests, ge=1)


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


class TelemetryConfig(Section):
    """OpenTelemetry traces (bot/ops/traces.py), off by default; metrics stay on Prometheus."""

    otlp_endpoint: str = ""
    """The collector's OTLP/HTTP base URL (`http://127.0.0.1:4318`; traces go to its
    `/v1/traces`); "": no traces, and the OpenTelemetry packages are never imported."""
    record_content: bool = False
    """Put prompt, answer and tool text into spans (GenAI `gen_ai.input.messages`, ...): off,
    spans carry counts, models and outcomes only."""

    @field_validator("otlp_endpoint")
    @classmethod
    def _an_http_url(cls, value: str) -> str:
        if not value:
            return value
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                "must be an http:// or https:// URL with a host, such as http://127.0.0.1:4318"
            )
        if parts.password is not None:
            raise ValueError(
                "must not hold a password: set OTEL_EXPORTER_OTLP_HEADERS in the environment"
            )
        return value


class WebConfig(Section):
    """The operator's web page (`bot/web/`): served by `burstbot run` when enabled, and by
    `burstbot web` from the database alone. Local by default; each role logs in with its token."""

    enabled: bool = False
    host: str = Field(default="127.0.0.1", min_length=1)
    port: int = Field(default=9465, ge=0, le=65535)
    token_env: str = Field(default="BURSTBOT_WEB_TOKEN", min_length=1)
    """The operator's login token: may look and act (retry, erase)."""
    viewer_token_env: str = ""
    """The viewer's login token ("": no viewer role): may look, never act."""
    proxy_hosts: list[str] = Field(default_factory=list)
    """Host headers accepted besides `host:port`: the names an HTTPS proxy in front forwards
    (`ops.example.com`). Any other is refused (421), so a DNS-rebinding page cannot reach in."""
    session_hours: float = Field(default=12.0, gt=0, le=24 * 30)
    refresh_seconds: float = Field(default=5.0, ge=1, le=HOUR)
    """How often an open page reloads itself while what it shows can change."""
    login_attempts: int = Field(default=5, ge=1, le=1000)
    """Failed logins allowed per client address within `login_window_seconds`; then 429."""
    login_window_seconds: float = Field(default=60.0, gt=0, le=DAY)

    @model_validator(mode="after")
    def _two_tokens(self) -> WebConfig:
        if self.viewer_token_env == self.token_env:
            raise ValueError("viewer_token_env must name another variable than token_env")
        return self


class AccessConfig(Section):
    allow_users: list[str] = Field(default_factory=list)
    block_users: list[str] = Field(default_factory=list)
    allow_channels: list[str] = Field(default_factory=list)
    block_channels: list[str] = Field(default_factory=list)
    allow_workspaces: list[str] = Field(default_factory=list)
    block_workspaces: list[str] = Field(default_factory=list)
    admin_ids: list[str] = Field(default_factory=list)
    dm_policy: Literal["open", "allowlist", "off"] = "open"
    approvers: Literal["authors_and_admins", "admins"] = "authors_and_admins"
    """Who may press Approve / Deny on a tool call's card: the people whose messages asked for
    it and `admin_ids`, or `admin_ids` only."""


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

    enabled: bool = CORE_FILES.enabled
    max_bytes: int = Field(default=CORE_FILES.max_bytes, ge=1, le=MAX_REQUEST_FILE_BYTES)
    max_per_message: int = Field(default=CORE_FILES.max_per_message, ge=0, le=100)
    max_total_bytes: int = Field(
        default=CORE_FILES.max_total_bytes, ge=1, le=MAX_REQUEST_FILE_BYTES
    )


class PriceConfig(Section):
    """One model's prices in USD per million tokens (`[prices."claude-…"]`); cache prices
    default to the usual ratios: reads a tenth of input, writes 1.25 times input."""

    input: float = Field(ge=0, le=100_000)
    output: float = Field(ge=0, le=100_000)
    cache_read: float | None = Field(default=None, ge=0, le=100_000)
    cache_write: float | None = Field(default=None, ge=0, le=100_000)
    web_search: float = Field(default=10.0, ge=0, le=100_000)
    """USD per 1,000 web searches (Anthropic bills each search on top of the tokens)."""
