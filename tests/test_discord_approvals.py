"""Approval cards on Discord over the wire: real discord.py against the fake Discord, the real
Claude replier against the fake Messages API and the real MCP client against the ticket server
(tests/tool_server.py), which counts its own `create_ticket` calls.

A call that must ask posts a card with Approve and Deny; a press arrives as INTERACTION_CREATE, is
stored and decided by its interaction id and only then answered with the callback the fake
records (a deferred update when it decided, an ephemeral notice when it did not); a replay
changes nothing. The card ends showing the outcome without its buttons; one answer follows.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adapters.discord import DiscordFrontend
from adapters.discord.approval_cards import NOT_RECORDED
from bot.app import App
from bot.config import DiscordConfig, parse_config
from bot.core.clicks import APPROVAL_NOTICES
from bot.core.errors import StoreError
from bot.wiring import claude_replier
from storage.sqlite import SqliteStore
from testkit import check_invariants
from testkit.clock import FakeClock
from testkit.engine import shut_down
from testkit.fake_anthropic import FakeAnthropic, Plan, ToolUse
from testkit.fake_discord import FakeDiscord, Json, frontend_for
from tests.test_discord_stop import (
    ALICE,
    BOB,
    CHANNEL,
    DEFERRED_UPDATE,
    EPHEMERAL,
    GUILD,
    KEY,
    MESSAGE_WITH_SOURCE,
    bots_messages,
    press,
)
from tests.test_discord_streaming import until
from tests.tool_harness import KEY_ENV, stdio_server, tool_results
from tests.tool_server import calls_per_key

TICKET = ToolUse("create_ticket", {"title": "printer on fire"})
CREATED = "created OPS-201 (normal priority): printer on fire"


@pytest.fixture
def fake(fake_discord: FakeDiscord) -> FakeDiscord:
    fake_discord.guilds.append(GUILD)
    fake_discord.add_channel(CHANNEL, "text", guild_id=GUILD)
    return fake_discord


@pytest.fixture
async def frontend(fake: FakeDiscord, clock: FakeClock) -> AsyncIterator[DiscordFrontend]:
    front = frontend_for(fake, clock, DiscordConfig(enabled=True, listen_channels=[str(CHANNEL)]))
    yield front
    await front.stop()


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.txt"


@pytest.fixture
async def app(
    frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock, server: FakeAnthropic,
    ledger: Path, tmp_path: Path,
) -> AsyncIterator[App]:  # fmt: skip
    llm = {"base_url": server.base_url, "api_key_env": "TEST_ANTHROPIC_KEY", "max_retries": 0,
           "timeout_seconds": 20.0}  # fmt: skip
    config = parse_config({
        "llm": llm, "console": {"enabled": False}, "engine": {"owner": "w1"},
        "debounce": {"adaptive": False, "speculate": False},
        "tools": {"mcp": [stdio_server(ledger, tmp_path / "hold", approve="ask")]},
        "channels": [{"platform": "discord", "channel": str(CHANNEL),
                      "tools": {"mcp": ["tracker"]}}],
    })  # fmt: skip
    replier = claude_replier(config, KEY_ENV)
    started = App(config, store, replier, [frontend], clock=clock, owner="w1")
    assert started.mcp is not None
    started.mcp.start()
    await started.mcp.first_attempts()
    await frontend.start(started)
    yield started
    await shut_down(started.engine)
    await started.mcp.close()
    await replier.aclose()


async def served(app: App, clock: FakeClock, seconds: float = 0.0) -> None:
    await clock.advance(seconds)
    await app.engine.run_due()
    await app.engine.idle()


async def card_posted(fake: FakeDiscord, app: App, store: SqliteStore, clock: FakeClock) -> Json:
    """Alice asks for a ticket in the listened channel; the model asks for create_ticket."""
    await fake.dispatch("MESSAGE_CREATE", fake.message(CHANNEL, ALICE, "open a ticket",
                                                       guild_id=str(GUILD)))  # fmt: skip
    async with asyncio.timeout(5.0):
        while await store.conversation_state(KEY.id) is None:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
    await served(app, clock, 10.0)
    await until(lambda: len(bots_messages(fake)) == 1)
    return bots_messages(fake)[0]


def buttons(message: Json) -> list[Json]:
    return [b for row in message["components"] for b in row["components"]]


async def test_approve_runs_the_call_once_and_the_card_ends_showing_it(
    fake: FakeDiscord, app: App, store: SqliteStore, clock: FakeClock, server: FakeAnthropic,
    ledger: Path,
) -> None:  # fmt: skip
    server.queue(Plan(text="", tool_uses=[TICKET]), Plan(text="Opened OPS-201 for you."))
    card = await card_posted(fake, app, store, clock)
    approve, deny = buttons(card)
    assert (approve["label"], deny["label"]) == ("Approve", "Deny")
    assert "tracker.create_ticket" in card["content"]
    stored_when_answered: list[list[str | None]] = []

    async def stored(_: Json) -> None:
        stored_when_answered.append([c.outcome for c in await store.clicks(KEY.id)])

    fake.before_callback = stored
    payload = fake.click(card["id"], approve["custom_id"], ALICE)
    second = fake.click(card["id"], approve["custom_id"], ALICE)  # pressed twice
    callbacks = await press(fake, payload, deliveries=2)  # a gateway replay of the first
    assert [c["type"] for c in callbacks] == [DEFERRED_UPDATE, DEFERRED_UPDATE]
    assert stored_when_answered[0] == ["approved"]  # decided before Discord was answered
    [again] = await press(fake, second)
    assert again["type"] == MESSAGE_WITH_SOURCE and again["data"]["flags"] & EPHEMERAL
    assert again["data"]["content"] == APPROVAL_NOTICES["already_decided"]
    await served(app, clock)
    await until(lambda: len(bots_messages(fake)) == 2)
    ended, answer = bots_messages(fake)
    assert ended["id"] == card["id"] and ended["components"] == []
    assert ended["content"].endswith(f"Approved by Alice: {CREATED}")
    assert answer["content"] == "Opened OPS-201 for you."
    assert list(calls_per_key(ledger).values()) == [1]
    [given] = tool_results(server.requests[1])
    assert given["content"] == CREATED
    await check_invariants(store, [KEY.id])


async def test_someone_else_is_refused_alone_and_deny_ends_the_card(
    fake: FakeDiscord, app: App, store: SqliteStore, clock: FakeClock, server: FakeAnthropic,
    ledger: Path,
) -> None:  # fmt: skip
    server.queue(Plan(text="", tool_uses=[TICKET]), Plan(text="All right, no ticket."))
    card = await card_posted(fake, app, store, clock)
    approve, deny = buttons(card)
    [refused] = await press(fake, fake.click(card["id"], approve["custom_id"], BOB))
    assert refused["type"] == MESSAGE_WITH_SOURCE and refused["data"]["flags"] & EPHEMERAL
    assert refused["data"]["content"] == APPROVAL_NOTICES["refused"]
    [denied] = await press(fake, fake.click(card["id"], deny["custom_id"], ALICE))
    assert denied["type"] == DEFERRED_UPDATE
    await served(app, clock)
    await until(lambda: len(bots_messages(fake)) == 2)
    ended, answer = bots_messages(fake)
    assert ended["components"] == [] and ended["content"].endswith("Denied by Alice; not run.")
    assert answer["content"] == "All right, no ticket."
    assert calls_per_key(ledger) == {}
    outcomes: list[Any] = sorted(c.outcome for c in await store.clicks(KEY.id))
    assert outcomes == ["denied", "refused"]


async def test_a_press_the_store_cannot_take_is_answered_with_an_error_and_changes_nothing(
    fake: FakeDiscord, app: App, store: SqliteStore, clock: FakeClock, server: FakeAnthropic,
    ledger: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    server.queue(Plan(text="", tool_uses=[TICKET]))
    card = await card_posted(fake, app, store, clock)
    approve, _ = buttons(card)

    async def locked(*args: Any) -> Any:
        raise StoreError("database is locked")

    monkeypatch.setattr(store, "decide", locked)
    [callback] = await press(fake, fake.click(card["id"], approve["custom_id"], ALICE))
    assert callback["type"] == MESSAGE_WITH_SOURCE and callback["data"]["flags"] & EPHEMERAL
    assert callback["data"]["content"] == NOT_RECORDED
    assert await store.clicks(KEY.id) == []
    [action] = await store.actions(KEY.id)
    assert action.approval == "waiting" and calls_per_key(ledger) == {}
