"""An approval's wait as a task on Slack: the real front end (Bolt over HTTP and Socket Mode,
`AsyncWebClient`) against the fake Slack, the real Claude replier against the fake Messages API
and the real MCP client against the ticket server (tests/tool_server.py), which counts its own
`create_ticket` calls.

In an assistant thread the approval card shows "Waiting for approval: *tool*" as a task card
above its text and buttons, in progress; its ending shows the same task complete (approved, the
call made once) or error (denied), with the outcome's line. A channel reply's card shows none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.approval_cards import wait_task
from bot.core.actions import ActionRecord
from bot.core.approvals import Approval, card_text, ended_card, outcome_line
from testkit import check_invariants
from testkit.fake_anthropic import FakeAnthropic, Plan
from testkit.fake_slack import BOT_USER, FakeSlackApi, PostedMessage, channel_message
from tests.slack_harness import api, running_bot, ts
from tests.test_slack_stop import deliver, press
from tests.test_slack_thinking_steps import (
    TICKET,
    claude,
    open_thread,
    stepping_until,
    task_output,
)
from tests.tool_harness import stdio_server
from tests.tool_server import calls_per_key

__all__ = ["api"]  # fixture

CREATED = "created OPS-201 (normal priority): printer on fire"
WAITING = "Waiting for approval: create_ticket"
ENDED = {
    "burstbot_approve": ("complete", f"Approved by alice: {CREATED}"),
    "burstbot_deny": ("error", "Denied by alice; not run."),
}


def sections(server: FakeAnthropic, ledger: Path, hold: Path) -> dict[str, Any]:
    llm = {"base_url": server.base_url, "api_key_env": "TEST_ANTHROPIC_KEY", "max_retries": 0,
           "timeout_seconds": 20.0}  # fmt: skip
    tools = {"mcp": [stdio_server(ledger, hold, approve="ask")]}
    channels = [{"platform": "slack", "channel": channel, "tools": {"mcp": ["tracker"]}}
                for channel in ("D1", "C1")]  # fmt: skip
    return {"llm": llm, "tools": tools, "channels": channels,
            "streaming": {"interval_seconds": 1.0}}  # fmt: skip


def shown(message: PostedMessage) -> list[tuple[str, str, str | None]]:
    """The message's task cards: title, status, output."""
    return [(t["title"], t["status"], task_output(t)) for t in message.tasks.values()]


def the_card(api: FakeSlackApi) -> PostedMessage:
    [card] = [m for m in api.posts() if m.buttons()]
    return card


@pytest.mark.parametrize("mode", ["http", "socket"])
@pytest.mark.parametrize("button", ["burstbot_approve", "burstbot_deny"])
async def test_an_assistant_threads_card_shows_the_wait_as_a_task_its_ending_ends(
    api: FakeSlackApi, server: FakeAnthropic, tmp_path: Path, mode: str, button: str
) -> None:
    api.status_supported = True
    server.queue(Plan(text="", tool_uses=[TICKET]), Plan(text="Here is where it stands."))
    ledger, hold = tmp_path / "ledger.txt", tmp_path / "hold"
    async with running_bot(api, mode=mode, sections=sections(server, ledger, hold),
                           llm=claude) as bot:  # fmt: skip
        await open_thread(bot, api, mode, "open a ticket for the printer")
        await stepping_until(bot, lambda: any(m.buttons() for m in api.posts()))
        card = the_card(api)
        assert shown(card) == [(WAITING, "in_progress", None)]
        kinds = [b["type"] for b in card.blocks or []]
        assert kinds[0] == "task_card" and kinds[-1] == "actions"  # above the text and buttons
        assert "tracker.create_ticket" in card.visible
        assert calls_per_key(ledger) == {}
        await press(bot, api, mode, api.click(card, "U1", button))
        await bot.app.engine.run_due()  # the decided burst is due at once: the answer resumes
        await stepping_until(bot, lambda: any(
            m.visible == "Here is where it stands." for m in api.posts()))  # fmt: skip
        await bot.step()
        assert card.buttons() == []
        status, line = ENDED[button]
        assert shown(card) == [(WAITING, status, line)]
        assert card.visible.endswith(line)
        await check_invariants(bot.store, [])
    assert list(calls_per_key(ledger).values()) == ([1] if button == "burstbot_approve" else [])


async def test_plan_display_puts_the_cards_task_in_a_plan(
    api: FakeSlackApi, server: FakeAnthropic, tmp_path: Path
) -> None:
    api.status_supported = True
    server.queue(Plan(text="", tool_uses=[TICKET]), Plan(text="Done."))
    ledger, hold = tmp_path / "ledger.txt", tmp_path / "hold"
    async with running_bot(api, sections=sections(server, ledger, hold), llm=claude,
                           task_display="plan") as bot:  # fmt: skip
        await open_thread(bot, api, "http", "open a ticket for the printer")
        await stepping_until(bot, lambda: any(m.buttons() for m in api.posts()))
        card = the_card(api)
        assert next(b["type"] for b in card.blocks or []) == "plan"
        assert shown(card) == [(WAITING, "in_progress", None)]
        await press(bot, api, "http", api.click(card, "U1", "burstbot_approve"))
        await bot.app.engine.run_due()
        await stepping_until(bot, lambda: any(m.visible == "Done." for m in api.posts()))
        assert next(b["type"] for b in card.blocks or []) == "plan"
        assert shown(card) == [(WAITING, "complete", f"Approved by alice: {CREATED}")]


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_a_channel_replys_card_shows_no_task(
    api: FakeSlackApi, server: FakeAnthropic, tmp_path: Path, mode: str
) -> None:
    api.status_supported = True  # the assistant is there; a channel's thread shows no steps
    server.queue(Plan(text="", tool_uses=[TICKET]), Plan(text="Opened OPS-201."))
    ledger, hold = tmp_path / "ledger.txt", tmp_path / "hold"
    async with running_bot(api, mode=mode, sections=sections(server, ledger, hold),
                           llm=claude) as bot:  # fmt: skip
        mention = f"<@{BOT_USER}> the printer is on fire, open a ticket"
        await deliver(bot, api, mode, channel_message(ts(1), mention, event_type="app_mention"))
        await bot.step(1.5)  # the burst's window closes: the model asks for the call
        await stepping_until(bot, lambda: any(m.buttons() for m in api.posts()))
        card = the_card(api)
        assert (card.channel, card.thread_ts) == ("C1", ts(1))
        assert card.tasks == {} and [b["type"] for b in card.blocks or []][-1] == "actions"
        assert all(b["type"] in ("section", "actions") for b in card.blocks or [])
        await press(bot, api, mode, api.click(card, "U1", "burstbot_approve"))
        await bot.app.engine.run_due()
        await stepping_until(bot, lambda: any(m.visible == "Opened OPS-201." for m in api.posts()))
        assert card.buttons() == [] and card.tasks == {}
        assert all(b["type"] == "section" for b in card.blocks or [])
    assert list(calls_per_key(ledger).values()) == [1]


def action(approval: Approval) -> ActionRecord:
    return ActionRecord("c1", "k1", 1, 1, 1, "tracker", "create_ticket", "{}", False, "toolu_1",
                        0.0, None, None, False, approval=approval, decided_by="alice")  # fmt: skip


ENDINGS: list[tuple[Approval, str | None, str]] = [
    ("running", CREATED, "complete"),
    ("running", None, "error"),  # approved, then cut off: it may have run
    ("denied", None, "error"),
    ("expired", None, "error"),
    ("superseded", None, "error"),
]


@pytest.mark.parametrize(("approval", "result", "status"), ENDINGS)
def test_each_ending_the_core_writes_ends_the_task_as_it_went(
    approval: Approval, result: str | None, status: str
) -> None:
    """The task is read from the card's text as bot/core/approvals.py writes it."""
    asked = card_text("tracker", "create_ticket", "{}", "alice", 900)
    [waiting] = wait_task(asked, "timeline", ended=False)
    assert (waiting["title"], waiting["status"]) == (WAITING, "in_progress")
    line = outcome_line(approval, "alice", result)
    [ended] = wait_task(ended_card(action(approval), line), "timeline", ended=True)
    assert (ended["task_id"], ended["title"]) == (waiting["task_id"], WAITING)
    assert (ended["status"], task_output(ended)) == (status, line.split(" ", 1)[1])
    assert wait_task(asked, None, ended=False) == []


async def test_the_fake_refuses_a_posted_task_card_slack_would_refuse(api: FakeSlackApi) -> None:
    client = AsyncWebClient(token=api.token, base_url=api.url, retry_handlers=[])
    bad = {"type": "task_card", "task_id": "approval", "title": WAITING, "status": "waiting"}
    plan = {"type": "plan", "title": "Working on it", "tasks": [bad]}
    for blocks in ([bad], [plan]):
        with pytest.raises(SlackApiError) as refused:
            await client.chat_postMessage(channel="D1", text="card", blocks=blocks)
        assert refused.value.response["error"] == "invalid_blocks"
    assert api.posts() == []
