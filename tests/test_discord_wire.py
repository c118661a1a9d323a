"""The Discord adapter over the wire: real discord.py against a fake Discord on 127.0.0.1.

What dpytest cannot show lives here: the JSON discord.py actually posts (nonce, enforce_nonce,
allowed mentions, message reference), the intents sent in IDENTIFY, HTTP errors mapped into our
error tree, and the one-line startup failures (bad token, Message Content intent disabled).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import discord
import pytest

from adapters.discord import DiscordFrontend, build_discord_frontend
from adapters.discord.client import INTENT_HELP
from adapters.discord.render import MESSAGE_LIMIT, nonce_for
from bot.app import App
from bot.config import DiscordConfig
from bot.core.errors import (
    BurstbotError,
    ConfigError,
    PermanentDeliveryError,
    RetryableDeliveryError,
)
from bot.core.events import ConversationKey, Reply
from bot.core.frontend import StopsIntake
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock
from testkit.engine import shut_down
from testkit.fake_discord import PASS, Failure, FakeDiscord, frontend_for
from tests.discord_harness import engine_config
from tests.test_cli import ROOT, burstbot

GUILD_ID, CHANNEL_ID, DM_ID = (
    400_000_000_000_000_001,
    400_000_000_000_000_002,
    400_000_000_000_000_003,
)
ALICE = {"id": "200000000000000001", "username": "alice", "discriminator": "0",
         "global_name": "Alice", "avatar": None}  # fmt: skip
CHANNEL_KEY = ConversationKey("discord", str(GUILD_ID), str(CHANNEL_ID))
NEEDED_INTENTS = (1 << 0) | (1 << 9) | (1 << 12) | (1 << 15)  # guilds, guild/DM messages, content
TYPING_INTENTS = (1 << 11) | (1 << 14)  # guild and DM typing: `[debounce] typing_aware`


@pytest.fixture
def fake(fake_discord: FakeDiscord) -> FakeDiscord:
    return fake_discord


@pytest.fixture
async def frontend(fake: FakeDiscord, clock: FakeClock) -> AsyncIterator[DiscordFrontend]:
    front = frontend_for(fake, clock)
    yield front
    await front.stop()


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 5.0) -> None:
    """Bounded wait for real I/O (gateway events crossing a socket) to land."""
    async with asyncio.timeout(within):
        while not await check():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def test_a_dm_over_the_gateway_is_answered_once_with_the_right_post(
    fake: FakeDiscord, frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock
) -> None:
    app = App(engine_config(), store, ScriptedReplier(), [frontend], clock=clock, owner="w1")
    await frontend.start(app)
    assert fake.identify is not None
    assert fake.identify["intents"] == NEEDED_INTENTS | TYPING_INTENTS

    first = fake.message(DM_ID, ALICE, "hello there")
    await fake.dispatch("MESSAGE_CREATE", first)
    await fake.dispatch("MESSAGE_CREATE", first)  # a RESUME replay: same id
    last = fake.message(DM_ID, ALICE, "are you up?")
    await fake.dispatch("MESSAGE_CREATE", last)
    key = ConversationKey("discord", "dm", str(DM_ID))

    async def both_stored() -> bool:
        state = await store.conversation_state(key.id)
        return state is not None and state.version == 2

    await eventually(both_stored)

    await clock.advance(1.5)
    await app.engine.run_due()
    await app.engine.idle()
    [post] = fake.created
    [row] = await store.replies(key.id)
    body = post["request"]
    assert body["content"] == "reply to: hello there | are you up?"
    assert body["nonce"] == nonce_for(f"r{row.id}", key.id, 0, body["content"])
    assert body["enforce_nonce"] is True and len(body["nonce"]) <= 25
    assert body["allowed_mentions"] == {"parse": [], "replied_user": True}
    assert body["message_reference"]["message_id"] == int(last["id"])
    assert body["message_reference"]["fail_if_not_exists"] is False
    assert row.state == "sent" and row.platform_message_ids == (post["id"],)
    await clock.advance(5)
    await app.engine.indicator.idle()
    await frontend.typing.idle()
    assert DM_ID not in fake.typing  # answered within the indicator delay: no typing at all
    await shut_down(app.engine)


async def test_parts_carry_stable_nonces_so_a_repost_after_a_crash_is_deduped(
    fake: FakeDiscord, frontend: DiscordFrontend, clock: FakeClock
) -> None:
    await frontend.client.login(fake.token)
    text = "\n\n".join(f"Paragraph {n}. " + "words " * 120 for n in range(8))
    reply = Reply("r42", CHANNEL_KEY, text, 3, reply_to_message_id="500000000000000001")
    ids = await frontend.deliver(reply)
    assert len(ids) == len(fake.created) >= 3
    bodies = [p["request"] for p in fake.created]
    assert all(len(b["content"]) <= MESSAGE_LIMIT for b in bodies)
    assert "message_reference" in bodies[0]
    assert all("message_reference" not in b for b in bodies[1:])
    assert len({b["nonce"] for b in bodies}) == len(bodies)
    assert all(b["allowed_mentions"]["parse"] == [] for b in bodies)

    # A new process (nothing remembered in memory) delivers the same outbox row again.
    restarted = DiscordFrontend(DiscordConfig(enabled=True), token=fake.token, clock=clock)
    await restarted.client.login(fake.token)
    try:
        assert await restarted.deliver(reply) == ids
    finally:
        await restarted.stop()
    assert len(fake.created) == len(ids)  # Discord returned the earlier messages
    assert [b["nonce"] for b in fake.requests[len(ids) :]] == [b["nonce"] for b in bodies]


UNKNOWN_MESSAGE_ERROR = {"code": "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "message": "Unknown message"}
UNKNOWN_REFERENCE = {
    "code": 50035,
    "message": "Invalid Form Body",
    "errors": {"message_reference": {"_errors": [UNKNOWN_MESSAGE_ERROR]}},
}
NO_HISTORY = {"message": "Missing Permissions", "code": 50013}


@pytest.mark.parametrize(
    "refusal", [Failure(400, UNKNOWN_REFERENCE, only_with_reference=True),
                Failure(403, NO_HISTORY, only_with_reference=True)],
    ids=["target-gone", "no-read-message-history"],
)  # fmt: skip
async def test_a_reply_whose_reference_is_refused_is_posted_plainly(
    fake: FakeDiscord, frontend: DiscordFrontend, refusal: Failure
) -> None:
    await frontend.client.login(fake.token)
    fake.failures[CHANNEL_ID] = [refusal]
    reply = Reply("r1", CHANNEL_KEY, "hi", 1, reply_to_message_id="500000000000000009")
    [posted] = await frontend.deliver(reply)
    [post] = fake.created
    assert post["id"] == posted and "message_reference" not in post["request"]
    assert len(fake.requests) == 2 and fake.requests[0]["nonce"] == fake.requests[1]["nonce"]


async def test_a_channel_refusing_even_a_plain_post_is_permanent(
    fake: FakeDiscord, frontend: DiscordFrontend
) -> None:
    await frontend.client.login(fake.token)
    fake.failures[CHANNEL_ID] = [Failure(403, NO_HISTORY), Failure(403, NO_HISTORY)]
    reply = Reply("r1", CHANNEL_KEY, "hi", 1, reply_to_message_id="500000000000000009")
    with pytest.raises(PermanentDeliveryError, match="403"):
        await frontend.deliver(reply)
    assert len(fake.requests) == 2 and fake.created == []


PERMANENT, RETRYABLE = PermanentDeliveryError, RetryableDeliveryError
CLOUDFLARE_PAGE = (
    "<!DOCTYPE html>\n<html>\n<head><title>503 Service Temporarily Unavailable</title></head>\n"
    "<body><center><h1>503 Service Temporarily Unavailable</h1></center>\n"
    "<hr><center>cloudflare</center></body>\n</html>\n"
)
RATE_LIMITED = {"message": "You are being rate limited.", "retry_after": 120.0, "global": False}


@pytest.mark.parametrize(
    ("failure", "expected", "retry_after"),
    [
        (Failure(403, {"message": "Missing Permissions", "code": 50013}), PERMANENT, None),
        (Failure(404, {"message": "Unknown Channel", "code": 10003}), PERMANENT, None),
        (Failure(400, {"message": "Cannot send an empty message", "code": 50006}), PERMANENT, None),
        (Failure(503, {"message": "upstream overloaded"}), RETRYABLE, None),
        (Failure(503, CLOUDFLARE_PAGE), RETRYABLE, None),
        (Failure(429, RATE_LIMITED, {"Via": "1.1 google", "Retry-After": "120"}), RETRYABLE, 120.0),
        (Failure(429, {"message": "banned", "code": 0}, {"Retry-After": "600"}), RETRYABLE, 600.0),
    ],
    ids=[
        "forbidden",
        "not-found",
        "bad-request",
        "unavailable",
        "html-page",
        "rate-limited",
        "cloudflare-429",
    ],
)
async def test_http_errors_map_to_retryable_or_permanent(
    fake: FakeDiscord,
    frontend: DiscordFrontend,
    failure: Failure,
    expected: type[Exception],
    retry_after: float | None,
) -> None:
    await frontend.client.login(fake.token)
    fake.failures[CHANNEL_ID] = [failure]
    with pytest.raises(expected) as caught:
        await frontend.deliver(Reply("r1", CHANNEL_KEY, "hello", 1))
    assert str(failure.status) in str(caught.value) or failure.status == 429
    assert "\n" not in str(caught.value) and "<" not in str(caught.value)  # one line, no page
    assert getattr(caught.value, "retry_after", None) == retry_after
    assert fake.created == []


async def test_a_connection_failure_is_retryable(
    fake: FakeDiscord, frontend: DiscordFrontend, monkeypatch: pytest.MonkeyPatch
) -> None:
    await frontend.client.login(fake.token)
    monkeypatch.setattr(discord.http.Route, "BASE", "http://127.0.0.1:9/api/v10")  # nothing there
    with pytest.raises(RetryableDeliveryError, match="connection"):
        await frontend.deliver(Reply("r1", CHANNEL_KEY, "hello", 1))


async def test_delivery_before_login_is_retried_later(frontend: DiscordFrontend) -> None:
    with pytest.raises(RetryableDeliveryError, match="not logged in"):
        await frontend.deliver(Reply("r1", CHANNEL_KEY, "hello", 1))


async def test_a_rejected_token_is_one_config_error(
    fake: FakeDiscord, clock: FakeClock, store: SqliteStore
) -> None:
    front = DiscordFrontend(DiscordConfig(enabled=True), token="wrong", clock=clock)
    app = App(engine_config(), store, ScriptedReplier(), [front], clock=clock, owner="w1")
    try:
        with pytest.raises(
            ConfigError, match=r"discord\.token_env: Discord rejected the bot token"
        ):
            await front.start(app)
    finally:
        await front.stop()


async def test_message_content_intent_disabled_is_one_config_error(
    fake: FakeDiscord, frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock
) -> None:
    fake.gateway_close_code = 4014
    app = App(engine_config(), store, ScriptedReplier(), [frontend], clock=clock, owner="w1")
    with pytest.raises(ConfigError) as caught:
        await frontend.start(app)
    assert str(caught.value) == INTENT_HELP and "Message Content" in INTENT_HELP


def test_a_missing_token_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_DISCORD_TOKEN", raising=False)
    config = DiscordConfig(enabled=True, token_env="NO_SUCH_DISCORD_TOKEN")
    with pytest.raises(ConfigError, match="NO_SUCH_DISCORD_TOKEN"):
        build_discord_frontend(config)


def test_shard_settings_are_validated_and_passed_to_the_client() -> None:
    from bot.config import parse_config

    with pytest.raises(ConfigError, match="discord"):
        parse_config({"discord": {"shard_id": 1}})
    with pytest.raises(ConfigError, match="shard_id must be less than shard_count"):
        parse_config({"discord": {"shard_id": 2, "shard_count": 2}})
    with pytest.raises(ConfigError, match="listen_channels"):
        DiscordFrontend(DiscordConfig(listen_channels=["general"]))


async def test_the_process_identifies_as_its_configured_shard(
    fake: FakeDiscord, store: SqliteStore, clock: FakeClock
) -> None:
    config = DiscordConfig(enabled=True, shard_id=1, shard_count=4)
    front = frontend_for(fake, clock, config)
    app = App(engine_config(), store, ScriptedReplier(), [front], clock=clock, owner="w1")
    try:
        await front.start(app)
        assert fake.identify is not None and fake.identify["shard"] == [1, 4]
    finally:
        await front.stop()


def test_the_cli_exits_2_naming_a_missing_token(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        '[llm]\nprovider = "offline"\n[console]\nenabled = false\n'
        '[discord]\nenabled = true\ntoken_env = "NO_SUCH_DISCORD_TOKEN"\n'
    )
    result = burstbot(["run", "--config", str(config)], tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "burstbot: config error: discord.token_env: "
        "environment variable NO_SUCH_DISCORD_TOKEN is not set"
    ]


@pytest.mark.parametrize(("close_code", "token", "line"), [
    (4014, "test-token", INTENT_HELP),
    (None, "wrong-token", "discord.token_env: Discord rejected the bot token"),
], ids=["intent-disabled", "token-rejected"])  # fmt: skip
async def test_the_cli_stops_with_one_line_when_discord_refuses(
    fake: FakeDiscord, tmp_path: Path, close_code: int | None, token: str, line: str
) -> None:
    fake.gateway_close_code = close_code
    config = tmp_path / "c.toml"
    config.write_text(
        '[llm]\nprovider = "offline"\n[console]\nenabled = false\n'
        '[storage]\nurl = "sqlite:///b.db"\n[discord]\nenabled = true\n'
    )
    process = await asyncio.create_subprocess_exec(
        *fake.run_command(config),
        cwd=tmp_path, env={**os.environ, "DISCORD_TOKEN": token, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(60):
        _, stderr = await process.communicate()
    assert process.returncode == 2, stderr.decode()
    [printed] = stderr.decode().strip().splitlines()
    assert printed.startswith(f"burstbot: config error: {line}")


class WatchedFrontend(RecordingFrontend, StopsIntake):
    """Another front end of the same process: records how it was asked to stop."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    async def stop_intake(self) -> None:
        self.calls.append("stop_intake")

    async def stop(self) -> None:
        self.calls.append("stop")
        await super().stop()


async def test_a_gateway_that_ends_for_good_fails_the_process_after_a_clean_stop(
    fake: FakeDiscord, frontend: DiscordFrontend, tmp_path: Path, clock: FakeClock
) -> None:
    """discord.py gives up on close code 4012. The process must not carry on without Discord,
    nor end as if asked to stop: `run` stops every front end cleanly, then raises."""
    other = WatchedFrontend()
    store = SqliteStore(str(tmp_path / "bot.db"))
    app = App(engine_config(), store, ScriptedReplier(), [other, frontend], clock=clock, owner="w1")
    running = asyncio.create_task(app.run())

    async def serving() -> bool:
        return bool(fake.command_posts)  # the last step of the Discord front end's start

    await eventually(serving)
    await fake.close_gateway(4012)
    with pytest.raises(BurstbotError, match="discord: the gateway connection ended"):
        await asyncio.wait_for(running, 10)
    assert other.calls == ["stop_intake", "stop"]
    assert store._db is None  # closed before the failure was raised


async def test_the_cli_exits_1_with_one_line_when_the_gateway_ends_for_good(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    """systemd's `Restart=on-failure` restarts only a process that exits non-zero."""
    config = tmp_path / "c.toml"
    config.write_text(
        '[llm]\nprovider = "offline"\n[console]\nenabled = false\n'
        '[storage]\nurl = "sqlite:///b.db"\n[discord]\nenabled = true\n'
    )
    process = await asyncio.create_subprocess_exec(
        *fake.run_command(config),
        cwd=tmp_path, env={**os.environ, "DISCORD_TOKEN": fake.token, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await fake.wait_for(lambda: bool(fake.command_posts), within=30)
        await fake.close_gateway(4012)
        async with asyncio.timeout(60):
            _, stderr = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 1, stderr.decode()
    [printed] = stderr.decode().strip().splitlines()
    assert printed.startswith("burstbot: discord: the gateway connection ended")


async def test_a_part_that_landed_though_its_post_failed_is_not_posted_again(
    fake: FakeDiscord, frontend: DiscordFrontend
) -> None:
    """Between parts: the second part lands but the bot hears a 503. The retry posts it again
    with the same nonce, and Discord (within its nonce window) returns the earlier message."""
    await frontend.client.login(fake.token)
    text = "\n\n".join(f"Paragraph {n}. " + "words " * 120 for n in range(8))
    fake.failures[CHANNEL_ID] = [PASS, Failure(503, {"message": "upstream overloaded"}, lands=True)]
    reply = Reply("r7", CHANNEL_KEY, text, 3)
    with pytest.raises(RetryableDeliveryError):
        await frontend.deliver(reply)
    assert len(fake.created) == 2
    ids = await frontend.deliver(replace(reply, attempt=2))
    assert len(ids) == len(fake.created) >= 3  # each part once
    assert ids[:2] == [post["id"] for post in fake.created[:2]]
