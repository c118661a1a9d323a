"""`burstbot` command line. Errors a user can fix print one line and exit 2; no tracebacks."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from bot import __version__
from bot.config import Config, default_config, load_config
from bot.errors import BurstbotError, ConfigError

EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="burstbot", description=__doc__)
    parser.add_argument("--version", action="version", version=f"burstbot {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="serve every enabled front end (terminal by default)")
    run.add_argument("--config", help="TOML config file (default: terminal chat, ./burstbot.db)")
    run.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    return parser


def _load(path: str | None) -> Config:
    return load_config(path) if path else default_config()


async def _run(config: Config) -> None:
    from bot.app import App, build_frontends, build_replier, build_store

    replier = build_replier(config)
    frontends = build_frontends(config)
    store = build_store(config)
    logging.getLogger("burstbot").info("replier: %s", config.llm.provider)
    await App(config, store, replier, frontends).run()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = _load(args.config)
        if args.command == "run":
            if args.config is None:
                print(_default_banner(config), file=sys.stderr)
            asyncio.run(_run(config))
    except ConfigError as exc:
        print(f"burstbot: config error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BurstbotError as exc:
        print(f"burstbot: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    return 0


def _default_banner(config: Config) -> str:
    if config.llm.provider == "offline":
        who = "the offline replier (set ANTHROPIC_API_KEY to use Claude)"
    else:
        who = f"Claude ({config.llm.model})"
    return f"burstbot: terminal chat on {config.storage.url} with {who}; Ctrl-D to finish."


if __name__ == "__main__":
    raise SystemExit(main())
