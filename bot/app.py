"""The composition root: config → store, replier, engine, scheduler and front ends."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from bot.config import Config, load_config, require_secret
from bot.core.actions import ActionLog
from bot.core.catch_up import CatchUp, CatchUpSettings, CatchUpSource, FrontendMemory, ThreadBook
from bot.core.clock import Clock, SystemClock
from bot.core.engine import Engine
from bot.core.errors import BurstbotError, ConfigError, StoreError
from bot.core.events import ConversationKey, Event, IncomingMessage, Reply, ResetConversation
from bot.core.frontend import Frontend, stop_intake
from bot.core.gate import GuardStep, Refusal
from bot.core.notes import NoteBook
from bot.core.scheduler import Scheduler
from bot.core.settings import EngineSettings
from bot.core.signals import Listener
from bot.core.store import IngestResult, Store
from bot.core.typing_window import TypingStore, author_typing
from bot.model.offline import OfflineReplier
from bot.model.replier import Replier
from bot.model.tool_calls import ToolBox
from bot.ops.access import AccessPolicy
from bot.ops.guards import CostGuards, CounterStore, limits_active
from bot.ops.health import Health
from bot.ops.logs import configure_logging
from bot.ops.metrics import Metrics, MetricsServer
from bot.ops.reload import ReloadPlan, plan_reload
from bot.ops.retention import Retention, RetentionStore
from bot.ops.usage import PriceTable

if TYPE_CHECKING:
    from bot.model.mcp_client import McpHub

log = logging.getLogger("burstbot")
PROMPT_CONTEXT_SECONDS = 10.0  # a front end's look-ups for the prompt (a channel's messages)
SHUTDOWN_GRACE_SECONDS = 5.0  # for replies being posted at shutdown; well inside systemd's 30 s


@runtime_checkable
class WakeupHints(Protocol):
    """A store that can tell this process when another one armed a timer or queued a reply."""

    async def listen(self, hint: Callable[[str], None]) -> None: ...


def make_owner(config: Config) -> str:
    """This process's name on leases and claims: unique even when several processes share one
    config, because shutdown releases everything held under it (`<configured>:<host>:<pid>:<hex>`;
    without `engine.owner`, just `<host>:<pid>:<hex>`)."""
    unique = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
    return f"{config.engine.owner}:{unique}" if config.engine.owner else unique


def build_replier(config: Config) -> Replier:
    if config.llm.provider == "offline":
        return OfflineReplier()
    require_secret(config.llm.api_key_env, "llm.api_key_env")  # before the SDK's slow import
    from bot.model.claude import ClaudeReplier

    return ClaudeReplier.from_config(config)


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


def build_store(config: Config) -> Store:
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


def build_tools(config: Config, store: Store, clock: Clock) -> tuple[McpHub | None, ToolBox | None]:
    """The MCP servers of `[[tools.mcp]]` (started with the process) and the engine's view of
    them; none without servers."""
    servers = config.tools.mcp
    if not servers:
        return None, None
    if not isinstance(store, ActionLog):
        raise ConfigError("tools.mcp: this storage backend cannot record tool actions")
    from bot.model.mcp_client import McpHub  # the SDK is loaded only when servers are set

    hub = McpHub(servers)
    caps = {server.name: server.max_result_chars for server in servers}
    return hub, ToolBox(store, hub, clock.now, caps)


class DemoWiring:
    """`burstbot demo` builds its app through here, so the command never imports this module."""

    def build_app(self, config: Config, replier: Replier, frontends: list[Frontend]) -> App:
        return App(config, build_store(config), replier, frontends)

    def build_store(self, config: Config) -> Store:
        return build_store(config)


class App:
    """One process: one store, one engine, one scheduler, every enabled front end (a `Host`)."""

    def __init__(
        self,
        config: Config,
        store: Store,
        replier: Replier,
        frontends: list[Frontend],
        clock: Clock | None = None,
        owner: str | None = None,
        shutdown_grace: float = SHUTDOWN_GRACE_SECONDS,
    ) -> None:
        self.config = config
        self.shutdown_grace = shutdown_grace
        self.store = store
        self.frontends = frontends
        self.by_platform = {f.platform: f for f in frontends}
        self.access = AccessPolicy(config.access)
        self.guards = self._cost_guards(config, self.access)
        clock = clock or SystemClock()
        self.mcp, tools = build_tools(config, store, clock)
        self.engine = Engine(
            store,
            replier,
            clock,
            EngineSettings.from_config(config),
            owner or make_owner(config),
            self.by_platform,
            gate=self.guards,
            tools=tools,
        )
        self.scheduler = Scheduler(self.engine)
        if not isinstance(store, FrontendMemory):
            raise ConfigError("storage: this backend cannot remember threads or catch up")
        self.catch_up_settings = CatchUpSettings.from_config(config)
        self.threads = ThreadBook(store, self.engine.clock, self.ingest, self.catch_up_settings)
        if not isinstance(store, NoteBook):
            raise ConfigError("storage: this backend cannot keep notes about conversations")
        self.notes: NoteBook = store
        self.engine.prompts.context = self._prompt_context
        self.catch_ups: list[CatchUp] = []
        self.metrics = Metrics(PriceTable(config.prices))
        self.retention = None
        if isinstance(store, RetentionStore):
            self.retention = Retention(store, self.engine.clock, lambda: self.config.retention)
        self.metrics_server: MetricsServer | None = None
        self._listeners: list[Listener] = []
        self.subscribe(self.metrics.observe)
        self._notices: set[asyncio.Task[None]] = set()
        self._stop = asyncio.Event()
        self.serving = asyncio.Event()  # set once every front end has started
        self.failure: BurstbotError | None = None
        self.config_path: Path | None = None  # where SIGHUP re-reads the config (CLI: --config)
        self.verbose = False  # the CLI's -v, kept when a reload changes logging

    def _cost_guards(self, config: Config, access: AccessPolicy) -> CostGuards | None:
        if not limits_active(config.limits):
            return None
        if not isinstance(self.store, CounterStore):
            raise ConfigError("limits: this storage backend cannot keep cost-guard counters")
        return CostGuards(config.limits, self.store, access.is_admin, config.attachments)

    def reload(self) -> ReloadPlan | None:
        """SIGHUP: re-read `config_path`. Live settings apply from the next burst or message;
        changed restart-only ones are logged and keep their running value; a file that does not
        load is refused with one line and the running config stays."""
        if self.config_path is None:
            log.warning("reload: started without a config file; nothing to re-read")
            return None
        try:
            plan = plan_reload(self.config, load_config(self.config_path))
            access = AccessPolicy(plan.config.access)
            guards = self._cost_guards(plan.config, access)
        except ConfigError as exc:
            log.error("reload refused, the running config stays: %s", exc)
            self._emit("reload_refused", reason=str(exc))
            return None
        if plan.config.logging != self.config.logging:
            configure_logging(plan.config, verbose=self.verbose)
        self.config, self.access, self.guards = plan.config, access, guards
        self.engine.guard = GuardStep(guards)
        self.engine.settings = EngineSettings.from_config(plan.config)
        self.metrics.prices = PriceTable(plan.config.prices)
        for frontend in self.frontends:  # the live part of a front end's own section
            reconfigure = getattr(frontend, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(plan.config)
        log.warning(
            "config reloaded from %s: %s", self.config_path, ", ".join(plan.applied) or "no change"
        )
        if plan.needs_restart:
            log.warning("reload: these need a restart to change: %s", ", ".join(plan.needs_restart))
        self._emit("reloaded", applied=plan.applied, needs_restart=plan.needs_restart)
        return plan

    def subscribe(self, listener: Listener) -> None:
        """Engine events plus the app's own (`refused` at arrival, `reset`)."""
        self.engine.subscribe(listener)
        self._listeners.append(listener)

    def _emit(self, name: str, **fields: object) -> None:
        for listener in self._listeners:
            listener(name, fields)

    # Host ------------------------------------------------------------------------------------
    async def ingest(self, event: Event) -> IngestResult:
        """Access rules and arrival guards first (nothing refused is stored), then the engine."""
        if isinstance(event, ResetConversation):
            return await self._reset(event)
        if isinstance(event, IncomingMessage) and not event.author_is_bot:
            reason = self.access.refusal(event.key, event.author_id, event.is_dm)
            if reason is not None:
                log.info("conversation %s: message refused (%s)", event.key.id, reason)
                self._emit("refused", conversation=event.key.id, stage="access", reason=reason)
                return IngestResult("ignored", event.key.id, 0)
            if self.guards is not None:
                refusal = await self.guards.check_message(event, self.engine.clock.now())
                if refusal is not None and refusal.repeat:
                    log.debug("conversation %s: repeat of refused message %s dropped",
                              event.key.id, event.message_id)  # fmt: skip
                    self._emit("duplicate", conversation=event.key.id, version=0)
                    return IngestResult("duplicate", event.key.id, 0)
                if refusal is not None:
                    return self._refused_by_guard(event, refusal)
        return await self.engine.ingest(event)

    def _refused_by_guard(self, event: IncomingMessage, refusal: Refusal) -> IngestResult:
        key = event.key
        already = "" if refusal.notice else "; notice already sent"
        log.warning(
            "conversation %s: message from %s refused (%s)%s",
            key.id, event.author_id, refusal.reason, already,
        )  # fmt: skip
        self._emit("refused", conversation=key.id, stage="guard", reason=refusal.reason)
        frontend = self.by_platform.get(key.platform)
        if refusal.notice is not None and frontend is not None:
            notice = Reply(
                id=f"n{secrets.token_hex(8)}",
                key=key,
                text=refusal.notice,
                covers_to_version=0,
                reply_to_message_id=event.message_id,
            )
            self._background(frontend.deliver(notice))
        return IngestResult("ignored", key.id, 0)

    def _background(self, work: Awaitable[object]) -> None:
        async def run() -> None:
            try:
                await work
            except Exception as exc:
                log.warning("could not post a notice: %s", exc)

        task = asyncio.create_task(run())
        self._notices.add(task)
        task.add_done_callback(self._notices.discard)

    async def _reset(self, event: ResetConversation) -> IngestResult:
        cid = event.key.id
        reason = self.access.refusal(event.key, event.author_id, event.is_dm)
        if reason is not None:
            self._emit("refused", conversation=cid, stage="access", reason=reason)
            return IngestResult("ignored", cid, 0)
        floor = await self.store.reset_history(cid)
        log.info("conversation %s: history cleared by %s", cid, event.author_id or "a user")
        self._emit("reset", conversation=cid, floor=floor)
        return IngestResult("history", cid, floor or 0)

    async def flush(self, key: ConversationKey) -> None:
        await self.engine.flush(key)

    async def _prompt_context(self, key: ConversationKey) -> str:
        """What the conversation's front end adds to the system prompt (optional
        `async def prompt_context(key) -> str`, e.g. the channel a Slack user is viewing).
        Bounded, and a courtesy: a failure answers without it."""
        frontend = self.by_platform.get(key.platform)
        method = getattr(frontend, "prompt_context", None)
        if method is None:
            return ""
        try:
            async with asyncio.timeout(PROMPT_CONTEXT_SECONDS):
                return str(await method(key))
        except (TimeoutError, BurstbotError) as exc:
            log.warning("conversation %s: answering without its context (%s)", key.id,
                        exc or "timed out")  # fmt: skip
            return ""

    async def is_settled(self, key: ConversationKey) -> bool:
        return await self.engine.is_settled(key)

    async def typing(self, key: ConversationKey, author_id: str) -> None:
        debounce = self.config.debounce
        if not debounce.typing_aware or not isinstance(self.store, TypingStore):
            return
        engine = self.engine
        due = await author_typing(self.store, engine.clock, debounce.typing_seconds, key, author_id)
        if due is not None:
            self._emit("typing", conversation=key.id, due_at=due)

    def request_stop(self) -> None:
        self._stop.set()

    def frontend_failed(self, platform: str, error: BurstbotError) -> None:
        """Stop everything cleanly; `run` then raises the first such error (the CLI exits 1, or 2
        for a configuration problem), so a supervisor sees a failure and restarts the process."""
        log.info("%s front end failed (%s); stopping", platform, error)
        if self.failure is None:
            self.failure = error
        self.request_stop()

    def start_catch_up(self, frontends: list[Frontend], before: float) -> None:
        """Front ends that can, fetch in the background what was sent while none of them listened
        (`before`: when they began connecting); each keeps its runner for its reconnects."""
        if not self.catch_up_settings.enabled:
            return
        clock, settings = self.engine.clock, self.catch_up_settings
        for frontend in frontends:
            if isinstance(frontend, CatchUpSource):
                catch_up = CatchUp(frontend, self.threads.memory, self.ingest, clock, settings)
                frontend.use_catch_up(catch_up)
                self.catch_ups.append(catch_up)
                catch_up.request(before)

    def hint(self, payload: str) -> None:
        """Another process armed a timer, queued a reply or released leases: look now if it
        matters before the next poll (`timer <due_at>`, `outbox <platform>`, `released`)."""
        engine = self.engine
        kind, _, detail = payload.partition(" ")
        if kind == "timer":
            try:
                wanted = float(detail) < engine.sleeping_until
            except ValueError:
                wanted = False
        elif kind == "outbox":
            wanted = detail in self.by_platform
        else:
            wanted = True
        if wanted:
            engine.wakeup.set()

    # lifecycle -------------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve until asked to stop (signal or a front end), then shut down cleanly; raise the
        error of a front end that failed for good, once everything has stopped."""
        await self.store.open()
        if self.mcp is not None:
            try:
                await self.mcp.start()
            except BaseException:
                await self.store.close()  # an allowed tool the server does not list: exit 2
                raise
        if isinstance(self.store, WakeupHints):
            await self.store.listen(self.hint)
        if self.config.metrics.enabled:
            metrics = self.config.metrics
            health = Health(self.store, self.frontends, self.metrics, self.engine.clock,
                            lambda: self.engine.busy)  # fmt: skip
            server = MetricsServer(
                self.metrics, health.report, metrics.host, metrics.port, health.refresh
            )
            try:
                await server.start()
            except BaseException:
                await self.store.close()  # e.g. the port is taken: nothing else started yet
                raise
            self.metrics_server = server
        loop = asyncio.get_running_loop()
        handlers: dict[signal.Signals, Callable[[], object]] = {
            signal.SIGINT: self.request_stop,
            signal.SIGTERM: self.request_stop,
            signal.SIGHUP: self.reload,
        }
        for sig, handler in handlers.items():
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, handler)
        scheduler = asyncio.create_task(self.scheduler.run())
        sweeper = asyncio.create_task(self.retention.run()) if self.retention else None
        started: list[Frontend] = []
        connecting_at = self.engine.clock.now()
        try:
            for frontend in self.frontends:
                await frontend.start(self)
                started.append(frontend)
            self.start_catch_up(started, connecting_at)
            log.info("burstbot running as %s", self.engine.owner)
            self.serving.set()
            stop = asyncio.create_task(self._stop.wait())
            await asyncio.wait({stop, scheduler}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
        finally:
            if sweeper is not None:
                sweeper.cancel()
                await asyncio.gather(sweeper, return_exceptions=True)
            await self._shutdown(started, scheduler)
            for sig in handlers:
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(sig)
        if self.failure is not None:
            raise self.failure

    async def _shutdown(self, started: list[Frontend], scheduler: asyncio.Task[None]) -> None:
        """In this order, so no reply is cut off halfway and nothing waits on a dead process:
        stop intake; stop taking work (generations are cancelled); let commits, deliveries and
        notices in flight finish within the grace period (then cancel them); stop the front
        ends; release our leases and delivery claims; close the store."""
        for frontend in started:
            try:
                await stop_intake(frontend)
            except Exception as exc:  # shutdown goes on: the platform retries what it cannot hand
                log.warning("shutdown: %s could not stop taking events (%r)", frontend.platform,
                            exc)  # fmt: skip
        self.engine.stop_taking_work()
        self.scheduler.stop()
        await asyncio.gather(scheduler, return_exceptions=True)
        await self.engine.finish(self.shutdown_grace, self._notices)
        for frontend in started:
            try:
                await frontend.stop()
            except Exception as exc:  # shutdown goes on: leases and the store still need closing
                log.warning("shutdown: %s did not stop cleanly (%r)", frontend.platform, exc)
        try:
            await self.engine.release()
        except StoreError as exc:  # they expire by themselves; the store must still be closed
            self.failure = self.failure or StoreError(
                f"could not release leases on shutdown ({exc}); they expire by themselves"
            )
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        if self.mcp is not None:
            await self.mcp.close()
        await self.store.close()
        closer = getattr(self.engine.replier, "aclose", None)
        if closer is not None:
            try:
                await closer()
            except Exception as exc:  # only the model client's connections are left behind
                log.warning("shutdown: the model client did not close cleanly (%r)", exc)
