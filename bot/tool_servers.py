"""MCP servers through the official `mcp` SDK: one session per server per process (docs/tools.md).

- Each server has a runner task that owns its transport and session (the SDK's context managers
  must open and close in one task): it connects, initializes, lists the tools, then holds the
  session until a call finds it broken; it reconnects with capped, jittered backoff.
- Starting never waits for a server: its tools arrive when it connects. A token variable that is
  not set is a config mistake found at once (one line, exit 2); an allowed tool the server does
  not list is one when the first connection attempt finds it (`first_attempts`: the app stops,
  exit 2), an error line when a later one does. A server that cannot be reached is not a
  mistake: its tools are left out of prompts (the answer says so) while the runner keeps trying.
- A stdio server gets the SDK's few safe variables (HOME, PATH, ...) and exactly those its entry
  names (`env`, `pass_env`): never burstbot's own secrets unless named one by one.
- Every line about a server names it and its command or URL (without credentials or query).
- A call that gets no answer (the connection broke, the timeout passed) is `OutcomeUnknown`:
  it may have run. A call that could not be sent is `ToolUnavailable`.
- The bearer token is read from the environment when connecting and never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx2
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from bot.config import McpServerConfig, require_secret
from bot.core.backoff import Backoff
from bot.core.clock import Clock, SystemClock, cancel_all
from bot.core.errors import ConfigError
from bot.core.tools import (
    OutcomeUnknown,
    ToolOutput,
    ToolSpec,
    ToolUnavailable,
    idempotency_argument,
)

log = logging.getLogger("burstbot.tools")

CONNECT_SECONDS = 20.0
RECONNECT_BACKOFF = Backoff(0.5, 30.0, jitter=0.5)  # spread: every process reconnects at once


class CannotStart(Exception):
    """A stdio server's command could not be run (not found, not executable)."""


class McpServer:
    """One configured server and its one session."""

    def __init__(
        self,
        config: McpServerConfig,
        environ: Mapping[str, str] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.environ = os.environ if environ is None else environ
        self.clock = clock or SystemClock()
        self.label = f"MCP server {config.name!r} ({_where(config)})"
        self.specs: dict[str, ToolSpec] = {}
        self.session: ClientSession | None = None
        self._broken = asyncio.Event()
        self._first_attempt = asyncio.Event()
        self._closing = False
        self._reported: set[int] = set()  # the levels logged since the server was last up
        self._config_error: ConfigError | None = None
        self._runner: asyncio.Task[None] | None = None

    @property
    def up(self) -> bool:
        return self.session is not None and not self._broken.is_set()

    def check_environment(self) -> None:
        """What can be checked before connecting: a token variable that is not set is a config
        mistake; a `pass_env` variable that is not set, a warning (the server may not need it)."""
        config = self.config
        if config.bearer_token_env:
            setting = f"tools.mcp.{config.name}.bearer_token_env"
            require_secret(config.bearer_token_env, setting, self.environ)
        for name in config.pass_env:
            if name not in self.environ:
                log.warning("%s: pass_env names %s, which is not set; the server starts without it",
                            self.label, name)  # fmt: skip

    def start(self) -> None:
        """Connect in the background: nothing waits for the server (see `first_attempt`)."""
        self._runner = asyncio.create_task(self._run(), name=f"mcp {self.config.name}")

    async def first_attempt(self) -> None:
        """Until the first connection attempt has ended, connected or not; raises the config
        mistake it found (an allowed tool the server does not list)."""
        await self._first_attempt.wait()
        if self._config_error is not None:
            raise self._config_error

    async def close(self) -> None:
        self._closing = True
        self._broken.set()
        if self._runner is not None:
            await cancel_all([self._runner])

    async def _run(self) -> None:
        failures = 0
        while not self._closing:
            try:
                await self._serve_one_session()
                failures = 0
            except Exception as exc:  # anyio groups wrap what the transport raised
                mistake = _leaf(exc)
                if isinstance(mistake, ConfigError):
                    if not self._first_attempt.is_set():
                        self._config_error = mistake  # `first_attempt` raises it
                        return
                    self._went_down(f"{mistake}; its tools are off until it lists them",
                                    logging.ERROR)  # fmt: skip
                else:
                    self._went_down(f"{_reason(exc)}; its tools are off until it answers")
            finally:
                self.session = None
                self._first_attempt.set()
            failures += 1
            await self.clock.sleep(RECONNECT_BACKOFF.delay(failures))

    async def _serve_one_session(self) -> None:
        async with contextlib.AsyncExitStack() as stack:
            async with asyncio.timeout(CONNECT_SECONDS):  # not wait_for: the SDK's scopes stay here
                streams = await self._transport(stack)
                session = await stack.enter_async_context(ClientSession(*streams))
                await session.initialize()
                listed = (await session.list_tools()).tools
            self.specs = self._allowed({tool.name: tool for tool in listed})
            self._broken.clear()
            self.session = session
            if self._reported:
                log.info("%s: connected again; its tools are back", self.label)
            self._reported.clear()
            self._first_attempt.set()
            await self._broken.wait()

    async def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        config = self.config
        if config.command is not None:
            passed = {name: self.environ[name] for name in config.pass_env if name in self.environ}
            params = StdioServerParameters(command=config.command, args=list(config.args),
                                           env={**passed, **config.env})  # fmt: skip
            try:
                return await stack.enter_async_context(stdio_client(params, errlog=sys.stderr))
            except OSError as exc:  # raised by the spawn, before any stream exists
                raise CannotStart(exc.strerror or str(exc)) from None
        assert config.url is not None
        headers: dict[str, str] = {}
        if config.bearer_token_env:
            setting = f"tools.mcp.{config.name}.bearer_token_env"
            token = require_secret(config.bearer_token_env, setting, self.environ)
            headers["Authorization"] = f"Bearer {token}"
        timeout = httpx2.Timeout(CONNECT_SECONDS, read=config.timeout_seconds + 5)
        client = await stack.enter_async_context(
            httpx2.AsyncClient(headers=headers, timeout=timeout)
        )
        return await stack.enter_async_context(
            streamable_http_client(config.url, http_client=client)
        )

    def _allowed(self, listed: Mapping[str, Any]) -> dict[str, ToolSpec]:
        specs: dict[str, ToolSpec] = {}
        for name in self.config.allowed_tools:
            tool = listed.get(name)
            if tool is None:
                offered = ", ".join(sorted(listed)) or "none"
                raise ConfigError(
                    f"tools.mcp.{self.config.name}.allowed_tools: the server lists no tool "
                    f"{name!r} (it lists: {offered})"
                )
            annotations = tool.annotations
            read_only = bool(annotations is not None and annotations.read_only_hint)
            schema = dict(tool.input_schema or {"type": "object"})
            specs[name] = ToolSpec(self.config.name, name, tool.description or "", schema,
                                   read_only, idempotency_argument(schema),
                                   self.config.asks(name, read_only))  # fmt: skip
        return specs

    def _went_down(self, what: str, level: int = logging.WARNING) -> None:
        """One line per outage and level (a config mistake after an outage is still told),
        naming the server and where it runs."""
        if level not in self._reported:
            log.log(level, "%s: %s", self.label, what)
        self._reported.add(level)

    async def call(
        self, spec: ToolSpec, arguments: dict[str, Any], idempotency_key: str
    ) -> ToolOutput:
        session = self.session
        if session is None or self._broken.is_set():
            raise ToolUnavailable(f"{self.config.name} is unavailable")
        if spec.idempotency_argument is not None:
            arguments = {**arguments, spec.idempotency_argument: idempotency_key}
        try:
            async with asyncio.timeout(self.config.timeout_seconds):
                result = await session.call_tool(spec.name, arguments)
        except TimeoutError:
            raise OutcomeUnknown(
                f"no answer within {self.config.timeout_seconds:g}s: it may have run"
            ) from None
        except MCPError as exc:
            if exc.code == -32000:  # the connection closed under the call
                self._broken.set()
                raise OutcomeUnknown(f"the connection to {self.config.name} broke") from None
            return ToolOutput(f"error {exc.code}: {exc.message}", failed=True)
        except Exception as exc:  # the transport failed under the call
            self._broken.set()
            raise OutcomeUnknown(
                f"the connection to {self.config.name} broke: {_reason(exc)}"
            ) from None
        return ToolOutput(_text_of(result), failed=bool(getattr(result, "is_error", False)))


def _text_of(result: Any) -> str:
    """A result as text: its text blocks; other blocks named; structured content if no text."""
    parts: list[str] = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "")
        parts.append(block.text if kind == "text" else f"[{kind} content not shown]")
    if not parts and getattr(result, "structured_content", None):
        parts.append(str(result.structured_content))
    return "\n".join(parts)


def _where(config: McpServerConfig) -> str:
    """A server's command, or its URL without credentials, query or fragment (tokens live there)."""
    if config.command is not None:
        return f"command {config.command!r}"
    assert config.url is not None
    url = urlsplit(config.url)
    host = url.hostname or ""
    port = f":{url.port}" if url.port is not None else ""
    return f"{url.scheme}://{host}{port}{url.path}"


def _leaf(exc: BaseException) -> BaseException:
    """The first exception inside (task) groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _reason(exc: BaseException) -> str:
    """One short line for a failure (a group's first leaf), never a traceback."""
    exc = _leaf(exc)
    if isinstance(exc, CannotStart):
        return f"cannot start: {exc}"
    if isinstance(exc, TimeoutError):
        return f"no answer within {CONNECT_SECONDS:g}s"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return "unavailable: " + (f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__)


class McpHub:
    """Every configured server (`ToolServers`): started with the process, closed with it."""

    def __init__(
        self,
        configs: Sequence[McpServerConfig],
        environ: Mapping[str, str] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.servers = {config.name: McpServer(config, environ, clock) for config in configs}

    def start(self) -> None:
        """Check every server's environment (a config mistake raises before any starts), then
        connect them all in the background."""
        for server in self.servers.values():
            server.check_environment()
        for server in self.servers.values():
            server.start()

    async def first_attempts(self) -> None:
        """Until each server's first connection attempt has ended; raises the first config
        mistake one found."""
        await asyncio.gather(*(server.first_attempt() for server in self.servers.values()))

    async def close(self) -> None:
        await asyncio.gather(*(server.close() for server in self.servers.values()))

    def tools(self, servers: Sequence[str]) -> tuple[list[ToolSpec], list[str]]:
        specs: list[ToolSpec] = []
        down: list[str] = []
        for name in servers:
            server = self.servers.get(name)
            if server is None or not server.up:
                down.append(name)
            else:
                specs += server.specs.values()
        return specs, down

    async def call(
        self, spec: ToolSpec, arguments: dict[str, Any], idempotency_key: str
    ) -> ToolOutput:
        server = self.servers.get(spec.server)
        if server is None:
            raise ToolUnavailable(f"{spec.server} is not configured")
        return await server.call(spec, arguments, idempotency_key)
