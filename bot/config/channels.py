"""Per-channel overrides (`[[channels]]`): each unset key falls back to its global section, and
the checks that need both (a channel's windows, the MCP servers it names).

A channel's keys are not declared here: each is its global section's field (same name, type and
bounds; `streaming` is `[streaming] enabled`, `feedback` is `[feedback] enabled`), made optional,
so a new setting is one field."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import create_model, model_validator

from bot.config.sections import (
    DebounceConfig,
    FeedbackConfig,
    LlmConfig,
    Section,
    StreamingConfig,
    check_windows,
)
from bot.config.tools import McpServerConfig, ToolsConfig, exclusive_domains

LOCAL_ONLY = {"typing_aware", "typing_seconds"}
"""`[debounce]` keys a channel cannot set (the typing notices are read per front end)."""


def optional_fields(section: type[Section], *names: str, **renamed: str) -> dict[str, Any]:
    """`section`'s fields `names` (and `renamed`: channel key=section key), each optional with the
    section's type and bounds: None (unset) takes the global value."""
    fields: dict[str, Any] = {}
    for key, own in {**{name: name for name in names}, **renamed}.items():
        info = section.model_fields[own]
        bounded: Any = info.annotation
        if info.metadata:
            bounded = Annotated[(bounded, *info.metadata)]
        fields[key] = (bounded | None, None)
    return fields


CHANNEL_KEYS = {
    **optional_fields(
        DebounceConfig, *(k for k in DebounceConfig.model_fields if k not in LOCAL_ONLY)
    ),
    **optional_fields(LlmConfig, "system_prompt", "model", "max_tokens", "temperature"),
    **optional_fields(StreamingConfig, streaming="enabled"),
    **optional_fields(FeedbackConfig, feedback="enabled"),
}
CHANNEL_TOOL_KEYS = optional_fields(
    ToolsConfig, "web_search", "web_search_max_uses", "web_search_allowed_domains",
    "web_search_blocked_domains", "web_fetch",
)  # fmt: skip

if TYPE_CHECKING:  # the generated fields are read by name (`model_dump`), never as attributes
    ChannelKeys = Section
    ChannelToolKeys = Section
else:
    ChannelKeys = create_model("ChannelKeys", __base__=Section, **CHANNEL_KEYS)
    ChannelToolKeys = create_model("ChannelToolKeys", __base__=Section, **CHANNEL_TOOL_KEYS)


class ChannelToolsConfig(ChannelToolKeys):
    """A channel's `tools` table (`[channels.tools]`): unset keys fall back to `[tools]`."""

    mcp: list[str] | None = None
    """The `[[tools.mcp]]` servers this channel may use, by name (none unless listed here)."""

    @model_validator(mode="after")
    def _one_domain_list(self) -> ChannelToolsConfig:
        own = self.model_dump()
        exclusive_domains(own["web_search_allowed_domains"], own["web_search_blocked_domains"])
        return self


class ChannelConfig(ChannelKeys):
    """Per-channel overrides (`[[channels]]`); unset keys fall back to the global ones."""

    platform: str
    channel: str
    tools: ChannelToolsConfig | None = None

    def overrides(self) -> dict[str, Any]:
        """The keys this channel sets, by name (`tools` aside)."""
        keys: dict[str, Any] = self.model_dump(
            exclude_none=True, exclude={"platform", "channel", "tools"}
        )
        return keys


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
        windows = debounce.model_dump() | channel.overrides()
        check_windows(
            windows["quiet_seconds"],
            windows["min_quiet_seconds"],
            windows["max_quiet_seconds"],
            windows["max_wait_seconds"],
            f"{where}: ",
        )
        for name in (channel.tools.mcp or []) if channel.tools else []:
            if name not in known:
                raise ValueError(
                    f"{where}.tools.mcp: unknown server {name!r} "
                    "(define it in a [[tools.mcp]] entry)"
                )
