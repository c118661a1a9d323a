"""The core's settings: plain values the composition root builds from the config (bot/wiring.py),
so the core never reads the config model (nor the Slack and Discord sections beside its own)."""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.core.attachments import AttachmentLimits
from bot.core.events import ConversationKey
from bot.core.replier import Voice, WebTools
from bot.core.store import Timing


@dataclass(frozen=True, slots=True)
class ChannelSettings:
    """One channel's `[[channels]]` overrides (None: the global value); its tools resolved."""

    platform: str
    channel: str
    quiet_seconds: float | None = None
    max_wait_seconds: float | None = None
    system_prompt: str | None = None
    model: str | None = None
    max_tokens: int | None = None
    streaming: bool | None = None
    tools: WebTools | None = None
    adaptive: bool | None = None
    min_quiet_seconds: float | None = None
    max_quiet_seconds: float | None = None
    speculate: bool | None = None
    speculate_after_seconds: float | None = None


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


@dataclass(frozen=True, slots=True)
class EngineSettings:
    quiet_seconds: float = 1.5
    max_wait_seconds: float = 8.0
    adaptive: bool = False  # `[debounce] adaptive` (on by default there)
    min_quiet_seconds: float = 0.5
    max_quiet_seconds: float = 5.0
    speculate: bool = False  # `[debounce] speculate` (on by default there)
    speculate_after_seconds: float = 0.3
    lease_ttl_seconds: float = 30.0
    max_concurrent_generations: int = 8
    poll_seconds: float = 1.0
    busy_retry_seconds: float = 1.0
    delivery_backoff_seconds: float = 1.0
    delivery_backoff_max_seconds: float = 30.0
    delivery_give_up_hours: float = 24.0
    indicator_delay_seconds: float = 1.0
    model_max_attempts: int = 3
    model_backoff_seconds: float = 2.0
    failure_message: str = "Sorry, I couldn't answer that just now."
    system_prompt: str = "You are a helpful assistant."
    max_context_tokens: int = 8000
    streaming: bool = False  # `[streaming] enabled` (on by default there); needs a front end
    # that can draft (see `bot.core.streaming`)
    streaming_interval_seconds: float = 1.0
    channels: tuple[ChannelSettings, ...] = ()
    attachments: AttachmentLimits = field(default_factory=AttachmentLimits)
    model: str | None = None  # None: the replier's own
    max_tokens: int | None = None
    tools: WebTools = field(default_factory=WebTools)

    @property
    def timing(self) -> Timing:
        return self._timing(None, None)

    def _channel(self, key: ConversationKey) -> ChannelSettings | None:
        for channel in self.channels:
            if channel.platform == key.platform and channel.channel == key.channel:
                return channel
        return None

    def timing_for(self, key: ConversationKey) -> Timing:
        """Debounce for one conversation: its channel's `[[channels]]` overrides, else global."""
        return self._timing(key, self._channel(key))

    def _timing(self, key: ConversationKey | None, c: ChannelSettings | None) -> Timing:
        if c is None:
            return Timing(self.quiet_seconds, self.max_wait_seconds, self.adaptive,
                          self.min_quiet_seconds, self.max_quiet_seconds,
                          self._speculate_after(key))  # fmt: skip
        return Timing(
            self.quiet_seconds if c.quiet_seconds is None else c.quiet_seconds,
            self.max_wait_seconds if c.max_wait_seconds is None else c.max_wait_seconds,
            self.adaptive if c.adaptive is None else c.adaptive,
            self.min_quiet_seconds if c.min_quiet_seconds is None else c.min_quiet_seconds,
            self.max_quiet_seconds if c.max_quiet_seconds is None else c.max_quiet_seconds,
            self._speculate_after(key, c),
        )

    def _speculate_after(
        self, key: ConversationKey | None, channel: ChannelSettings | None = None
    ) -> float | None:
        """The early start's delay, or None: no speculation. Never where the model may run a paid
        server tool (web search or fetch): a speculation could not run one before the close, and
        one offered only after it would answer differently (G4)."""
        on = self.speculate if channel is None or channel.speculate is None else channel.speculate
        if not on:
            return None
        paid = self.tools.web_search or self.tools.web_fetch
        if paid if key is None else self.tools_for(key).any:
            return None
        after = None if channel is None else channel.speculate_after_seconds
        return self.speculate_after_seconds if after is None else after

    def voice_for(self, key: ConversationKey) -> Voice:
        """System prompt, model and max_tokens: the channel's, else the global ones."""
        channel = self._channel(key)
        tools = self.tools_for(key)
        if channel is None:
            return Voice(self.system_prompt, self.model, self.max_tokens, tools)
        prompt = self.system_prompt if channel.system_prompt is None else channel.system_prompt
        model, max_tokens = channel.model or self.model, channel.max_tokens or self.max_tokens
        return Voice(prompt, model, max_tokens, tools)

    def tools_for(self, key: ConversationKey) -> WebTools:
        """Server tools: the channel's (resolved at wiring), else the global `[tools]`."""
        channel = self._channel(key)
        return self.tools if channel is None or channel.tools is None else channel.tools

    def streams(self, key: ConversationKey) -> bool:
        """Streaming for one conversation: its channel's `[[channels]]` override, else global."""
        channel = self._channel(key)
        if channel is None or channel.streaming is None:
            return self.streaming
        return channel.streaming
