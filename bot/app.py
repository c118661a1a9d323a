"""The composition root: config → store, replier, engine, scheduler and front ends."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from bot.clock import Clock, SystemClock
from bot.config import Config, require_secret
from bot.engine import Engine, EngineSettings
from bot.errors import ConfigError
from bot.events import ConversationKey, Event
from bot.frontend import Frontend
from bot.replier import OfflineReplier, Replier
from bot.scheduler import Scheduler
from bot.store import IngestResult, Store

log = logging.getLogger("burstbot")


@runtime_checkable
class WakeupHints(Protocol):
    """A store that can tell this process when another one armed a timer or queued a reply."""

    async def listen(self, hint: Callable[[str], None]) -> None: ...


def make_owner(config: Config) -> str:
    if config.engine.owner:
        return config.engine.owner
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def build_replier(config: Config) -> Replier:
    if config.llm.provider == "offline":
        return OfflineReplier()
    require_secret(config.llm.api_key_env, "llm.api_key_env")  # before the SDK's slow import
    from bot.claude import ClaudeReplier

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

        frontends.append(build_discord_frontend(config.discord))
    if not frontends:
        raise ConfigError("config: no front end enabled (console, slack or discord)")
    return frontends


def build_store(config: Config) -> Store:
    from storage import open_store

    return open_store(config.storage.url, config.storage.pool_size)


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
    ) -> None:
        self.config = config
        self.store = store
        self.frontends = frontends
        self.engine = Engine(
            store,
            replier,
            clock or SystemClock(),
            EngineSettings.from_config(config),
            owner or make_owner(config),
            {f.platform: f for f in frontends},
        )
        self.scheduler = Scheduler(self.engine)
        self._stop = asyncio.Event()

    # Host ------------------------------------------------------------------------------------
    async def ingest(self, event: Event) -> IngestResult:
        return await self.engine.ingest(event)

    async def flush(self, key: ConversationKey) -> None:
        await self.engine.flush(key)

    async def is_settled(self, key: ConversationKey) -> bool:
        return await self.engine.is_settled(key)

    def request_stop(self) -> None:
        self._stop.set()

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
            wanted = detail in engine.frontends
        else:
            wanted = True
        if wanted:
            engine.wakeup.set()

    # lifecycle -------------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve until asked to stop (signal or a front end), then shut down cleanly."""
        await self.store.open()
        if isinstance(self.store, WakeupHints):
            await self.store.listen(self.hint)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop)
        scheduler = asyncio.create_task(self.scheduler.run())
        started: list[Frontend] = []
        try:
            for frontend in self.frontends:
                await frontend.start(self)
                started.append(frontend)
            log.info("burstbot running as %s", self.engine.owner)
            stop = asyncio.create_task(self._stop.wait())
            await asyncio.wait({stop, scheduler}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
        finally:
            for frontend in started:
                with contextlib.suppress(Exception):
                    await frontend.stop()
            self.scheduler.stop()
            await asyncio.gather(scheduler, return_exceptions=True)
            await self.engine.shutdown()
            await self.store.close()
            closer = getattr(self.engine.replier, "aclose", None)
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer()
