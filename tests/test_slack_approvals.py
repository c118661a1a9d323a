"""Approval cards on Slack: the real front end (Bolt, `AsyncWebClient`) against the fake Slack,
the real Claude replier against the fake Messages API and the real MCP client against the
ticket server (tests/tool_server.py), which counts its own `create_ticket` calls.

A call that must ask posts a card with Approve and Deny; a press arrives as `block_actions` (a
signed form over HTTP, an `interactive` envelope over Socket Mode), is stored and decided before
it is acked, and counts once however often it is delivered; the card ends showing the outcome,
without its buttons, and one answer follows it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.config import Config
from bot.core.clicks import APPROVAL_NOTICES
from bot.core.replier import Replier
from bot.wiring import claude_replier
from testkit import check_invariants
from testkit.fake_anthropic import FakeAnthropic, Plan, ToolUse
from testkit.fake_slack import FakeSlackApi, PostedMessage, dm
from tests.slack_harness import DM_KEY, Bot, api, running_bot, ts
from tests.test_slack_stop import StoreDownHost, deliver, press
from tests.tool_harness import KEY_ENV, stdio_server, tool_results
from tests.tool_server import calls_per_key

__all__ = ["api"]  # fixture

TICKET = ToolUse("create_ticket", {"title": "printer on fire"})
CREATED = "created OPS-201 (normal priority): printer on fire"


def sections(server: FakeAnthropic, ledger: Path, hold: Path) -> dict[str, Any]:
    llm = {"base_url": server.base_url, "api_key_env": "TEST_ANTHROPIC_KEY", "max_retries": 0,
           "timeout_seconds": 20.0}  # fmt: skip
    tools = {"mcp": [stdio_server(ledger, hold, approve="ask")]}
    channels = [{"platform": "slack", "channel": "D1", "tools": {"mcp": ["tracker"]}}]
    return {"llm": llm, "tools": tools, "channels": channels}


def claude(config: Config) -> Replier:
    return claude_replier(config, KEY_ENV)


async def until(predicate: Callable[[], bool], within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def card_posted(bot: Bot, api: FakeSlackApi) -> PostedMessage:
    """The burst's window closes, the model asks for create_ticket: the card is posted."""
    await bot.step(1.5)
    await until(lambda: any(m.buttons() for m in api.posts()))
    [card] = [m for m in api.posts() if m.buttons()]
    return card


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.txt"


@pytest.fixture
def hold(tmp_path: Path) -> Path:
    return tmp_path / "hold"


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_approve_runs_the_call_once_and_the_card_ends_showing_it(
    api: FakeSlackApi, server: FakeAnthropic, ledger: Path, hold: Path, mode: str
) -> None:
    server.queue(Plan(text="", tool_uses=[TICKET]), Plan(text="Opened OPS-201 for you."))
    async with running_bot(api, mode=mode, sections=sections(server, ledger, hold),
                           llm=claude) as bot:  # fmt: skip
        await deliver(bot, api, mode, dm(ts(1), "the printer is on fire, open a ticket"))
        card = await card_posted(bot, api)
        assert [(b["action_id"], b["text"]["text"]) for b in card.buttons()] == [
            ("burstbot_approve", "Approve"), ("burstbot_deny", "Deny")
        ]  # fmt: skip
        assert "tracker.create_ticket" in card.visible and "printer on fire" in card.visible
        assert calls_per_key(ledger) == {}
        approve = api.click(card, "U1", "burstbot_approve")
        second = api.click(card, "U1", "burstbot_approve")  # pressed again, on the same card
        await press(bot, api, mode, approve)
        [click] = await bot.store.clicks(DM_KEY.id)  # stored before the ack
        assert (click.kind, click.outcome, click.clicker_name) == ("approve", "approved", "alice")
        await press(bot, api, mode, approve)  # Slack delivering it again
        await press(bot, api, mode, second)
        await asyncio.wait_for(api.ephemeral_posted.wait(), 5)
        assert [e["text"] for e in api.ephemerals] == [APPROVAL_NOTICES["already_decided"]]
        await bot.step()
        await until(lambda: len(api.posts()) == 2)
        await bot.step()
        outcomes = sorted(c.outcome or "" for c in await bot.store.clicks(DM_KEY.id))
        assert outcomes == ["already_decided", "approved"]
        await check_invariants(bot.store, [DM_KEY.id])
    assert list(calls_per_key(ledger).values()) == [1]
    [given] = tool_results(server.requests[1])
    assert given["content"] == CREATED
    ended, answer = api.posts()
    assert ended.ts == card.ts and ended.buttons() == []
    assert ended.visible.endswith(f"Approved by alice: {CREATED}")
    assert answer.visible == "Opened OPS-201 for you."


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_a_press_by_someone_else_is_refused_and_deny_ends_the_card(
    api: FakeSlackApi, server: FakeAnthropic, ledger: Path, hold: Path, mode: str
) -> None:
    server.queue(Plan(text="", tool_uses=[TICKET]), Plan(text="All right, no ticket."))
    async with running_bot(api, mode=mode, sections=sections(server, ledger, hold),
                           llm=claude) as bot:  # fmt: skip
        await deliver(bot, api, mode, dm(ts(1), "open a ticket"))
        card = await card_posted(bot, api)
        late = api.click(card, "U1", "burstbot_approve")  # pressed later, on a stale copy
        await press(bot, api, mode, api.click(card, "U2", "burstbot_approve"))
        await asyncio.wait_for(api.ephemeral_posted.wait(), 5)
        assert api.ephemerals == [
            {"channel": "D1", "user": "U2", "text": APPROVAL_NOTICES["refused"], "thread_ts": ""}
        ]
        await press(bot, api, mode, api.click(card, "U1", "burstbot_deny"))
        await bot.step()
        await until(lambda: len(api.posts()) == 2)
        await bot.step()
        api.ephemeral_posted.clear()
        await press(bot, api, mode, late)
        await asyncio.wait_for(api.ephemeral_posted.wait(), 5)
        assert api.ephemerals[-1]["text"] == APPROVAL_NOTICES["already_decided"]
        outcomes = sorted(c.outcome or "" for c in await bot.store.clicks(DM_KEY.id))
        assert outcomes == ["already_decided", "denied", "refused"]
    assert calls_per_key(ledger) == {}
    ended, answer = api.posts()
    assert ended.buttons() == [] and ended.visible.endswith("Denied by alice; not run.")
    assert answer.visible == "All right, no ticket."


async def test_a_press_the_store_cannot_keep_is_answered_with_an_error_and_decides_nothing(
    api: FakeSlackApi, server: FakeAnthropic, ledger: Path, hold: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    server.queue(Plan(text="", tool_uses=[TICKET]))
    async with running_bot(api, sections=sections(server, ledger, hold), llm=claude,
                           host_wrapper=StoreDownHost) as bot:  # fmt: skip
        await deliver(bot, api, "http", dm(ts(1), "open a ticket"))
        card = await card_posted(bot, api)
        assert await bot.sender.interact(api.click(card, "U1", "burstbot_approve")) == 500
        assert "an Approve or Deny click was not stored (database is locked)" in caplog.text
        assert await bot.store.clicks(DM_KEY.id) == []
        [action] = await bot.store.actions(DM_KEY.id)
        assert action.approval == "waiting"
    assert calls_per_key(ledger) == {}
