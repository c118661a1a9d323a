"""The composition root's builders: config → store, replier, front ends and the core's settings;
the serving core (engine, outbox, indicator, drafts, scheduler) wired from them.

Only here (and in `bot/app.py`, which uses these) does the config model meet the core: the core
gets plain `bot/core/settings.py` values, never the config with its Slack and Discord sections.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.config import ChannelConfig, ChannelToolsConfig, Config, ToolsConfig, require_secret
from bot.core.admission import Admission
from bot.core.clock import Clock
from bot.core.cpu_budget import CpuBudget
from bot.core.engine import Engine
from bot.core.errors import ConfigError
from bot.core.frontend import Frontend
from bot.core.guard import Guard
from bot.core.indicator import Indicator
from bot.core.outbox import Outbox
from bot.core.replier import Replier
from bot.core.scheduler import Scheduler
from bot.core.settings import (
    AttachmentLimits,
    CatchUpSettings,
    ChannelSettings,
    EngineSettings,
    WebTools,
)
from bot.core.signals import Signals
from bot.core.streaming import Drafts
from bot.core.tool_calls import ToolBox
from bot.core.wakeup import Wakeup
from bot.llm.offline import OfflineReplier

if TYPE_CHECKING:
    from bot.llm.claude import ClaudeReplier
    from storage.sql_store import SqlStore


def make_owner(config: Config) -> str:
    """This process's name on leases and claims: unique even when several processes share one
    config, because shutdown releases everything held under it (`<configured>:<host>:<pid>:<hex>`;
    without `engine.owner`, just `<host>:<pid>:<hex>`)."""
    unique = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
    return f"{config.engine.owner}:{unique}" if config.engine.owner else unique


def build_replier(config: Config) -> Replier:
    if config.llm.provider == "offline":
        return OfflineReplier()
    return claude_replier(config)


def claude_replier(
    config: Config,
    environ: Mapping[str, str] | None = None,
    kind: type[ClaudeReplier] | None = None,
) -> ClaudeReplier:
    """`[llm]`'s Claude client (`kind`: a subclass of `ClaudeReplier`), the key from the variable
    `llm.api_key_env` names: a missing one is a `ConfigError` naming it, before the SDK's slow
    import."""
    llm = config.llm
    api_key = require_secret(llm.api_key_env, "llm.api_key_env", environ)
    import anthropic

    from bot.llm.claude import ClaudeReplier

    client = anthropic.AsyncAnthropic(
        api_key=api_key,
        base_url=llm.base_url or None,
        max_retries=llm.max_retries,
        timeout=llm.timeout_seconds,
    )
    replier = kind or ClaudeReplier
    return replier(client, llm.model, llm.max_tokens, llm.timeout_seconds, llm.cut_note)


def build_frontends(config: Config) -> list[Frontend]:
    frontends: list[Frontend] = []
    if config.console.enabled:
        from adapters.console import ConsoleFrontend

        frontends.append(ConsoleFrontend(user_name=config.console.user_name))
    if config.slack.enabled:
        from adapters.slack import build_slack_frontend

        frontends.append(build_slack_frontend(config.slack))
    if config.discord.enabled:
        from adapters.discord import build_discord_frontend

        typing = config.debounce.typing_aware
        frontends.append(build_discord_frontend(config.discord, typing_intents=typing))
    if not frontends:
        raise ConfigError("config: no front end enabled (console, slack or discord)")
    return frontends


def build_store(config: Config) -> SqlStore[Any]:
    from storage import open_store
    from storage.pool_limits import PoolLimits

    storage = config.storage
    limits = PoolLimits(
        statement_seconds=storage.statement_timeout_seconds,
        acquire_seconds=storage.acquire_timeout_seconds,
        connect_seconds=storage.connect_timeout_seconds,
        keepalive_seconds=storage.keepalive_seconds,
    )
    return open_store(storage.url, storage.pool_size, storage.busy_timeout_seconds, limits)


def web_tools(base: ToolsConfig, over: ChannelToolsConfig) -> WebTools:
    """Server tools: each key of a channel's `tools` table, else the global `[tools]`; MCP
    servers only from the channel's own `mcp` list (a channel or DM not listed gets none). A
    channel that sets either domain list sets both (the two are exclusive)."""
    own = over.model_dump(exclude_none=True)
    domains = ("web_search_allowed_domains", "web_search_blocked_domains")
    if any(key in own for key in domains):
        own = {key: [] for key in domains} | own
    keys = base.model_dump(exclude={"mcp"}) | own
    return WebTools(
        keys["web_search"],
        keys["web_search_max_uses"],
        tuple(keys["web_search_allowed_domains"]),
        tuple(keys["web_search_blocked_domains"]),
        keys["web_fetch"],
        tuple(own.get("mcp", ())),
        base.max_tool_calls,
    )


def engine_settings(config: Config) -> EngineSettings:
    """Every `[debounce]` and `[engine]` key is the core setting of the same name, except those
    left out here (read elsewhere, or deprecated): a new key is one or the other."""
    llm = config.llm
    return EngineSettings(
        **config.debounce.model_dump(exclude={"typing_aware", "typing_seconds"}),  # bot/app.py's
        **config.engine.model_dump(exclude={"delivery_max_attempts", "owner", "pid_file"}),
        lease_ttl_seconds=config.lease.ttl_seconds,
        model_max_attempts=llm.max_attempts,
        model_backoff_seconds=llm.retry_backoff_seconds,
        failure_message=llm.failure_message,
        system_prompt=llm.system_prompt,
        max_context_tokens=llm.max_context_tokens,
        streaming=config.streaming.enabled,
        streaming_interval_seconds=config.streaming.interval_seconds,
        feedback=config.feedback.enabled,
        channels=tuple(channel_settings(c, config.tools) for c in config.channels),
        attachments=AttachmentLimits(**config.attachments.model_dump()),  # its keys, same names
        model=llm.model,
        max_tokens=llm.max_tokens,
        tools=web_tools(config.tools, ChannelToolsConfig()),  # no channel: the global keys
    )


def channel_settings(channel: ChannelConfig, tools: ToolsConfig) -> ChannelSettings:
    """The keys a channel sets (an unset key is None: the global value), by the names the core's
    settings give them."""
    own = channel.overrides()
    if channel.tools is not None:
        own["tools"] = web_tools(tools, channel.tools)
    return ChannelSettings(channel.platform, channel.channel, own)


def catch_up_settings(config: Config) -> CatchUpSettings:
    section = config.catch_up
    return CatchUpSettings(
        section.enabled,
        section.max_age_hours * 3600.0,
        section.max_pages,
        max_requests=section.max_requests,
    )


def api_admission(
    store: SqlStore[Any], replier: Replier, clock: Clock, wakeup: Wakeup
) -> Admission | None:
    """Generations start by the Claude API's own limits, learned from its answers and shared
    through the store (bot/core/admission.py); a replier without limits (offline) has none."""
    claude = sys.modules.get("bot.llm.claude")  # not imported: no Claude replier (a slow import)
    if claude is None or not isinstance(replier, claude.ClaudeReplier):
        return None
    admission = Admission(store, clock, replier.limits_scope, wakeup.wake)
    replier.listen(admission.heard)
    return admission


@dataclass(frozen=True, slots=True)
class Serving:
    """One process's serving core, wired once so that no part reaches through another: the
    engine, the scheduler that drives it, and what both hand work to."""

    engine: Engine
    scheduler: Scheduler
    outbox: Outbox
    indicator: Indicator
    wakeup: Wakeup


def build_serving(
    store: SqlStore[Any],
    replier: Replier,
    clock: Clock,
    settings: EngineSettings,
    owner: str,
    frontends: Mapping[str, Frontend] | None = None,
    guard: Guard | None = None,
    tools: ToolBox | None = None,
    cpu: CpuBudget | None = None,
) -> Serving:
    """Each part gets the store as the small protocol it uses (`bot/core/store.py`). The outbox
    keeps `settings` as given; the drafts read the engine's at each use (a reload replaces
    them). `cpu`: this process's CPU bounds starts (a running bot's; tests and benchmarks that
    measure something else leave it out)."""
    served = dict(frontends or {})
    signals, wakeup = Signals(), Wakeup()
    admission = api_admission(store, replier, clock, wakeup)
    indicator = Indicator(served, clock, store, settings.indicator_delay_seconds)
    outbox = Outbox(store, clock, settings, owner, served, indicator, signals, wakeup.wake)
    drafts = Drafts(store, clock, lambda: engine.settings, served, outbox.waiting,
                    outbox.draft_posts, signals.emit)  # fmt: skip
    engine = Engine(
        store,
        replier,
        clock,
        settings,
        owner,
        served,
        guard,
        tools,
        outbox=outbox,
        indicator=indicator,
        drafts=drafts,
        wakeup=wakeup,
        signals=signals,
        admission=admission,
        cpu=cpu,
    )
    return Serving(engine, Scheduler(engine, store, outbox, wakeup), outbox, indicator, wakeup)
