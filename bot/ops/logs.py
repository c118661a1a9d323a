"""Logging setup: plain or JSON lines on stderr, with every configured secret redacted.

The redaction filter sits on the handler, so it sees every record that reaches the output,
whichever library logged it: the formatted message, the exception text and the stack. The
secrets are the values of every `*_env` variable the config names, of `PGPASSWORD` (the
PostgreSQL driver reads it by itself), and a password written into the storage URL.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TextIO
from urllib.parse import unquote, urlsplit

from bot.config import Config

REDACTED = "[redacted]"
MIN_SECRET_LENGTH = 4  # shorter values would redact ordinary words
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
    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        values = {s.strip() for s in secrets if len(s.strip()) >= MIN_SECRET_LENGTH}
        self.secrets = sorted(values, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        record.msg = self.redact(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
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
    handler.addFilter(SecretRedactor(configured_secrets(config, environ)))
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
