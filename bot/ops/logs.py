"""Logging setup: plain or JSON lines on stderr, with every secret the process knows redacted.

The redaction filter sits on the handler, so it sees every record that reaches the output,
whichever library logged it: the formatted message, the exception text and the stack. It asks
the process-wide registry (bot/core/secrets.py) on every record, so what it hides grows as the
process learns secrets:

- at start, the value of every variable a `*_env` setting names (found by walking the config
  model: `Config.secret_env_names`, `logging.redact_env` included), of `PGPASSWORD` (the
  PostgreSQL driver reads it by itself), and a password written into the storage URL;
- while running, each secret as it is read or received: every `require_secret` value, each key
  of the token key list, each Slack workspace's token as it is decrypted, installed or
  refreshed, an MCP server's bearer token;
- whatever is logged before the code receiving it can remember it (slack_sdk's DEBUG line with
  an `oauth.v2.access` answer): the value of any quoted `…token`, `…secret` or `…password` key,
  and any text shaped like a Slack token (`xoxb-…`, `xapp-…`, `xoxe-…`).

A value shorter than four characters is never redacted (it would hide ordinary words).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TextIO
from urllib.parse import unquote, urlsplit

from bot.config import Config
from bot.core.secrets import REDACTED, redact, remember_secret

__all__ = ["REDACTED", "SecretRedactor", "configure_logging", "configured_secrets"]

PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
HANDLER_NAME = "burstbot"
DRIVER_SECRET_ENV = ("PGPASSWORD",)
"""Read by the database driver itself, whatever the config names."""


def configured_secrets(config: Config, environ: Mapping[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    names = dict.fromkeys([*config.secret_env_names(), *DRIVER_SECRET_ENV])
    secrets = [env[name] for name in names if env.get(name, "").strip()]
    try:  # a password written into the storage URL: as written, and unquoted
        password = urlsplit(config.storage.url).password or ""
    except ValueError:
        password = ""
    return [*secrets, password, unquote(password)] if password else secrets


class SecretRedactor(logging.Filter):
    """Every secret known when the record is written, not when the filter was made."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = record.stack_info
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(
    config: Config,
    verbose: bool = False,
    stream: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> logging.Handler:
    """Install (or replace) burstbot's one root handler; returns it."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(old)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name(HANDLER_NAME)
    for secret in configured_secrets(config, environ):
        remember_secret(secret)
    handler.addFilter(SecretRedactor())
    if config.logging.format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(PLAIN_FORMAT))
    root.addHandler(handler)
    level = logging.getLevelName(config.logging.level)
    if verbose:
        level = min(level, logging.INFO)
    root.setLevel(level)
    return handler
