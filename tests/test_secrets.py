"""Secrets stay secret (G17): at DEBUG, through burstbot's own log handler, no line holds a secret
the config names or one the process received while running (a workspace's token from the OAuth
install and from its refresh, an MCP server's bearer token); nor does the command line's output.

Every secret is a unique marker; the variables are found by walking the config model, so a new
`*_env` setting is covered without touching this file."""

from __future__ import annotations

import io
import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from bot.config import Config, parse_config
from bot.core.errors import PermanentDeliveryError
from bot.core.events import IncomingMessage
from bot.core.secrets import REDACTED, redact, remember_secret
from bot.ops.logs import DRIVER_SECRET_ENV, configure_logging
from bot.tool_servers import McpHub
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock
from testkit.fake_slack import Failure
from testkit.fake_slack_grid import FakeSlackGrid
from tests.conftest import KEY, make_engine
from tests.slack_oauth_harness import install, oauth_bot
from tests.test_cli import burstbot
from tests.tool_harness import http_process, http_server

RUN = uuid.uuid4().hex[:12]


def marker(what: str) -> str:
    return f"MARK{RUN}-{what}-"


def every_secret_config(mcp_port: int) -> Config:
    """A config that names every kind of secret: Slack with Add to Slack, Discord, Claude, an
    MCP server with a bearer token, an extra variable to redact, a password in the storage URL."""
    return parse_config({
        "logging": {"level": "DEBUG", "redact_env": ["EXTRA_SECRET"]},
        "storage": {"url": f"postgresql://bot:{marker('url-password')}@db.internal/burstbot"},
        "slack": {"enabled": True, "mode": "http", "install": "oauth"},
        "discord": {"enabled": True},
        "tools": {"mcp": [http_server(mcp_port, token_env="TRACKER_TOKEN")]},
    })  # fmt: skip


def secret_markers(config: Config) -> dict[str, str]:
    """A unique value for each variable the config reads a secret from; the token key must be
    a Fernet key, random and so unique already."""
    names = [*config.secret_env_names(), *DRIVER_SECRET_ENV]
    values = {name: marker(name) for name in names}
    values[config.slack.token_key_env] = Fernet.generate_key().decode()
    return values


@contextmanager
def debug_log(config: Config) -> Iterator[io.StringIO]:
    """burstbot's handler at DEBUG, as `burstbot run` installs it; everything it writes."""
    stream, root = io.StringIO(), logging.getLogger()
    level = root.level
    handler = configure_logging(config, stream=stream)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


async def test_no_secret_reaches_a_debug_log_through_install_refresh_tools_and_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with http_process(tmp_path / "ledger", tmp_path / "hold") as port:
        config = every_secret_config(port)
        markers = secret_markers(config)
        for name, value in markers.items():
            monkeypatch.setenv(name, value)
        slack = config.slack
        clock = FakeClock(time.time())
        grid = FakeSlackGrid(
            markers[slack.client_id_env], markers[slack.client_secret_env], token_lifetime=60,
            clock=clock.now, token_format=marker("bot-token-{team}-{serial}"),
            refresh_format=marker("refresh-token-{team}-{serial}"),
        )  # fmt: skip
        grid.add_workspace("T1", "Acme")
        await grid.start()
        try:
            with debug_log(config) as log:
                async with oauth_bot(grid, clock=clock) as bot:
                    grid.signing_secret = markers[slack.signing_secret_env]
                    status, outcome = await install(bot.frontend, "T1")
                    assert status == 200 and "installed in Acme" in outcome
                    await grid.say("T1", "D1", "hello")
                    await bot.step(1.5)
                    await clock.advance(50)  # the token's last quarter: it is refreshed
                    assert bot.frontend.workspaces is not None
                    await bot.frontend.workspaces.get("T1")
                    assert grid.refreshes == {"T1": 1}
                    grid.workspaces["T1"].fail("chat.postMessage", Failure(error="not_in_channel"))
                    await grid.say("T1", "D1", "and again")
                    await bot.step(1.5)  # a platform error, logged with its exception
                hub = McpHub(config.tools.mcp)
                hub.start()
                await hub.first_attempts()
                try:
                    specs, missing = hub.tools(["tracker"])
                    search = next(spec for spec in specs if spec.name == "search_tickets")
                    output = await hub.call(search, {"query": "printer"}, "key-1")
                finally:
                    await hub.close()
        finally:
            await grid.stop()
    written = log.getvalue()
    # the paths a secret would take were all logged: the answer holding the new tokens, the
    # refresh, the failed post, the tool call over HTTP
    assert "Received the following response" in written and "oauth.v2.access" in written
    assert "token refreshed" in written and "delivery failed for good" in written
    assert "printer on fire" in str(output) and missing == []
    assert "DEBUG mcp.client" in written
    leaked = sorted({name for name, value in markers.items() if value in written})
    assert leaked == []
    assert RUN not in written  # no issued token, refresh token or URL password either


def test_a_secret_learned_after_logging_started_is_redacted_from_then_on() -> None:
    config = parse_config({"logging": {"level": "INFO"}})
    late = marker("late")
    with debug_log(config) as log:
        logging.getLogger("burstbot.test").info("before: %s", late)
        remember_secret(late)
        logging.getLogger("burstbot.test").info("after: %s", late)
    assert log.getvalue().count(late) == 1 and f"after: {REDACTED}" in log.getvalue()


def test_slack_tokens_and_secret_fields_are_redacted_before_anyone_remembers_them() -> None:
    """What slack_sdk logs of an `oauth.v2.access` answer, before burstbot holds the tokens."""
    line = (
        "body: {'ok': True, 'access_token': 'opaque-1', 'token_type': 'bot', 'max_tokens': 5, "
        "\"refresh_token\": \"opaque-2\", 'client_secret': 'opaque-3'} "
        "Bearer xoxb-1-2-abc xapp-1-A1-xyz xoxe.xoxp-1-Mi0 xoxe-1-My0"
    )
    assert redact(line) == (
        "body: {'ok': True, 'access_token': '[redacted]', 'token_type': 'bot', 'max_tokens': 5, "
        "\"refresh_token\": \"[redacted]\", 'client_secret': '[redacted]'} "
        "Bearer [redacted] [redacted] [redacted] [redacted]"
    )


def test_a_discord_interaction_token_in_a_logged_url_is_redacted() -> None:
    """discord.py's DEBUG line for the answer to a button press carries the interaction's token."""
    line = (
        "POST https://discord.com/api/v10/interactions/1234/aW50ZXJhY3Rpb24.x_y-z/callback "
        "with None has returned 204; GET /webhooks/99/abc.DEF-1/messages/@original"
    )
    assert redact(line) == (
        "POST https://discord.com/api/v10/interactions/1234/[redacted]/callback "
        "with None has returned 204; GET /webhooks/99/[redacted]/messages/@original"
    )


def test_every_env_field_of_the_model_is_a_secret_without_a_list_to_keep() -> None:
    names = every_secret_config(1).secret_env_names()
    assert {"SLACK_CLIENT_SECRET", "SLACK_STATE_SECRET", "BURSTBOT_TOKEN_KEY", "TRACKER_TOKEN",
            "EXTRA_SECRET", "DISCORD_TOKEN", "ANTHROPIC_API_KEY"} <= set(names)  # fmt: skip


async def test_explain_shows_a_stored_error_without_the_secret_it_quotes(tmp_path: Path) -> None:
    """A platform's error text, stored with the failed reply, quotes a token: `explain` (run
    with the token in its environment, as on the bot's host) prints it redacted."""
    secret = marker("stored")
    store = SqliteStore(str(tmp_path / "ops.db"))
    await store.open()
    clock, frontend, replier = (
        FakeClock(start=time.time() - 30),
        RecordingFrontend(),
        ScriptedReplier(),
    )
    engine = make_engine(store, clock, replier, frontend)
    frontend.failures.append(PermanentDeliveryError(f"invalid_auth for {secret}"))
    await engine.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "hello?"))
    await clock.advance(2)
    await engine.run_due()
    await engine.idle()
    await store.close()
    config = tmp_path / "c.toml"
    config.write_text(f'[storage]\nurl = "sqlite:///{tmp_path / "ops.db"}"\n')
    result = burstbot(
        ["explain", KEY.id, "--config", str(config)], tmp_path, env={"SLACK_BOT_TOKEN": secret}
    )
    assert result.returncode == 0, result.stderr
    assert f"invalid_auth for {REDACTED}" in result.stdout and secret not in result.stdout


def test_a_slot_keeps_its_newest_two_values_so_rotation_leaves_a_bounded_set() -> None:
    """A workspace's token refreshed for months: its registry slot holds the current token and
    the one before it (still valid until it expires), not every token it ever had."""
    first, second, third = (marker(f"rotated-{n}") for n in (1, 2, 3))
    for token in (first, second, third):
        remember_secret(token, "slack T9 bot token")
    assert redact(f"{first} {second} {third}") == f"{first} {REDACTED} {REDACTED}"
