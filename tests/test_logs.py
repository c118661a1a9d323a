"""Logs: plain or JSON, and no configured secret ever reaches them."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

from bot.config import parse_config
from bot.ops.logs import REDACTED, configure_logging
from tests.test_cli import burstbot

SECRET = "xoxb-1234-very-secret-token"
ANTHROPIC = "sk-ant-api03-also-secret"
ENV = {"SLACK_BOT_TOKEN": SECRET, "ANTHROPIC_API_KEY": ANTHROPIC, "SHORT": "ab"}


def test_secrets_are_redacted_from_messages_arguments_and_tracebacks() -> None:
    stream = io.StringIO()
    config = parse_config({"logging": {"level": "INFO", "redact_env": ["SHORT"]}})
    handler = configure_logging(config, stream=stream, environ=ENV)
    log = logging.getLogger("burstbot.test")
    try:
        log.info("token is %s", SECRET)
        log.warning(f"key {ANTHROPIC} in an f-string")
        try:
            raise RuntimeError(f"auth failed for {SECRET}")
        except RuntimeError:
            log.exception("request failed")
        log.info("ab is too short to redact: about")
    finally:
        logging.getLogger().removeHandler(handler)
    output = stream.getvalue()
    assert SECRET not in output and ANTHROPIC not in output
    assert output.count(REDACTED) == 3 and "auth failed for [redacted]" in output
    assert "about" in output


def test_the_database_password_is_redacted_from_pgpassword_and_from_the_url() -> None:
    """The driver reads PGPASSWORD by itself and a DSN may carry a password: neither is logged,
    even though the config names neither as a secret."""
    stream = io.StringIO()
    url = "postgresql://bot:p%40ss-in-url@db.internal:5432/burstbot"
    config = parse_config({"logging": {"level": "INFO"}, "storage": {"url": url}})
    env = {**ENV, "PGPASSWORD": "pg-password-from-env"}
    handler = configure_logging(config, stream=stream, environ=env)
    try:
        log = logging.getLogger("burstbot.test")
        log.warning("connect failed: password authentication failed for %s", env["PGPASSWORD"])
        log.warning("dsn %s", url)
        log.warning("decoded p@ss-in-url")
    finally:
        logging.getLogger().removeHandler(handler)
    output = stream.getvalue()
    assert "pg-password-from-env" not in output
    assert "p%40ss-in-url" not in output and "p@ss-in-url" not in output
    assert output.count(REDACTED) == 3 and "db.internal" in output


def test_json_lines_are_parseable_and_redacted() -> None:
    stream = io.StringIO()
    config = parse_config({"logging": {"format": "json", "level": "INFO"}})
    handler = configure_logging(config, stream=stream, environ=ENV)
    try:
        logging.getLogger("burstbot.test").info("using %s", SECRET)
    finally:
        logging.getLogger().removeHandler(handler)
    [entry] = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert entry["message"] == f"using {REDACTED}"
    assert (entry["level"], entry["logger"]) == ("INFO", "burstbot.test")


def test_a_secret_typed_into_the_chat_is_absent_from_debug_logs(tmp_path: Path) -> None:
    """Debug logs of the database driver echo what it is asked to run, message text included
    where it runs on the driver's thread: the secret never appears, whatever a line holds."""
    config = tmp_path / "c.toml"
    config.write_text(
        '[logging]\nlevel = "DEBUG"\nredact_env = ["MY_TOKEN"]\n[llm]\nprovider = "offline"\n'
    )
    result = burstbot(
        ["run", "--config", str(config)],
        tmp_path,
        stdin=f"my token is {SECRET}\n",
        env={"MY_TOKEN": SECRET, "SLACK_BOT_TOKEN": ANTHROPIC},
    )
    assert result.returncode == 0, result.stderr
    assert "DEBUG aiosqlite" in result.stderr
    assert SECRET not in result.stderr and ANTHROPIC not in result.stderr
