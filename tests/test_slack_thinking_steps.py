"""Thinking steps in assistant threads: the real front end (Bolt over HTTP and Socket Mode,
`AsyncWebClient`) against the fake Slack, the real Claude replier against the fake Messages API
and the real MCP client against the ticket server (tests/tool_server.py). A web search, a tool
call and an approval show as tasks of the streamed answer (`task_update` chunks, then the
answer's task cards), each ending complete; a superseded generation's tasks leave the message."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.inbound import Identity
from adapters.slack.native_stream import NativeStreams, TaskDisplay
from adapters.slack.outbound import Outbound
from adapters.slack.streaming import SlackDrafts
from bot.config import Config
from bot.core.events import ConversationKey, Draft, Reply
from bot.core.replier import DraftText, Replier, SearchStep
from bot.wiring import claude_replier
from testkit import ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from testkit.fake_anthropic import FakeAnthropic, Plan, Search, ToolUse
from testkit.fake_slack import (
    BOT_ID,
    BOT_USER,
    TEAM,
    FakeSlackApi,
    PostedMessage,
    assistant_event,
    dm,
)
from tests.clock_steps import step
from tests.slack_harness import Bot, api, running_bot, ts
from tests.test_slack_stop import deliver, press
from tests.tool_harness import KEY_ENV, stdio_server
from tests.tool_server import calls_per_key

__all__ = ["api"]  # fixture

INTERVAL = 1.0
RESULTS = [("https://status.example.org/printers", "Printer status")]
TICKET = ToolUse("create_ticket", {"title": "printer on fire"})
SEARCH_ID = "srvtoolu_0100"


def sections(server: FakeAnthropic, ledger: Path, hold: Path, approve: str) -> dict[str, Any]:
    llm = {"base_url": server.base_url, "api_key_env": "TEST_ANTHROPIC_KEY", "max_retries": 0,
           "timeout_seconds": 20.0}  # fmt: skip
    tools = {"web_search": True, "web_search_max_uses": 3,
             "mcp": [stdio_server(ledger, hold, approve=approve)]}  # fmt: skip
    channels = [{"platform": "slack", "channel": "D1", "tools": {"mcp": ["tracker"]}}]
    return {"llm": llm, "tools": tools, "channels": channels,
            "streaming": {"interval_seconds": INTERVAL}}  # fmt: skip


def claude(config: Config) -> Replier:
    return claude_replier(config, KEY_ENV)


async def until(predicate: Callable[[], bool], within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def stepping_until(bot: Bot, predicate: Callable[[], bool], steps: int = 30) -> None:
    """Step the draft's interval until `predicate` holds: the model and the tool server answer
    as real I/O, so what shows may come an interval or a few later."""
    for _ in range(steps):
        await step(bot.clock, INTERVAL)
        with contextlib.suppress(TimeoutError):
            await until(predicate, within=0.3)
            return
    assert predicate()


def thread_answer(api: FakeSlackApi) -> list[PostedMessage]:
    return [m for m in api.posts() if m.thread_ts == ts(1) and not m.buttons()]


def streamed_tasks(api: FakeSlackApi) -> dict[str, list[str]]:
    """Each task's statuses as the stream's chunks sent them, in order."""
    statuses: dict[str, list[str]] = {}
    for entry in api.chat_log:
        for chunk in entry.get("chunks") or []:
            if chunk["type"] == "task_update":
                statuses.setdefault(chunk["id"], []).append(chunk["status"])
    return statuses


async def open_thread(bot: Bot, api: FakeSlackApi, mode: str, text: str) -> None:
    await deliver(bot, api, mode, assistant_event("assistant_thread_started", "D1", ts(1), "U1"))
    await deliver(bot, api, mode, dm(ts(2), text, thread_ts=ts(1)))
    await bot.app.engine.idle()
    await bot.clock.advance(1.5)  # the burst's window closes: the answer starts
    await bot.app.engine.run_due()


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_a_search_and_a_tool_call_show_as_tasks_that_end_complete(
    api: FakeSlackApi, server: FakeAnthropic, tmp_path: Path, mode: str
) -> None:
    api.status_supported = True
    server.queue(
        Plan(text="", searches=[Search("printer on fire", RESULTS, hold=True)],
             tool_uses=[TICKET]),
        Plan(text="Opened OPS-201 for the printer.", pause_after=1),
    )  # fmt: skip
    ledger, hold = tmp_path / "ledger.txt", tmp_path / "hold"
    async with running_bot(api, mode=mode, sections=sections(server, ledger, hold, "never"),
                           llm=claude) as bot:  # fmt: skip
        await open_thread(bot, api, mode, "the printer is on fire, open a ticket")
        await stepping_until(bot, lambda: any(m.streaming for m in api.messages))
        [stream] = [m for m in api.messages if m.streaming]
        await stepping_until(bot, lambda: stream.tasks.get(SEARCH_ID, {}).get("status")
                             == "in_progress")  # fmt: skip
        server.release_searches()  # the search answers; the model asks for the tool
        await stepping_until(bot, lambda: len(stream.tasks) == 2 and all(
            t["status"] == "complete" for t in stream.tasks.values()))  # fmt: skip
        tool = next(t for t in stream.tasks.values() if t["id"] != SEARCH_ID)
        assert tool["title"] == "Using create_ticket"
        search = stream.tasks[SEARCH_ID]
        assert search["title"] == "Searching the web: printer on fire"
        assert search["sources"] == [{"type": "url", "url": RESULTS[0][0], "text": RESULTS[0][1]}]
        server.release()
        await stepping_until(bot, lambda: not stream.streaming and stream.metadata is not None
                             and stream.metadata["event_type"] != "burstbot_draft")  # fmt: skip
        await bot.step()
        [answer] = thread_answer(api)
        assert answer.visible.startswith("Opened OPS-201 for the printer.")
        # the answer keeps its steps, complete, as task cards above its text
        assert {i: t["status"] for i, t in answer.tasks.items()} == {
            SEARCH_ID: "complete", tool["id"]: "complete"}  # fmt: skip
        assert streamed_tasks(api)[SEARCH_ID][0] == "in_progress"
        assert list(calls_per_key(ledger).values()) == [1]
        await check_invariants(bot.store, [])


OUTCOMES = {
    "burstbot_approve": (("Approved: create_ticket", "complete", None),
                         ("Using create_ticket", "complete", "done")),
    "burstbot_deny": (("Not run: create_ticket", "error", "a person denied it"),
                      ("Using create_ticket", "error", "not run")),
}  # fmt: skip


def task_output(task: dict[str, Any]) -> str | None:
    """A task card's output text (None without one)."""
    output = task.get("output")
    if output is None:
        return None
    return "".join(e["text"] for s in output["elements"] for e in s["elements"])


@pytest.mark.parametrize("mode", ["http", "socket"])
@pytest.mark.parametrize("button", ["burstbot_approve", "burstbot_deny"])
async def test_a_decided_call_shows_its_approval_then_the_call_as_tasks(
    api: FakeSlackApi, server: FakeAnthropic, tmp_path: Path, mode: str, button: str
) -> None:
    api.status_supported = True
    server.queue(Plan(text="", tool_uses=[TICKET]),
                 Plan(text="Here is where it stands.", pause_after=1))  # fmt: skip
    ledger, hold = tmp_path / "ledger.txt", tmp_path / "hold"
    async with running_bot(api, mode=mode, sections=sections(server, ledger, hold, "ask"),
                           llm=claude) as bot:  # fmt: skip
        await open_thread(bot, api, mode, "open a ticket for the printer")
        await stepping_until(bot, lambda: any(m.buttons() for m in api.posts()))
        [card] = [m for m in api.posts() if m.buttons()]
        await press(bot, api, mode, api.click(card, "U1", button))
        await bot.app.engine.run_due()  # the decided burst is due at once: the answer resumes
        await stepping_until(bot, lambda: any(m.streaming for m in api.messages))
        [stream] = [m for m in api.messages if m.streaming]
        await stepping_until(bot, lambda: len(stream.tasks) == 2)
        server.release()
        await stepping_until(bot, lambda: not stream.streaming)
        await bot.step()
        [answer] = [m for m in thread_answer(api) if m.ts != card.ts]
        assert answer.visible == "Here is where it stands."
        shown = [(t["title"], t["status"], task_output(t)) for t in answer.tasks.values()]
        assert tuple(shown) == OUTCOMES[button]  # the approval first, then the call
        assert next(iter(answer.tasks)).startswith("approval:")
    ran = list(calls_per_key(ledger).values())
    assert ran == ([1] if button == "burstbot_approve" else [])


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_a_superseded_generations_tasks_leave_the_message(
    api: FakeSlackApi, mode: str
) -> None:
    api.status_supported = True
    key_id = f"slack:{TEAM}:D1:{ts(1)}"
    async with running_bot(api, replier=ScriptedReplier(hold=True), mode=mode) as bot:
        await open_thread(bot, api, mode, "what is half of")
        first = await bot.replier.next_call(0)
        first.usage.step(SearchStep("srvtoolu_1", "half of what"))
        first.stream(3, "Half of")
        await stepping_until(bot, lambda: any(m.tasks for m in api.messages))
        [message] = [m for m in api.messages if m.tasks]
        typed = asyncio.ensure_future(deliver(bot, api, mode, dm(ts(3), "ten?", thread_ts=ts(1))))
        await until(lambda: first.cancelled)
        await typed
        await stepping_until(bot, lambda: message.text == "…")
        assert message.tasks == {}  # the superseded search no longer shows
        await bot.app.engine.idle()
        await bot.clock.advance(1.5)
        await bot.app.engine.run_due()
        second = await bot.replier.next_call(1)
        second.stream(3, "Five")
        await step(bot.clock, INTERVAL)
        second.finish("Five.")
        await step(bot.clock, INTERVAL)
        await bot.app.engine.idle()
        await bot.step()
        assert [m.text for m in thread_answer(api)] == ["Five."]
        assert message.tasks == {}
        await check_invariants(bot.store, [key_id])


# one process's drafts, without the engine ------------------------------------------------------
KEY = ConversationKey("slack", TEAM, "D1", ts(1))


def drafts_of_a_process(api: FakeSlackApi, display: TaskDisplay = "timeline") -> SlackDrafts:
    """The drafts of one burstbot process, for the assistant thread at `KEY`."""
    client = AsyncWebClient(token=api.token, base_url=api.url, retry_handlers=[])
    identity = Identity(TEAM, BOT_USER, BOT_ID)

    async def assistant_thread(key: ConversationKey) -> bool:
        return key == KEY

    streams = NativeStreams(client, identity, display=display)
    return SlackDrafts(Outbound(client, identity), assistant_thread, streams=streams)


async def test_a_takeover_continues_the_same_message_without_the_crashed_generations_tasks(
    api: FakeSlackApi,
) -> None:
    crashed, survivor = drafts_of_a_process(api), drafts_of_a_process(api)
    draft = Draft("dkey", None, 0.0, None)
    searching = SearchStep("srvtoolu_1", "half of ten")
    message_id = await crashed.post_draft(KEY, draft, DraftText("", "", (searching,)))
    [message] = api.posts()
    assert message.tasks["srvtoolu_1"]["status"] == "in_progress"
    # the process died; the survivor's generation of the same burst goes on in its message
    tool = SearchStep("toolu_1", "calculator", "done", kind="tool")
    await survivor.edit_draft(KEY, message_id, DraftText("Five", "Five", (tool,)))
    assert [m.ts for m in api.posts()] == [message.ts] and not message.streaming
    assert message.visible == "Five"
    assert {i: (t["title"], t["status"]) for i, t in message.tasks.items()} == {
        "toolu_1": ("Using calculator", "complete")}  # fmt: skip
    reply = Reply("rkey", KEY, "Five.", 1, draft=Draft("dkey", message_id))
    await survivor.finish(reply, "Five.")
    assert (message.visible, message.metadata is not None) == ("Five.", True)
    assert list(message.tasks) == ["toolu_1"]
    assert [m.ts for m in api.posts()] == [message.ts]


async def test_plan_display_titles_the_plan_and_the_answer_keeps_it(api: FakeSlackApi) -> None:
    drafts = drafts_of_a_process(api, display="plan")
    running = SearchStep("srvtoolu_1", "burstbot releases")
    message_id = await drafts.post_draft(KEY, Draft("dkey", None, 0.0, None),
                                         DraftText("", "", (running,)))  # fmt: skip
    start = api.calls[-1][1]
    assert start["task_display_mode"] == "plan"
    assert [c["type"] for c in start["chunks"]] == ["plan_update", "task_update"]
    done = SearchStep("srvtoolu_1", "burstbot releases", "done", (RESULTS[0],))
    await drafts.edit_draft(KEY, message_id, DraftText("It is", "It is", (done,)))
    reply = Reply("rkey", KEY, "It is out.", 1, draft=Draft("dkey", message_id))
    await drafts.finish(reply, "It is out.")
    [message] = api.posts()
    assert message.visible == "It is out."
    [plan] = [b for b in message.blocks or [] if b["type"] == "plan"]
    assert [(t["task_id"], t["status"]) for t in plan["tasks"]] == [("srvtoolu_1", "complete")]


async def test_the_fake_refuses_a_task_card_slack_would_refuse(api: FakeSlackApi) -> None:
    client = AsyncWebClient(token=api.token, base_url=api.url, retry_handlers=[])
    started = await client.chat_startStream(channel="D1", thread_ts=ts(1), markdown_text="Hi")
    await client.chat_stopStream(channel="D1", ts=started["ts"])
    bad = {"type": "task_card", "task_id": "t1", "title": "Searching", "status": "running"}
    with pytest.raises(SlackApiError) as refused:
        await client.chat_update(channel="D1", ts=started["ts"], text="Hi", blocks=[bad])
    assert refused.value.response["error"] == "invalid_blocks"


async def test_after_a_crash_the_next_process_goes_on_in_the_same_message(
    api: FakeSlackApi, tmp_path: Path
) -> None:
    """The first process streams an answer with a search running, then stops without finishing
    it; the next one answers the burst in the same message, and the search it never saw end
    does not stay running."""
    api.status_supported = True
    db, clock = str(tmp_path / "burstbot.db"), FakeClock()
    replier = ScriptedReplier(hold=True)
    async with running_bot(api, db=db, clock=clock, replier=replier, owner="first") as first:
        await open_thread(first, api, "http", "what is half of ten?")
        call = await replier.next_call(0)
        call.usage.step(SearchStep("srvtoolu_1", "half of ten"))
        call.stream(3, "Half of")
        await stepping_until(first, lambda: any(m.tasks for m in api.messages))
        # the process goes away here: its stream still runs, the burst is unanswered
    [stream] = api.posts()
    assert stream.streaming and stream.tasks["srvtoolu_1"]["status"] == "in_progress"
    second_replier = ScriptedReplier(hold=True)
    async with running_bot(api, db=db, clock=clock, replier=second_replier,
                           owner="second") as second:  # fmt: skip
        await second.clock.advance(31)  # past the first process's lease: due again
        await second.app.engine.run_due()
        call = await second_replier.next_call(0)
        call.stream(3, "Five")
        await stepping_until(second, lambda: stream.text == "Five")
        assert stream.tasks == {} and [m.ts for m in api.posts()] == [stream.ts]
        call.finish("Five.")
        await step(second.clock, INTERVAL)
        await second.app.engine.idle()
        await second.step()
        assert [(m.ts, m.visible) for m in thread_answer(api)] == [(stream.ts, "Five.")]
        assert stream.tasks == {} and not stream.streaming
        await check_invariants(second.store, [KEY.id])
