"""Engine settings: the config values the transitions use, with per-channel overrides resolved."""

from __future__ import annotations

from dataclasses import dataclass

from bot.config import ChannelConfig, Config
from bot.core.events import ConversationKey
from bot.core.store import Timing


@dataclass(frozen=True, slots=True)
class EngineSettings:
    quiet_seconds: float = 1.5
    max_wait_seconds: float = 8.0
    lease_ttl_seconds: float = 30.0
    max_concurrent_generations: int = 8
    poll_seconds: float = 1.0
    busy_retry_seconds: float = 1.0
    delivery_max_attempts: int = 8
    delivery_backoff_seconds: float = 1.0
    indicator_delay_seconds: float = 1.0
    model_max_attempts: int = 3
    model_backoff_seconds: float = 2.0
    failure_message: str = "Sorry, I couldn't answer that just now."
    system_prompt: str = "You are a helpful assistant."
    max_context_tokens: int = 8000
    channels: tuple[ChannelConfig, ...] = ()

    @classmethod
    def from_config(cls, config: Config) -> EngineSettings:
        return cls(
            quiet_seconds=config.debounce.quiet_seconds,
            max_wait_seconds=config.debounce.max_wait_seconds,
            lease_ttl_seconds=config.lease.ttl_seconds,
            max_concurrent_generations=config.engine.max_concurrent_generations,
            poll_seconds=config.engine.poll_seconds,
            busy_retry_seconds=config.engine.busy_retry_seconds,
            delivery_max_attempts=config.engine.delivery_max_attempts,
            delivery_backoff_seconds=config.engine.delivery_backoff_seconds,
            indicator_delay_seconds=config.engine.indicator_delay_seconds,
            model_max_attempts=config.llm.max_attempts,
            model_backoff_seconds=config.llm.retry_backoff_seconds,
            failure_message=config.llm.failure_message,
            system_prompt=config.llm.system_prompt,
            max_context_tokens=config.llm.max_context_tokens,
            channels=tuple(config.channels),
        )

    @property
    def timing(self) -> Timing:
        return Timing(self.quiet_seconds, self.max_wait_seconds)

    def _channel(self, key: ConversationKey) -> ChannelConfig | None:
        for channel in self.channels:
            if channel.platform == key.platform and channel.channel == key.channel:
                return channel
        return None

    def timing_for(self, key: ConversationKey) -> Timing:
        """Debounce for one conversation: its channel's `[[channels]]` overrides, else global."""
        channel = self._channel(key)
        if channel is None:
            return self.timing
        quiet, cap = channel.quiet_seconds, channel.max_wait_seconds
        return Timing(
            self.quiet_seconds if quiet is None else quiet,
            self.max_wait_seconds if cap is None else cap,
        )

    def system_prompt_for(self, key: ConversationKey) -> str:
        channel = self._channel(key)
        if channel is None or channel.system_prompt is None:
            return self.system_prompt
        return channel.system_prompt
