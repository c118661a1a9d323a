"""Engine settings: the config values the transitions use, with per-channel overrides resolved."""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.config import AttachmentsConfig, ChannelConfig, Config, ToolsConfig
from bot.core.events import ConversationKey
from bot.core.store import Timing
from bot.model.replier import Voice, WebTools


@dataclass(frozen=True, slots=True)
class EngineSettings:
    quiet_seconds: float = 1.5
    max_wait_seconds: float = 8.0
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
    channels: tuple[ChannelConfig, ...] = ()
    attachments: AttachmentsConfig = field(default_factory=AttachmentsConfig)
    model: str | None = None  # None: the replier's own
    max_tokens: int | None = None
    tools: ToolsConfig = field(default_factory=ToolsConfig)

    @classmethod
    def from_config(cls, config: Config) -> EngineSettings:
        return cls(
            quiet_seconds=config.debounce.quiet_seconds,
            max_wait_seconds=config.debounce.max_wait_seconds,
            speculate=config.debounce.speculate,
            speculate_after_seconds=config.debounce.speculate_after_seconds,
            lease_ttl_seconds=config.lease.ttl_seconds,
            max_concurrent_generations=config.engine.max_concurrent_generations,
            poll_seconds=config.engine.poll_seconds,
            busy_retry_seconds=config.engine.busy_retry_seconds,
            delivery_backoff_seconds=config.engine.delivery_backoff_seconds,
            delivery_backoff_max_seconds=config.engine.delivery_backoff_max_seconds,
            delivery_give_up_hours=config.engine.delivery_give_up_hours,
            indicator_delay_seconds=config.engine.indicator_delay_seconds,
            model_max_attempts=config.llm.max_attempts,
            model_backoff_seconds=config.llm.retry_backoff_seconds,
            failure_message=config.llm.failure_message,
            system_prompt=config.llm.system_prompt,
            max_context_tokens=config.llm.max_context_tokens,
            streaming=config.streaming.enabled,
            streaming_interval_seconds=config.streaming.interval_seconds,
            channels=tuple(config.channels),
            attachments=config.attachments,
            model=config.llm.model,
            max_tokens=config.llm.max_tokens,
            tools=config.tools,
        )

    @property
    def timing(self) -> Timing:
        return Timing(self.quiet_seconds, self.max_wait_seconds, self._speculate_after(None))

    def _channel(self, key: ConversationKey) -> ChannelConfig | None:
        for channel in self.channels:
            if channel.platform == key.platform and channel.channel == key.channel:
                return channel
        return None

    def timing_for(self, key: ConversationKey) -> Timing:
        """Debounce for one conversation: its channel's `[[channels]]` overrides, else global."""
        channel = self._channel(key)
        if channel is None:
            return Timing(self.quiet_seconds, self.max_wait_seconds, self._speculate_after(key))
        quiet, cap = channel.quiet_seconds, channel.max_wait_seconds
        return Timing(
            self.quiet_seconds if quiet is None else quiet,
            self.max_wait_seconds if cap is None else cap,
            self._speculate_after(key, channel),
        )

    def _speculate_after(
        self, key: ConversationKey | None, channel: ChannelConfig | None = None
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
        """Server tools: each key of the channel's `tools` table, else the global `[tools]`.
        A channel that sets either domain list sets both (the two are exclusive)."""
        base, channel = self.tools, self._channel(key)
        over = None if channel is None else channel.tools
        if over is None:
            return WebTools(base.web_search, base.web_search_max_uses,
                            tuple(base.web_search_allowed_domains),
                            tuple(base.web_search_blocked_domains), base.web_fetch)  # fmt: skip
        allowed, blocked = over.web_search_allowed_domains, over.web_search_blocked_domains
        if allowed is None and blocked is None:
            allowed, blocked = base.web_search_allowed_domains, base.web_search_blocked_domains
        return WebTools(
            base.web_search if over.web_search is None else over.web_search,
            over.web_search_max_uses or base.web_search_max_uses,
            tuple(allowed or ()),
            tuple(blocked or ()),
            base.web_fetch if over.web_fetch is None else over.web_fetch,
        )

    def streams(self, key: ConversationKey) -> bool:
        """Streaming for one conversation: its channel's `[[channels]]` override, else global."""
        channel = self._channel(key)
        if channel is None or channel.streaming is None:
            return self.streaming
        return channel.streaming
