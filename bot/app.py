"""The composition root: config → store, replier, engine, scheduler and front ends (builders in
`bot/wiring.py`, arrival's policy in `bot/arrival.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from bot import __version__
from bot.arrival import Arrival
from bot.config import Config, Reconfigurable, load_config
from bot.core.catch_up import CatchUp
from bot.core.clicks import Click, ClickAnswer
from bot.core.clock import Clock, SystemClock, cancel_all, first_of
from bot.core.cpu_budget import CpuBudget
from bot.core.engine import Engine
from bot.core.errors import BurstbotError, ConfigError, StoreError
from bot.core.events import ConversationKey, Event
from bot.core.frontend import (
    FRONTEND_ABILITIES,
    Frontend,
    catch_up_source,
    check_abilities,
    declares,
    prompt_context_of,
    stop_intake,
)
from bot.core.guard import GuardStep
from bot.core.hints import stopped_conversation, wanted
from bot.core.installations import InstallationBook
from bot.core.notes import NoteBook
from bot.core.processes import Presence
from bot.core.replier import Closable, Replier
from bot.core.scheduler import Scheduler
from bot.core.signals import Listener, Signals
from bot.core.store import IngestResult
from bot.core.threads import ThreadBook
from bot.core.tool_calls import ToolBox
from bot.core.typing_window import author_typing
from bot.core.votes import Vote, VoteAnswer
from bot.ops.access import AccessPolicy
from bot.ops.guards import CostGuards, active_limits
from bot.ops.health import Health
from bot.ops.logs import configure_logging
from bot.ops.metrics import Metrics, MetricsServer
from bot.ops.reload import ReloadPlan, plan_reload
from bot.ops.retention import Retention
from bot.ops.usage import PriceTable
from bot.web.feedback import feedback_panel
from bot.wiring import build_serving, catch_up_settings, engine_settings, make_owner

if TYPE_CHECKING:
    from bot.ops.traces import Traces
    from bot.tool_servers import McpHub
    from bot.web.server import Panel, WebServer
    from storage.sql_store import SqlStore

log = logging.getLogger("burstbot")
PROMPT_CONTEXT_SECONDS = 10.0  # a front end's look-ups for the prompt (a channel's messages)
SHUTDOWN_GRACE_SECONDS = 5.0  # for replies being posted at shutdown; well inside systemd's 30 s


def check_wiring(frontends: list[Frontend], replier: Replier) -> None:
    """Each front end's and the replier's declared abilities, checked once: a missing method
    fails the start with one line instead of turning a feature off."""
    for frontend in frontends:
        abilities = (*FRONTEND_ABILITIES, Reconfigurable)
        check_abilities(frontend, f"{frontend.platform} front end", abilities)
    check_abilities(replier, "replier", (Closable,))


def build_tools(
    config: Config, store: SqlStore[Any], clock: Clock
) -> tuple[McpHub | None, ToolBox | None]:
    """The MCP servers of `[[tools.mcp]]` (started with the process) and the engine's view of
    them; none without servers."""
    servers = config.tools.mcp
    if not servers:
        return None, None
    from bot.tool_servers import McpHub  # the SDK is loaded only when servers are set

    hub = McpHub(servers, clock=clock)
    caps = {server.name: server.max_result_chars for server in servers}
    return hub, ToolBox(store, hub, clock.now, caps, approvals=store,
                        approval_timeout=config.tools.approval_timeout_seconds,
                        approvers=config.access.approvers)  # fmt: skip


class App:
    """One process: one store, one engine, one scheduler, every enabled front end (a `Host`)."""

    def __init__(
        self,
        config: Config,
        store: SqlStore[Any],
        replier: Replier,
        frontends: list[Frontend],
        clock: Clock | None = None,
        owner: str | None = None,
        shutdown_grace: float = SHUTDOWN_GRACE_SECONDS,
    ) -> None:
        check_wiring(frontends, replier)
        self.config = config
        self.shutdown_grace = shutdown_grace
        self.store = store
        self.frontends = frontends
        self.by_platform = {f.platform: f for f in frontends}
        guards = self._cost_guards(config, access := AccessPolicy(config.access))
        cpu = CpuBudget() if clock is None else None  # on a given clock the CPU is not ours
        self.clock = clock = clock or SystemClock()
        self.owner = owner = owner or make_owner(config)
        self.replier = replier
        self.mcp, tools = build_tools(config, store, clock)
        serving = build_serving(store, replier, clock, engine_settings(config), owner,
                                self.by_platform, guard=guards, tools=tools, cpu=cpu)  # fmt: skip
        self.engine: Engine = serving.engine
        self.scheduler: Scheduler = serving.scheduler
        self.wakeup = serving.wakeup
        self.signals = Signals()  # the app's own events: `refused` at arrival, `reset`, ...
        self.arrival = Arrival(self.engine, self.by_platform, access, guards, self.signals, store,
                               clock, self.wakeup)  # fmt: skip
        self.catch_up_settings = catch_up_settings(config)
        self.threads = ThreadBook(store, clock, self.ingest, self.catch_up_settings)
        self.notes: NoteBook = store
        self.installations: InstallationBook = store
        self.engine.prompts.context = self._prompt_context
        self.catch_ups: list[CatchUp] = []
        self.metrics = Metrics(PriceTable(config.prices))
        self.retention = Retention(store, clock, lambda: self.config.retention)
        self.presence = Presence(store, clock, owner, __version__)  # idle ones listed too
        self.metrics_server: MetricsServer | None = None
        self.web_server: WebServer | None = None
        self.web_panels: list[Panel] = [feedback_panel]  # extra sections of the usage view
        self.subscribe(self.metrics.observe)
        self.traces = self._traces(config)
        self._stop = asyncio.Event()
        self.serving = asyncio.Event()  # set once every front end has started
        self.failure: BurstbotError | None = None
        self.config_path: Path | None = None  # where SIGHUP re-reads the config (CLI: --config)
        self.verbose = False  # the CLI's -v, kept when a reload changes logging

    def _traces(self, config: Config) -> Traces | None:
        """OpenTelemetry traces when `[telemetry] otlp_endpoint` is set; the SDK is imported only
        then, so a bot without telemetry never loads it."""
        telemetry = config.telemetry
        if not telemetry.otlp_endpoint:
            return None
        try:
            from bot.ops.trace_export import otlp_traces
        except ImportError as exc:
            raise ConfigError(
                f"telemetry: otlp_endpoint is set but OpenTelemetry cannot be imported ({exc})"
            ) from exc
        traces = otlp_traces(telemetry.otlp_endpoint, telemetry.record_content, self.owner)
        self.subscribe(traces.observe)
        return traces

    @property
    def guards(self) -> CostGuards | None:
        return self.arrival.guards

    def _cost_guards(self, config: Config, access: AccessPolicy) -> CostGuards | None:
        if not active_limits(config.limits):
            return None
        return CostGuards(config.limits, self.store, access.is_admin, config.attachments)

    def reload(self) -> ReloadPlan | None:
        """SIGHUP: re-read `config_path` and apply what can change live (`bot/ops/reload.py`)."""
        if self.config_path is None:
            log.warning("reload: started without a config file; nothing to re-read")
            return None
        try:
            plan = plan_reload(self.config, load_config(self.config_path))
            access = AccessPolicy(plan.config.access)
            guards = self._cost_guards(plan.config, access)
        except ConfigError as exc:
            log.error("reload refused, the running config stays: %s", exc)
            self.signals.emit("reload_refused", reason=str(exc))
            return None
        if plan.config.logging != self.config.logging:
            configure_logging(plan.config, verbose=self.verbose)
        self.config, self.arrival.access, self.arrival.guards = plan.config, access, guards
        self.engine.guard = GuardStep(guards)
        self.engine.settings = engine_settings(plan.config)
        self.metrics.prices = PriceTable(plan.config.prices)
        for frontend in self.frontends:  # the live part of a front end's own section
            if declares(frontend, Reconfigurable):
                cast(Reconfigurable, frontend).reconfigure(plan.config)
        log.warning(
            "config reloaded from %s: %s", self.config_path, ", ".join(plan.applied) or "no change"
        )
        if plan.needs_restart:
            log.warning("reload: these need a restart to change: %s", ", ".join(plan.needs_restart))
        self.signals.emit("reloaded", applied=plan.applied, needs_restart=plan.needs_restart)
        return plan

    def subscribe(self, listener: Listener) -> None:
        """Engine events plus the app's own (`refused` at arrival, `reset`)."""
        self.engine.subscribe(listener)
        self.signals.subscribe(listener)

    # Host ------------------------------------------------------------------------------------
    async def ingest(self, event: Event) -> IngestResult:
        return await self.arrival.ingest(event)

    async def click(self, click: Click) -> ClickAnswer:
        """A button press (G16): decided by the engine; `[access] admin_ids` may stop anyone's."""
        admin = self.arrival.access.is_admin(click.key.platform, click.clicker_id)
        return await self.engine.click(click, admin)

    async def vote(self, vote: Vote) -> VoteAnswer:
        """A 👍/👎 press (G16): anyone who sees the answer may vote."""
        return await self.engine.vote(vote)

    async def flush(self, key: ConversationKey) -> None:
        await self.engine.flush(key)

    async def _prompt_context(self, key: ConversationKey) -> str:
        """What the conversation's front end adds to the system prompt (`PromptContext`).
        Bounded, and a courtesy: a failure answers without it."""
        source = prompt_context_of(self.by_platform.get(key.platform))
        if source is None:
            return ""
        try:
            async with asyncio.timeout(PROMPT_CONTEXT_SECONDS):
                return str(await source.prompt_context(key))
        except (TimeoutError, BurstbotError) as exc:
            log.warning("conversation %s: answering without its context (%s)", key.id,
                        exc or "timed out")  # fmt: skip
            return ""

    async def is_settled(self, key: ConversationKey) -> bool:
        return await self.engine.is_settled(key)

    async def typing(self, key: ConversationKey, author_id: str) -> None:
        debounce = self.config.debounce
        if not debounce.typing_aware:
            return
        due = await author_typing(self.store, self.clock, debounce.typing_seconds, key, author_id)
        if due is not None:
            self.signals.emit("typing", conversation=key.id, due_at=due)

    def request_stop(self) -> None:
        self._stop.set()

    def frontend_failed(self, platform: str, error: BurstbotError) -> None:
        """Stop everything cleanly; `run` then raises the first such error (the CLI exits 1, or 2
        for a configuration problem), so a supervisor sees a failure and restarts the process."""
        log.info("%s front end failed (%s); stopping", platform, error)
        self._fail(error)

    def _fail(self, error: BurstbotError) -> None:
        if self.failure is None:
            self.failure = error
        self.request_stop()

    async def _check_tool_servers(self, hub: McpHub) -> None:
        """A config mistake a server's first connection attempt finds (an allowed tool it does
        not list) stops the process as a front end failing for good does (exit 2). Nothing else
        waits for the servers: a slow one's tools arrive when it connects."""
        try:
            await hub.first_attempts()
        except ConfigError as error:
            self._fail(error)

    def start_catch_up(self, frontends: list[Frontend], before: float) -> None:
        """Front ends that can, fetch in the background what was sent while none of them listened
        (`before`: when they began connecting); each keeps its runner for its reconnects."""
        if not self.catch_up_settings.enabled:
            return
        clock, settings = self.clock, self.catch_up_settings
        for frontend in frontends:
            if (source := catch_up_source(frontend)) is not None:
                memory = self.threads.memory
                catch_up = CatchUp(frontend.platform, source.catch_up, memory, self.ingest, clock,
                                   settings)  # fmt: skip
                source.use_catch_up(catch_up)
                self.catch_ups.append(catch_up)
                catch_up.request(before)

    def hint(self, payload: str) -> None:
        """Another process armed a timer, queued a reply, released leases or decided a stop
        (bot/core/hints.py)."""
        stopped = stopped_conversation(payload)
        if stopped is not None:
            self.engine.supervisor.newer_input(stopped)  # its watch here reads the store now
        if wanted(payload, self.wakeup.sleeping_until, self.by_platform):
            self.wakeup.wake()

    # lifecycle -------------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve until asked to stop (signal or a front end), then shut down cleanly; raise the
        error of a front end that failed for good, once everything has stopped."""
        await self.store.open()
        try:  # an MCP token variable that is not set (exit 2), the metrics port taken
            if self.mcp is not None:
                self.mcp.start()
            await self.store.listen(self.hint)
            if self.config.metrics.enabled:
                metrics = self.config.metrics
                health = Health(self.store, self.frontends, self.metrics, self.clock,
                                lambda: self.engine.busy)  # fmt: skip
                server = MetricsServer(
                    self.metrics, health.report, metrics.host, metrics.port, health.refresh
                )
                await server.start()
                self.metrics_server = server
            if self.config.web.enabled:
                await self._start_web()
        except BaseException:
            if self.metrics_server is not None:
                await self.metrics_server.stop()
            if self.mcp is not None:
                await self.mcp.close()
            await self.store.close()
            raise
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
        await self.presence.see()
        sweeper = asyncio.create_task(self.retention.run())
        watchers = [sweeper, asyncio.create_task(self.presence.run())]
        if self.mcp is not None:
            watchers.append(asyncio.create_task(self._check_tool_servers(self.mcp)))
        started: list[Frontend] = []
        connecting_at = self.clock.now()
        try:
            for frontend in self.frontends:
                await frontend.start(self)
                started.append(frontend)
            self.start_catch_up(started, connecting_at)
            log.info("burstbot running as %s", self.owner)
            self.serving.set()
            await first_of(self._stop.wait(), scheduler)
        finally:
            await cancel_all(watchers)
            await self._shutdown(started, scheduler)
            for sig in handlers:
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(sig)
        if self.failure is not None:
            raise self.failure

    async def _start_web(self) -> None:
        """The operator's page (`[web]`), over this process: its leases, MCP servers, wake-up."""
        from bot.web.server import WebContext, WebServer

        context = WebContext(lambda: self.config, self.store, self.clock, self.owner, self.mcp,
                             self.wakeup.wake, self.web_panels)  # fmt: skip
        server = WebServer(self.config.web, context)
        await server.start()
        self.web_server = server

    async def _shutdown(self, started: list[Frontend], scheduler: asyncio.Task[None]) -> None:
        """In this order, so no reply is cut off halfway and nothing waits on a dead process:
        stop intake; stop taking work (generations are cancelled); let commits and deliveries
        in flight finish within the grace period (then cancel them); stop the front
        ends; release our leases and delivery claims; remove this process's row; close the store."""
        for frontend in started:
            try:
                await stop_intake(frontend)
            except Exception as exc:  # shutdown goes on: the platform retries what it cannot hand
                log.warning("shutdown: %s could not stop taking events (%r)", frontend.platform,
                            exc)  # fmt: skip
        self.engine.stop_taking_work()
        self.scheduler.stop()
        await asyncio.gather(scheduler, return_exceptions=True)
        await self.engine.finish(self.shutdown_grace)
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
        else:  # with the store unreachable the row is left to show as gone: no second wait
            await self.presence.leave()
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        if self.web_server is not None:
            await self.web_server.stop()
        if self.mcp is not None:
            await self.mcp.close()
        await self.store.close()
        if self.traces is not None:  # what is buffered goes out, bounded by the export timeout
            await asyncio.to_thread(self.traces.shutdown)
        replier = self.replier
        if declares(replier, Closable):
            try:
                await cast(Closable, replier).aclose()
            except Exception as exc:  # only the model client's connections are left behind
                log.warning("shutdown: the model client did not close cleanly (%r)", exc)
