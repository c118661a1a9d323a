"""Shared fixtures: a real SQLite store, a fake clock, a scripted replier, a recording front end."""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import discord
import pytest

from bot.core import secrets
from bot.core.engine import Engine
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.settings import EngineSettings
from bot.ops.logs import HANDLER_NAME as LOG_HANDLER_NAME
from bot.wiring import Serving, build_serving
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock
from testkit.fake_anthropic import FakeAnthropic
from testkit.fake_discord import FakeDiscord
from tests import pg


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under CI=true a PostgreSQL test that skipped (by any route) is reported as failed."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and pg.required() and pg.DSN_ENV in str(report.longrepr):
        report.outcome = "failed"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow tests first: the workers hand tests out in this order, so the minute-long runs start
    at once, side by side, and the short tests fill the gaps instead of waiting behind them."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


SETTINGS = EngineSettings(
    quiet_seconds=1.5,
    max_wait_seconds=8.0,
    lease_ttl_seconds=30.0,
    poll_seconds=1.0,
    model_backoff_seconds=2.0,
    failure_message="sorry, try again",
    adaptive=False,  # a fixed window and no early start: tests that want them say so
    speculate=False,
    streaming=False,
    system_prompt="You are a helpful assistant.",
)
KEY = ConversationKey("test", "w1", "c1")


SQLITE_WORKER = "_connection_worker_thread"  # aiosqlite's thread, one per open connection
_outlived: dict[int | None, str] = {}  # a connection's thread → the first test it outlived
_exit_status: list[int] = [0]


@pytest.fixture(autouse=True)
def _note_open_connections(request: pytest.FixtureRequest) -> Iterator[None]:
    """Remember which test left a SQLite connection open, to name it if it never closes."""
    yield
    for thread in threading.enumerate():
        if SQLITE_WORKER in thread.name:
            _outlived.setdefault(thread.ident, request.node.nodeid)


@pytest.fixture(autouse=True)
def _drop_the_bots_log_handler() -> Iterator[None]:
    """A test that runs the CLI in-process installs burstbot's root handler on that test's captured
    stderr; left behind, every later log line goes to a closed file ("--- Logging error ---")."""
    root = logging.getLogger()
    level = root.level
    yield
    for handler in [h for h in root.handlers if h.get_name() == LOG_HANDLER_NAME]:
        root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture(autouse=True)
def _forget_the_tests_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The secrets a test's process learned (`bot.core.secrets` is process-wide) end with the
    test: a later test in the same worker must not see its own text redacted by another test's
    made-up token."""
    monkeypatch.setattr(secrets, "_lasting", set())
    monkeypatch.setattr(secrets, "_slots", {})
    monkeypatch.setattr(secrets, "_ordered", ())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _exit_status[0] = int(exitstatus)


def pytest_unconfigure(config: pytest.Config) -> None:
    """An aiosqlite connection nobody closed keeps a non-daemon thread that Python waits for at
    exit, forever: the run would print its summary and never end. Collect garbage (an unclosed
    connection's finalizer stops its thread), then name any left and exit with the run's status."""
    gc.collect()
    left = [t for t in threading.enumerate() if SQLITE_WORKER in t.name and t.is_alive()]
    if left:
        named = ", ".join(sorted({_outlived.get(t.ident, "?") for t in left}))
        print(f"\n{len(left)} SQLite connection(s) left open, first outliving: {named}")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit_status[0])


def message(n: int | str, text: str | None = None, key: ConversationKey = KEY) -> IncomingMessage:
    return IncomingMessage(key, f"m{n}", "u1", "alice", text if text is not None else f"text {n}")


@pytest.fixture
async def store() -> AsyncIterator[SqliteStore]:
    s = SqliteStore(":memory:")
    await s.open()
    yield s
    await s.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def frontend() -> RecordingFrontend:
    return RecordingFrontend()


def make_serving(
    store: SqliteStore,
    clock: FakeClock,
    replier: ScriptedReplier,
    frontend: RecordingFrontend | None,
    owner: str = "w1",
    **overrides: object,
) -> Serving:
    """An engine with its scheduler, outbox and indicator, wired as the app wires them."""
    settings = replace(SETTINGS, **overrides)  # type: ignore[arg-type]
    frontends = {frontend.platform: frontend} if frontend is not None else {}
    return build_serving(store, replier, clock, settings, owner, frontends)


def make_engine(
    store: SqliteStore,
    clock: FakeClock,
    replier: ScriptedReplier,
    frontend: RecordingFrontend | None,
    owner: str = "w1",
    **overrides: object,
) -> Engine:
    return make_serving(store, clock, replier, frontend, owner, **overrides).engine


@pytest.fixture
async def server() -> AsyncIterator[FakeAnthropic]:
    """The fake Anthropic Messages API on 127.0.0.1."""
    fake = await FakeAnthropic().start()
    yield fake
    await fake.stop()


@pytest.fixture
async def fake_discord(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    """The fake Discord on 127.0.0.1, with discord.py's REST and gateway pointed at it."""
    async with FakeDiscord() as server:
        monkeypatch.setattr(discord.http.Route, "BASE", server.api_base)
        monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", server.gateway_url)
        yield server
