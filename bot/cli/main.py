"""`burstbot` command line. Errors a user can fix print one line and exit 2; no tracebacks."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from bot import __version__
from bot.cli.serve import for_worker, run_event_loop, run_workers, workers_refusal
from bot.config import Config, default_config, load_config
from bot.core.errors import BurstbotError, ConfigError
from bot.core.secrets import redact
from bot.ops.logs import configure_logging
from bot.ops.usage import GROUPINGS

if TYPE_CHECKING:
    from bot.app import App
    from storage.sql_store import SqlStore

EXIT_USAGE = 2
T = TypeVar("T")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="burstbot", description=__doc__)
    parser.add_argument("--version", action="version", version=f"burstbot {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    config_file = argparse.ArgumentParser(add_help=False)
    config_file.add_argument(
        "--config", help="TOML config file (default: terminal chat, ./burstbot.db)"
    )

    def reading_config(name: str, help: str) -> argparse.ArgumentParser:
        """A command that takes `--config`, as every one but `reload` (its own help) and `demo`."""
        return commands.add_parser(name, parents=[config_file], help=help)

    run = reading_config("run", "serve every enabled front end (terminal by default)")
    run.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    run.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes serving Slack's HTTP endpoint on one port and one store (default 1)",
    )
    run.add_argument("--worker", type=int, help=argparse.SUPPRESS)  # set by --workers
    check = reading_config("check-config", "validate the config and its secrets")
    check.add_argument(
        "--service",
        action="store_true",
        help="also check what running unattended needs (absolute paths, writable directories)",
    )
    status = reading_config("status", "what is in flight: input, timers, leases, outbox")
    status.add_argument("--all", action="store_true", help="every conversation, idle ones too")
    status.add_argument("--limit", type=int, default=10, help="recent conversations shown")
    status.add_argument("--workspace", help="one workspace's conversations (a Slack team id)")
    reading_config("workspaces", "the Slack workspaces installed through Add to Slack")
    explain = reading_config("explain", "one conversation's timeline from stored data")
    explain.add_argument(
        "conversation", type=_conversation, help="platform/workspace/channel/thread (see status)"
    )
    explain.add_argument(
        "--redact", action="store_true", help="show message and reply lengths, not their text"
    )
    retry = reading_config(
        "retry", "post again a reply whose delivery failed (see status and explain)"
    )
    retry.add_argument(
        "target", type=_retry_target, help="a reply id (r12) or a conversation: its failed replies"
    )
    reload = commands.add_parser(
        "reload", help="make a running `burstbot run` re-read its config (SIGHUP)"
    )
    reload.add_argument("--config", help="the config file (its engine.pid_file names the process)")
    reload.add_argument("--pid", type=int, help="the process to signal (instead of the pid file)")
    usage = reading_config("usage", "model tokens and estimated cost, from the store")
    usage.add_argument(
        "--since",
        type=_since,
        default=0.0,
        help="7d, 24h, 30m, or a UTC date (default: everything)",
    )
    usage.add_argument("--by", choices=GROUPINGS, default="model")
    usage.add_argument("--workspace", help="one workspace's generations (a Slack team id)")
    forget = reading_config("forget", "erase a person's or a conversation's stored text")
    who = forget.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", help="a user id, or platform:id (slack:U123, discord:4711)")
    who.add_argument(
        "--conversation", type=_conversation, help="platform/workspace/channel/thread (see status)"
    )
    who.add_argument("--workspace", help="every conversation of a Slack workspace (T123)")
    reading_config(
        "web", "serve the operator's page from the database, without running the bot ([web])"
    )
    reading_config("migrate", "create or upgrade the database schema")
    backup = reading_config(
        "backup", "copy the SQLite database while the bot runs (PostgreSQL: pg_dump's line)"
    )
    backup.add_argument("path", help="the new file to write (never overwritten)")
    demo = commands.add_parser("demo", help="watch a scripted fast typer get one reply per burst")
    demo.add_argument("--quiet", type=float, default=0.6, help="quiet window in seconds")
    demo.add_argument("--database", help="keep the demo's SQLite database at this path")
    return parser


def _argument(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argument parsed when the command line is: a bad one is a usage error naming it."""

    def parsed(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parsed


@_argument
def _conversation(text: str) -> str:
    from bot.cli.explain import normalize_conversation_id

    return normalize_conversation_id(text)


@_argument
def _retry_target(text: str) -> int | str:
    """A reply id, else a conversation id."""
    from bot.ops.requeue import reply_id_of

    reply_id = reply_id_of(text)
    return _conversation(text) if reply_id is None else reply_id


@_argument
def _since(text: str) -> float:
    from bot.ops.usage import parse_since

    return parse_since(text)


async def _run(config: Config, path: str | None, verbose: bool) -> None:
    from bot.app import App
    from bot.ops.reload import pid_file
    from bot.wiring import build_frontends, build_replier, build_store

    replier = build_replier(config)
    frontends = build_frontends(config)
    store = build_store(config)
    logging.getLogger("burstbot").info("replier: %s", config.llm.provider)
    try:
        app = App(config, store, replier, frontends)
        app.config_path, app.verbose = (Path(path) if path else None), verbose
        with pid_file(config.engine.pid_file):
            await serve(app)
    finally:
        await _close_quietly(store)  # also when startup or shutdown failed half-way


async def serve(app: App) -> None:
    """`app.run()`; once every front end serves, the objects alive then (modules, SDKs, config:
    about 200,000) go to the collector's permanent generation. Every full collection walked them
    all and stopped the loop for 115 to 175 ms on a two-core host: every ack and edit waited."""
    frozen = asyncio.create_task(_freeze_once_serving(app))
    try:
        await app.run()
    finally:
        frozen.cancel()


async def _freeze_once_serving(app: App) -> None:
    await app.serving.wait()
    gc.collect()  # startup's garbage is freed, not frozen
    gc.freeze()


def _reload(config: Config, path: str | None, pid: int | None) -> int:
    """Check the file first (a broken one is refused here too), then signal the process."""
    from bot.ops.reload import read_pid_file, send_reload

    if pid is None:
        if not config.engine.pid_file:
            raise ConfigError("reload: give --pid, or set engine.pid_file in the config")
        pid = read_pid_file(config.engine.pid_file)
    send_reload(pid)
    print(f"burstbot: asked process {pid} to reload {path or 'its config'} (see its log)")
    return 0


async def _close_quietly(store: SqlStore[Any]) -> None:
    """Close the store whatever happened before; a failure to close is logged, not raised, so
    the error that stopped the command is the one reported."""
    try:
        await store.close()
    except Exception as exc:
        logging.getLogger("burstbot").warning("closing the store failed: %s", exc)


async def _with_store(config: Config, command: str, args: argparse.Namespace) -> int:
    from bot.cli.explain import explain_lines
    from bot.cli.status import status_lines
    from bot.ops.inspection import printable
    from bot.wiring import build_store

    if command != "migrate":
        _existing_database(config)
    store: SqlStore[Any] = build_store(config)
    try:
        await store.open()
        if command == "migrate":
            version = store.schema_version
            from bot.cli.check import display_url

            print(f"{display_url(config.storage.url)}: schema at version {version}, up to date")
            return 0
        now = time.time()
        if command == "status":
            lines = await status_lines(
                store, now, show_all=args.all, limit=args.limit, workspace=args.workspace
            )
        elif command == "workspaces":
            from bot.cli.workspaces import workspace_lines

            lines = await workspace_lines(store, now)
        elif command == "forget":
            from bot.ops.retention import forget

            lines = [await forget(store, now, args.user, args.conversation, args.workspace)]
        elif command == "retry":
            from bot.ops.requeue import requeue_conversation, requeue_reply

            if isinstance(args.target, int):
                lines = [await requeue_reply(store, args.target, now)]
            else:
                lines = [await requeue_conversation(store, args.target, now)]
        elif command == "usage":
            from bot.cli.status import in_workspace
            from bot.ops.usage import (
                PriceTable,
                summarize,
                tool_call_lines,
                usage_lines,
                vote_lines,
            )

            generations = await store.generations()
            votes = await store.votes(since=args.since or 0.0)
            if args.workspace:
                generations = [g for g in generations if in_workspace(g.conversation_id,
                                                                     args.workspace)]  # fmt: skip
                votes = [v for v in votes if in_workspace(v.conversation_id, args.workspace)]
            rows, total = summarize(generations, PriceTable(config.prices), args.by, args.since)
            lines = usage_lines(rows, total, args.by, args.since)
            lines += vote_lines(votes, args.by)
            lines += tool_call_lines(await store.actions_since(args.since))
        else:
            cid = args.conversation
            found = await explain_lines(store, cid, now, redact=args.redact)
            if found is None:
                print(f"burstbot: no conversation {cid!r} (see `burstbot status --all`)",
                      file=sys.stderr)  # fmt: skip
                return 1
            lines = found
        _show(*(printable(line) for line in lines))
        return 0
    finally:
        await _close_quietly(store)


def _existing_database(config: Config) -> Path | None:
    """The SQLite file an operator command reads, which must exist already and be this user's
    to open: a command must never create an empty database beside the real one."""
    from bot.cli.check import sqlite_path

    path = sqlite_path(config.storage.url)
    if path is None:
        return None
    database = Path(path)
    if not database.exists():
        if database.is_absolute():
            raise ConfigError(f"storage.url: no database at {database} (run `burstbot migrate`)")
        raise ConfigError(
            f"storage.url: no database at {database} in {Path.cwd()}: the path is relative to "
            "the current directory; use the bot's absolute path in storage.url (or run from its "
            "working directory). `burstbot migrate` creates a new, empty one"
        )
    if not os.access(database, os.R_OK | os.W_OK):
        raise ConfigError(
            f"storage.url: {database} is not readable and writable by this user; run the "
            "command as the bot's user (sudo -u burstbot burstbot ...)"
        )
    return database


async def _web(config: Config) -> int:
    """`burstbot web`: the operator's page over the database until SIGINT or SIGTERM. Actions
    work as the commands do: a re-queued reply goes out from a running `burstbot run`."""
    import signal

    from bot.core.clock import SystemClock
    from bot.web.feedback import feedback_panel
    from bot.web.server import WebContext, WebServer
    from bot.wiring import build_store

    _existing_database(config)
    store: SqlStore[Any] = build_store(config)
    try:
        await store.open()
        context = WebContext(lambda: config, store, SystemClock(), panels=[feedback_panel])
        server = WebServer(config.web, context)
        await server.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        print(f"burstbot: operator page on {server.url} (Ctrl-C stops)", flush=True)
        try:
            await stop.wait()
        finally:
            await server.stop()
        return 0
    finally:
        await _close_quietly(store)


async def _backup(config: Config, path: str) -> int:
    from bot.cli.backup import backup_sqlite, pg_dump_lines

    url = config.storage.url
    if url.startswith(("postgresql://", "postgres://")):
        print("\n".join(pg_dump_lines(url, path)))
        return 0
    database = _existing_database(config)
    if database is None:
        raise ConfigError("storage.url: an in-memory database has nothing to back up")
    timeout_ms = round(config.storage.busy_timeout_seconds * 1000)
    print(await backup_sqlite(database, Path(path), timeout_ms))
    return 0


def _check(config: Config, path: str | None, service: bool) -> int:
    from bot.cli.check import check_config, service_checks

    summary, problems = check_config(config)
    unattended, warnings = service_checks(config, service)
    problems += unattended
    for problem in problems:
        _show(f"burstbot: config error: {problem}", to=sys.stderr)
    _show(f"{path or '(no config file: defaults)'}: {'INVALID' if problems else 'OK'}")
    _show(*(f"  {line}" for line in summary))
    for warning in warnings:
        _show(f"  warning: {warning}")
    return EXIT_USAGE if problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            from bot.app import App
            from bot.cli.demo import run_demo

            keep = Path(args.database) if args.database else None
            return asyncio.run(run_demo(App, quiet=args.quiet, keep=keep))
        config = load_config(args.config) if args.config else default_config()
        if args.command == "reload":
            return _reload(config, args.config, args.pid)
        verbose = getattr(args, "verbose", False)
        configure_logging(config, verbose=verbose)
        for deprecation in config.deprecations():
            logging.getLogger("burstbot").warning(deprecation)
        if args.command == "run":
            if refusal := workers_refusal(config, args.workers):
                raise ConfigError(refusal)
            if args.workers > 1:
                return run_event_loop(
                    run_workers(args.config, args.workers, args.verbose, config.engine.pid_file)
                )
            if args.worker is not None:
                config = for_worker(config, args.worker)
            elif args.config is None:
                print(_default_banner(config), file=sys.stderr)
            run_event_loop(_run(config, args.config, verbose))
        elif args.command == "check-config":
            return _check(config, args.config, args.service)
        elif args.command == "backup":
            return asyncio.run(_backup(config, args.path))
        elif args.command == "web":
            return run_event_loop(_web(config))
        else:
            return asyncio.run(_with_store(config, args.command, args))
    except ConfigError as exc:
        _show(f"burstbot: config error: {exc}", to=sys.stderr)
        return EXIT_USAGE
    except BurstbotError as exc:
        _show(f"burstbot: {exc}", to=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    return 0


def _show(*lines: str, to: TextIO | None = None) -> None:
    """Print lines for the operator with every known secret redacted: an error's text may quote
    what a platform or the database said, a stored error what a server answered."""
    print(redact("\n".join(lines)), file=to or sys.stdout)


def _default_banner(config: Config) -> str:
    if config.llm.provider == "offline":
        who = "the offline replier (set ANTHROPIC_API_KEY to use Claude)"
    else:
        who = f"Claude ({config.llm.model})"
    return f"burstbot: terminal chat on {config.storage.url} with {who}; Ctrl-D to finish."


if __name__ == "__main__":
    raise SystemExit(main())
