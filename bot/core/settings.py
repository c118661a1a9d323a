"""The core's settings: plain values the composition root builds from the config (bot/wiring.py),
so the core never reads the config model (nor the Slack and Discord sections beside its own)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from bot.core.events import ConversationKey
from bot.core.quiet_window import DEFAULT_MODEL, AdaptiveWindow, WindowModel
from bot.core.store import Timing

MAX_REQUEST_FILE_BYTES = 24 * 1024 * 1024
"""Files one model request may carry: base64 makes them a third larger, and Claude takes 32 MB."""
MAX_ATTACHMENT_BYTES = 5 * 1024 * 1024
"""Per file, by default: Claude's limit for one image (PDFs may be larger)."""
APPROVAL_TIMEOUT_SECONDS = 900.0
"""How long an approval card waits for Approve or Deny before it expires (`[tools]`)."""


@dataclass(frozen=True, slots=True)
class AttachmentLimits:
    """Files on messages sent to the model (`[attachments]`); the rest become one-line notes."""

    enabled: bool = True
    max_bytes: int = MAX_ATTACHMENT_BYTES
    max_per_message: int = 5
    max_total_bytes: int = 4 * MAX_ATTACHMENT_BYTES


@dataclass(frozen=True, slots=True)
class WebTools:
    """The server tools a conversation's model may use (`[tools]`, per channel)."""

    web_search: bool = False
    max_uses: int = 3  # searches per burst, across continuations
    allowed_domains: tuple[str, ...] = ()
    blocked_domains: tuple[str, ...] = ()
    web_fetch: bool = False
    mcp: tuple[str, ...] = ()  # the MCP servers (`[[tools.mcp]]` names) the channel enabled
    max_tool_calls: int = 8  # MCP tool calls per burst, across its generations

    @property
    def any(self) -> bool:
        return self.web_search or self.web_fetch


NO_TOOLS = WebTools()


@dataclass(frozen=True, slots=True)
class Voice:
    """How a conversation is answered: its system prompt and model settings (per channel).
    None leaves a setting to the replier's own default."""

    system: str
    model: str | None = None
    max_tokens: int | None = None
    tools: WebTools = NO_TOOLS


@dataclass(frozen=True, slots=True)
class ChannelSettings:
    """One channel's `[[channels]]` entry: the `EngineSettings` it sets in place of the global
    values, by field name (its tools resolved at wiring)."""

    platform: str
    channel: str
    overrides: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CatchUpSettings:
    enabled: bool = True
    max_age_seconds: float = 24 * 3600.0
    max_pages: int = 10  # pages a front end reads per conversation and pass
    retry_seconds: float = 2.0  # first wait after a failure that names no Retry-After; doubles
    max_retry_seconds: float = 300.0
    attempts: int = 6  # tries of one platform read before its run fails (and is run again)
    max_requests: int = 1000  # platform calls a pass may spend, most recently active first
    progress_every: int = 100  # conversations checked between two progress lines


DEFAULT_SYSTEM_PROMPT = (
    "You are burstbot, a helpful assistant in a team chat. People often send one thought as "
    "several quick messages; answer the whole burst once, briefly and in plain Markdown."
)


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Every default here is the documented one: the config model takes its defaults from these
    fields (bot/config/sections.py), so a key's default is declared once."""

    quiet_seconds: float = 1.5
    max_wait_seconds: float = 8.0
    adaptive: bool = True
    min_quiet_seconds: float = 0.5
    max_quiet_seconds: float = 5.0
    speculate: bool = True
    speculate_after_seconds: float = 0.3
    window_model: WindowModel = DEFAULT_MODEL  # fitted, not a setting (bot/core/quiet_window.py)
    lease_ttl_seconds: float = 30.0
    max_concurrent_generations: int = 1_000  # an operator's cap: the API's limits bind first
    # (bot/core/admission.py); the SDK's connection pool holds 1,000 streams
    poll_seconds: float = 1.0
    busy_retry_seconds: float = 1.0
    delivery_backoff_seconds: float = 1.0
    delivery_backoff_max_seconds: float = 30.0
    delivery_give_up_hours: float = 24.0
    indicator_delay_seconds: float = 1.0
    model_max_attempts: int = 3
    model_backoff_seconds: float = 2.0
    backoff_jitter: float = 0.5  # share of each model, delivery and store retry wait drawn at
    # random, so retriers that failed together do not return together (0: exact waits)
    failure_message: str = "Sorry, I couldn't answer that just now. Please try again in a moment."
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    max_context_tokens: int = 8000
    streaming: bool = True  # needs a front end that can draft (see `bot.core.streaming`)
    streaming_interval_seconds: float = 1.0
    feedback: bool = True  # answers carry 👍/👎 buttons (bot/core/votes.py)
    channels: tuple[ChannelSettings, ...] = ()
    attachments: AttachmentLimits = field(default_factory=AttachmentLimits)
    model: str | None = None  # None: the replier's own (`[llm] model` and `max_tokens`)
    max_tokens: int | None = None
    tools: WebTools = field(default_factory=WebTools)

    def for_conversation(self, key: ConversationKey) -> EngineSettings:
        """These settings with the conversation's `[[channels]]` entry's in place, if it has one."""
        for channel in self.channels:
            if channel.platform == key.platform and channel.channel == key.channel:
                return replace(self, **channel.overrides)
        return self

    @property
    def timing(self) -> Timing:
        adaptive = AdaptiveWindow(self.min_quiet_seconds, self.max_quiet_seconds, self.window_model)
        return Timing(self.quiet_seconds, self.max_wait_seconds,
                      adaptive if self.adaptive else None, self._speculate_after())  # fmt: skip

    def _speculate_after(self) -> float | None:
        """The early start's delay, or None: no speculation. Never where the model may run a paid
        server tool (web search or fetch): a speculation could not run one before the close, and
        one offered only after it would answer differently (G4)."""
        if not self.speculate or self.tools.any:
            return None
        return self.speculate_after_seconds

    def timing_for(self, key: ConversationKey) -> Timing:
        """Debounce for one conversation: its channel's `[[channels]]` overrides, else global."""
        return self.for_conversation(key).timing

    def voice_for(self, key: ConversationKey) -> Voice:
        """System prompt, model, max_tokens and tools: the channel's, else the global ones."""
        own = self.for_conversation(key)
        return Voice(own.system_prompt, own.model, own.max_tokens, own.tools)

    def feedback_for(self, key: ConversationKey) -> bool:
        """👍/👎 buttons on answers: the channel's `[[channels]]` override, else global."""
        return self.for_conversation(key).feedback

    def streams(self, key: ConversationKey) -> bool:
        """Streaming for one conversation: its channel's `[[channels]]` override, else global."""
        return self.for_conversation(key).streaming
