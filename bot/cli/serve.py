"""How `burstbot run` runs: its event loop (uvloop where installed), and `--workers N` processes
on one HTTP port (docs/scaling.md). Every guarantee already holds across processes on one store;
only Slack's HTTP mode can share a port (SO_REUSEPORT), and SQLite's one writer is for one process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

from bot.config import Config
from bot.core.clock import first_of

log = logging.getLogger("burstbot")

T = TypeVar("T")


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop
    except ImportError:  # Windows, or installed without it
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


# `burstbot run --workers N` --------------------------------------------------------------------
WORKERS_NEED_HTTP = (
    "--workers {n}: several processes can share only Slack's HTTP endpoint; Socket Mode, Discord "
    "and the terminal keep one connection per process. Run those with --workers 1 (the default), "
    'or enable only [slack] with mode = "http"'
)
WORKERS_NEED_POSTGRES = (
    "--workers {n}: several processes need PostgreSQL; SQLite is for one process "
    '(set [storage] url = "postgresql://...", or run with --workers 1)'
)


def workers_refusal(config: Config, workers: int) -> str | None:
    """Why this config cannot run as `workers` processes on one port and one store, if it can't."""
    if workers < 1:
        return "--workers must be at least 1"
    if workers == 1:
        return None
    if config.storage.url.startswith("sqlite://"):
        return WORKERS_NEED_POSTGRES.format(n=workers)
    http_only = config.slack.enabled and config.slack.mode == "http"
    if not http_only or config.console.enabled or config.discord.enabled:
        return WORKERS_NEED_HTTP.format(n=workers)
    return None


def for_worker(config: Config, index: int) -> Config:
    """One worker's view of the shared config: the HTTP port is shared (SO_REUSEPORT), the metrics
    port is offset by the worker's index, only worker 0 catches up on start and serves the
    operator's page (sessions are one process's; the store shows every worker's work), and the
    pid file names the parent, which passes a reload on to every worker."""
    return config.model_copy(
        update={
            "slack": config.slack.model_copy(update={"http_reuse_port": True}),
            "engine": config.engine.model_copy(update={"pid_file": ""}),  # the parent's, see below
            "metrics": config.metrics.model_copy(update={"port": config.metrics.port + index}),
            "web": config.web.model_copy(update={"enabled": config.web.enabled and index == 0}),
            "catch_up": config.catch_up.model_copy(
                update={"enabled": config.catch_up.enabled and index == 0}
            ),
        }
    )


async def run_workers(config_path: str, workers: int, verbose: bool, pid_file: str) -> int:
    """Start `workers` processes of `burstbot run` and wait. SIGINT/SIGTERM is passed on to every
    worker (each shuts down cleanly), and SIGHUP too (each reloads); `pid_file` names this
    process. When one worker exits, the others are stopped too, so a supervisor restarts the
    whole set. The exit code is the first failing worker's, else 0."""
    from bot.ops.reload import pid_file as recorded

    with recorded(pid_file):
        args = [sys.executable, "-m", "bot", "run", "--config", config_path]
        children = [
            await asyncio.create_subprocess_exec(*args, "--worker", str(i), *(["-v"] * verbose))
            for i in range(workers)
        ]
        log.info("started %d workers: %s", workers, ", ".join(str(c.pid) for c in children))
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopping.set)
        loop.add_signal_handler(signal.SIGHUP, _pass_on, children, signal.SIGHUP)
        exits = [asyncio.ensure_future(child.wait()) for child in children]
        await first_of(stopping.wait(), *exits)
        _pass_on(children, signal.SIGTERM)
        codes = await asyncio.gather(*exits)
        return next((code for code in codes if code != 0), 0)


def _pass_on(children: list[asyncio.subprocess.Process], sig: signal.Signals) -> None:
    for child in children:
        if child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(sig)
