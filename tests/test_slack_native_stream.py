"""Native streams in assistant threads: the real front end (Bolt, `AsyncWebClient`) against the
fake Web API, whose `chat.startStream` / `appendStream` / `stopStream` behave like Slack's (a
streaming message shows in the thread without metadata, cannot be updated until stopped, and
refuses appends once stopped); the real engine and SQLite store on a fake clock. Whatever
happens, a burst shows one message in the thread."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.inbound import Identity
from adapters.slack.outbound import Outbound
from adapters.slack.streaming import SlackDrafts
from bot.core.events import ConversationKey, Draft
from bot.core.replier import DraftText, SearchStep
from testkit import ReplierCall, ScriptedReplier, check_invariants
from testkit.fake_slack import (
    BOT_ID,
    BOT_USER,
    TEAM,
    Failure,
    FakeSlackApi,
    assistant_event,
    dm,
)
from tests.clock_steps import step
from tests.slack_harness import Bot, api, running_bot, ts

__all__ = ["api"]  # fixture

INTERVAL = 1.0
KEY = ConversationKey("slack", TEAM, "D1", ts(1))


def started(thread_ts: str) -> dict[str, Any]:
    return assistant_event("assistant_thread_started", "D1", thread_ts, "U1")


async def until(predicate: Any, within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def generating(bot: Bot, n: int) -> ReplierCall:
    await bot.clock.advance(1.5)
    await bot.app.engine.run_due()
    return await bot.replier.next_call(n)


def chat_methods(api: FakeSlackApi) -> list[str]:
    return [entry["method"] for entry in api.chat_log]


def answers(api: FakeSlackApi) -> list[str]:
    """What the bot shows in the thread, greeting aside."""
    return [m.text for m in api.posts() if m.thread_ts == ts(1) and not is_greeting(m.metadata)]


def is_greeting(metadata: dict[str, Any] | None) -> bool:
    return bool(metadata) and metadata is not None and metadata["event_type"] == "burstbot_greeting"


async def test_a_line_typed_during_the_stream_supersedes_it_and_the_burst_shows_one_message(
    api: FakeSlackApi,
) -> None:
    api.status_supported = True
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        await bot.send(started(ts(1)))
        await bot.send(dm(ts(2), "what is half of", thread_ts=ts(1)))
        first = await generating(bot, 0)
        first.stream(3, "Half of what")
        await step(bot.clock, INTERVAL)
        await until(lambda: "chat.startStream" in chat_methods(api))
        typed = asyncio.ensure_future(bot.send(dm(ts(3), "ten?", thread_ts=ts(1))))
        await until(lambda: first.cancelled)  # typed while it streams
        await step(bot.clock, INTERVAL)  # the superseded draft: stopped, set to waiting
        assert await typed == 200
        await until(lambda: "chat.update" in chat_methods(api))
        assert answers(api) == ["…"]
        await bot.app.engine.idle()
        second = await generating(bot, 1)
        assert second.texts == ["what is half of", "ten?"]
        second.stream(3, "Five")
        await step(bot.clock, INTERVAL)
        second.finish("Five.")
        await step(bot.clock, INTERVAL)
        await bot.app.engine.idle()
        await bot.step()
        assert answers(api) == ["Five."]
        methods = chat_methods(api)
        assert methods.count("chat.startStream") == 1 and methods.count("chat.stopStream") == 1
        assert "chat.postMessage" not in methods and "chat.delete" not in methods
        # the stopped stream is the draft's; the next generation edits the same message
        assert methods.index("chat.stopStream") < methods.index("chat.update")
        [answer] = api.posts()
        assert answer.metadata is not None and answer.metadata["event_payload"]["part"] == 0
        await check_invariants(bot.store, [KEY.id])


async def test_a_stream_whose_start_response_was_lost_is_found_not_started_twice(
    api: FakeSlackApi,
) -> None:
    api.status_supported = True
    api.fail("chat.startStream", Failure(error="internal_error", lands=True))
    assistant = {"greeting": "Hi! Ask me anything."}
    async with running_bot(api, replier=ScriptedReplier(hold=True), assistant=assistant) as bot:
        await bot.send(started(ts(1)))
        await bot.frontend.only.assistant.idle()  # the greeting: the bot's message, labelled
        await bot.send(dm(ts(2), "how do I rotate the secret?", thread_ts=ts(1)))
        call = await generating(bot, 0)
        call.stream(3, "Add the new one")
        await step(bot.clock, INTERVAL)
        await until(lambda: "chat.startStream" in chat_methods(api))  # landed; answer lost
        call.stream(3, " beside the old")
        await step(bot.clock, INTERVAL)
        await until(lambda: "chat.update" in chat_methods(api))  # found, stopped, edited
        call.finish("Add the new one beside the old, then remove the old one.")
        await step(bot.clock, INTERVAL)
        await bot.app.engine.idle()
        await bot.step()
        assert answers(api) == ["Add the new one beside the old, then remove the old one."]
        methods = chat_methods(api)
        assert methods.count("chat.startStream") == 1
        assert methods.count("chat.postMessage") == 1  # the greeting only
        greeting = [m for m in api.posts() if is_greeting(m.metadata)]
        assert [m.text for m in greeting] == ["Hi! Ask me anything."]
        await check_invariants(bot.store, [KEY.id])


async def test_other_slack_conversations_keep_post_and_update(api: FakeSlackApi) -> None:
    api.status_supported = True
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        await bot.send(dm(ts(2), "hello", thread_ts=ts(1)))  # a DM thread, not an assistant one
        call = await generating(bot, 0)
        call.stream(3, "Hi")
        await step(bot.clock, INTERVAL)
        await until(lambda: "chat.postMessage" in chat_methods(api))
        call.finish("Hi there.")
        await step(bot.clock, INTERVAL)
        await bot.app.engine.idle()
        await bot.step()
        assert [m.text for m in api.posts()] == ["Hi there."]
        assert not [m for m in chat_methods(api) if "Stream" in m]


async def test_a_stream_slack_ended_goes_on_by_update_in_the_same_message(
    api: FakeSlackApi,
) -> None:
    api.status_supported = True
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        await bot.send(started(ts(1)))
        await bot.send(dm(ts(2), "a long one please", thread_ts=ts(1)))
        call = await generating(bot, 0)
        call.stream(3, "First part")
        await step(bot.clock, INTERVAL)
        await until(lambda: "chat.startStream" in chat_methods(api))
        api.end_streams()  # minutes later, Slack closed it
        call.stream(3, " and more")
        await step(bot.clock, INTERVAL)
        await until(lambda: "chat.update" in chat_methods(api))
        assert answers(api) == ["First part and more"]
        call.finish("First part and more, all of it.")
        await step(bot.clock, INTERVAL)
        await bot.app.engine.idle()
        await bot.step()
        assert answers(api) == ["First part and more, all of it."]
        assert chat_methods(api) == ["chat.startStream", "chat.update", "chat.update"]
        await check_invariants(bot.store, [KEY.id])


async def test_half_written_markdown_waits_instead_of_being_taken_back(api: FakeSlackApi) -> None:
    api.status_supported = True
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        await bot.send(started(ts(1)))
        await bot.send(dm(ts(2), "is it deployed?", thread_ts=ts(1)))
        call = await generating(bot, 0)
        call.stream(3, "It is, see [the log](https://ci.exa")
        await step(bot.clock, INTERVAL)
        await until(lambda: "chat.startStream" in chat_methods(api))
        call.stream(3, "mple/42) for")
        await step(bot.clock, INTERVAL)
        await until(lambda: "chat.appendStream" in chat_methods(api))
        sent = [entry["text"] for entry in api.chat_log]
        assert sent == ["It is, see", " [the log](https://ci.example/42) for"]
        call.finish("It is, see [the log](https://ci.example/42) for details.")
        await step(bot.clock, INTERVAL)
        await bot.app.engine.idle()
        await bot.step()
        assert answers(api) == ["It is, see <https://ci.example/42|the log> for details."]


async def test_a_workspace_that_refuses_streams_gets_post_and_update_once_warned(
    api: FakeSlackApi, caplog: pytest.LogCaptureFixture
) -> None:
    api.status_supported = True
    api.fail("chat.startStream", Failure(error="unknown_method"))
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        await bot.send(started(ts(1)))
        await bot.send(dm(ts(2), "hello", thread_ts=ts(1)))
        call = await generating(bot, 0)
        call.stream(3, "Hi")
        await step(bot.clock, INTERVAL)
        await until(lambda: "chat.postMessage" in chat_methods(api))
        call.finish("Hi there.")
        await step(bot.clock, INTERVAL)
        await bot.app.engine.idle()
        await bot.step()
        assert answers(api) == ["Hi there."]
        assert chat_methods(api) == ["chat.postMessage", "chat.update"]
        assert api.methods().count("chat.startStream") == 1  # refused once, not asked again
        refused = [r.message for r in caplog.records if "startStream refused" in r.message]
        assert refused == ["slack: chat.startStream refused (unknown_method): drafts are posted "
                           "and updated instead"]  # fmt: skip


# another process's stream (a takeover after a crash) ------------------------------------------
def drafts_of_a_process(api: FakeSlackApi) -> SlackDrafts:
    """The drafts of one burstbot process, for the assistant thread at `KEY`."""
    client = AsyncWebClient(token=api.token, base_url=api.url, retry_handlers=[])
    outbound = Outbound(client, Identity(TEAM, BOT_USER, BOT_ID))

    async def assistant_thread(key: ConversationKey) -> bool:
        return key == KEY

    return SlackDrafts(outbound, native=assistant_thread)


async def test_a_stream_another_process_started_is_stopped_before_its_message_is_edited(
    api: FakeSlackApi,
) -> None:
    crashed, survivor = drafts_of_a_process(api), drafts_of_a_process(api)
    draft = Draft("dkey", None, 0.0, None)
    message_id = await crashed.post_draft(KEY, draft, "Half of")
    await survivor.edit_draft(KEY, message_id, "Five.")
    [message] = api.posts()
    assert (message.text, message.streaming) == ("Five.", False)
    assert chat_methods(api) == ["chat.startStream", "chat.stopStream", "chat.update"]
    second = await crashed.post_draft(KEY, Draft("dkey2", None, 0.0, None), "Never mind")
    await survivor.delete_draft(KEY, second)
    assert [m.text for m in api.posts()] == ["Five."]
    assert chat_methods(api)[-2:] == ["chat.stopStream", "chat.delete"]


# searches as task chunks ------------------------------------------------------------------------
async def test_a_failed_search_is_an_error_task_and_the_text_goes_on_in_the_same_stream(
    api: FakeSlackApi,
) -> None:
    drafts = drafts_of_a_process(api)
    running = SearchStep("srvtoolu_1", "burstbot releases")
    searching = DraftText("_searching the web: burstbot releases…_", "", (running,))
    message_id = await drafts.post_draft(KEY, Draft("dkey", None, 0.0, None), searching)
    failed = SearchStep("srvtoolu_1", "burstbot releases", "failed", error="too_many_requests")
    await drafts.edit_draft(KEY, message_id, DraftText("No results, but", "No results, but",
                                                       (failed,)))  # fmt: skip
    [message] = api.posts()
    assert (message.text, message.streaming) == ("No results, but", True)
    assert message.tasks == {"srvtoolu_1": {
        "type": "task_update", "id": "srvtoolu_1", "title": "Searching the web: burstbot releases",
        "status": "error", "output": "search failed: too_many_requests"}}  # fmt: skip
    assert chat_methods(api) == ["chat.startStream", "chat.appendStream"]
    assert api.chat_log[0]["chunks"][0]["status"] == "in_progress"


async def test_the_fake_refuses_a_task_chunk_slack_would_refuse(api: FakeSlackApi) -> None:
    client = AsyncWebClient(token=api.token, base_url=api.url, retry_handlers=[])
    bad = {"type": "task_update", "id": "t1", "title": "Searching", "status": "running"}
    with pytest.raises(SlackApiError) as refused:
        await client.chat_startStream(channel="D1", thread_ts=ts(1), chunks=[bad])
    assert refused.value.response["error"] == "invalid_arguments"
    assert api.posts() == []
