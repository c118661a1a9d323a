"""Per-channel overrides (`[[channels]]`): each unset key falls back to its global section, and
the checks that need both (a channel's windows, the MCP servers it names)."""

from __future__ import annotations

from pydantic import Field, model_validator

from bot.config.sections import DAY, HOUR, DebounceConfig, NoSampling, Section, check_windows
from bot.config.tools import Domains, McpServerConfig, exclusive_domains


class ChannelToolsConfig(Section):
    """A channel's `tools` table (`[channels.tools]`): unset keys fall back to `[tools]`."""

    web_search: bool | None = None
    web_search_max_uses: int | None = Field(default=None, ge=1, le=1000)
    web_search_allowed_domains: Domains | None = None
    web_search_blocked_domains: Domains | None = None
    web_fetch: bool | None = None
    mcp: list[str] | None = None
    """The `[[tools.mcp]]` servers this channel may use, by name (none unless listed here)."""

    @model_validator(mode="after")
    def _one_domain_list(self) -> ChannelToolsConfig:
        exclusive_domains(self.web_search_allowed_domains, self.web_search_blocked_domains)
        return self


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
    temperature: NoSampling = None
    streaming: bool | None = None
    tools: ChannelToolsConfig | None = None


def check_channels(
    channels: list[ChannelConfig], debounce: DebounceConfig, servers: list[McpServerConfig]
) -> None:
    """Each channel once, its windows consistent with the global ones it falls back to, and only
    MCP servers that `[[tools.mcp]]` defines."""
    seen: set[tuple[str, str]] = set()
    known = {server.name for server in servers}
    for index, channel in enumerate(channels):
        where = f"channels.{index}"
        if (channel.platform, channel.channel) in seen:
            raise ValueError(f"{where}: {channel.platform}/{channel.channel} listed twice")
        seen.add((channel.platform, channel.channel))
        d, c = debounce, channel
        check_windows(
            d.quiet_seconds if c.quiet_seconds is None else c.quiet_seconds,
            d.min_quiet_seconds if c.min_quiet_seconds is None else c.min_quiet_seconds,
            d.max_quiet_seconds if c.max_quiet_seconds is None else c.max_quiet_seconds,
            d.max_wait_seconds if c.max_wait_seconds is None else c.max_wait_seconds,
            f"{where}: ",
        )
        for name in (channel.tools.mcp or []) if channel.tools else []:
            if name not in known:
                raise ValueError(
                    f"{where}.tools.mcp: unknown server {name!r} "
                    "(define it in a [[tools.mcp]] entry)"
                )
