"""Answers streamed for longer than Slack lets a stream run: the real front end (Bolt over HTTP
and Socket Mode, `AsyncWebClient`) against the fake Web API, whose streams stop taking appends
`stream_limit_seconds` after they start (`message_not_in_streaming_state`), on a clock the test
shares with the bot. However long the answer streams, the burst ends as one answer in which
every word shows once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bot.core.events import ConversationKey
from bot.core.replier import SearchStep
from testkit import ScriptedReplier, check_invariants
from testkit.fake_slack import TEAM, FakeSlackApi, assistant_event, dm
from tests.clock_steps import step
from tests.slack_harness import Bot, api, running_bot, ts

__all__ = ["api"]  # fixture

INTERVAL = 1.0
KEY = ConversationKey("slack", TEAM, "D1", ts(1))
LIMIT = 12.0  # the fake's stream limit (Slack's: about five minutes)
MARGIN = 9.0  # burstbot's (`stream_max_seconds`, 240 by default)


async def until(predicate: Any, within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def deliver(bot: Bot, api: FakeSlackApi, mode: str, event: dict[str, Any]) -> None:
    """One event, as Slack sends it in `mode`, and its acknowledgement."""
    if mode == "http":
        assert await bot.send(event) == 200
        return
    envelope = await api.push_envelope(event)
    await until(lambda: envelope in api.acks)
    await bot.app.engine.idle()


def thread_messages(api: FakeSlackApi) -> list[str]:
    return [m.text for m in api.posts() if m.thread_ts == ts(1)]


def done_tasks(api: FakeSlackApi) -> dict[str, str]:
    """Each task the answer shows, by id: its status."""
    [answer] = [m for m in api.posts() if m.thread_ts == ts(1)]
    return {task_id: task["status"] for task_id, task in answer.tasks.items()}


async def long_answer(
    api: FakeSlackApi, mode: str, words: int, **slack: Any
) -> tuple[str, list[str]]:
    """A burst answered one word a second for `words` seconds, a search running from the
    eighth second to the fifteenth (across the fake's stream limit): the answer and what the
    thread shows in the end."""
    async with running_bot(api, replier=ScriptedReplier(hold=True), mode=mode, **slack) as bot:
        api.clock = bot.clock.monotonic  # Slack's time is the test's
        await deliver(bot, api, mode, assistant_event("assistant_thread_started", "D1", ts(1),
                                                      "U1"))  # fmt: skip
        await deliver(bot, api, mode, dm(ts(2), "count slowly", thread_ts=ts(1)))
        await bot.clock.advance(1.5)
        await bot.app.engine.run_due()
        call = await bot.replier.next_call(0)
        said = [f"w{n}" for n in range(words)]
        for n, word in enumerate(said):  # one word a second: the answer outlives its stream
            if n == 8:
                call.usage.step(SearchStep("srvtoolu_1", "slack stream limit"))
            if n == 15:
                sources = (("https://docs.slack.dev/streaming", "Streaming"),)
                call.usage.step(SearchStep("srvtoolu_1", "slack stream limit", "done", sources))
            call.stream(1, word if n == 0 else f" {word}")
            await step(bot.clock, INTERVAL)
            if n == 0:
                await until(lambda: "chat.startStream" in api.methods())
        answer = " ".join(said) + "."
        call.finish(answer)
        await step(bot.clock, INTERVAL)
        await bot.app.engine.idle()
        await bot.step()
        await check_invariants(bot.store, [KEY.id])
        return answer, thread_messages(api)


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_an_answer_streamed_past_the_stream_limit_is_one_answer_with_every_word_once(
    api: FakeSlackApi, mode: str
) -> None:
    api.status_supported = True
    api.stream_limit_seconds = LIMIT
    answer, shown = await long_answer(api, mode, 20, stream_max_seconds=MARGIN)
    assert shown == [answer]  # one answer, every word once
    assert not any(m.streaming for m in api.posts())
    assert "message_not_in_streaming_state" not in api.stream_refusals  # stopped before Slack
    assert done_tasks(api) == {"srvtoolu_1": "complete"}  # the search did not stay running


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_a_stream_slack_ends_first_still_ends_as_one_answer(
    api: FakeSlackApi, mode: str
) -> None:
    """Slack's limit comes before burstbot's margin (a slow clock, a changed limit): the
    refused append is the signal, and the answer goes on the same."""
    api.status_supported = True
    api.stream_limit_seconds = LIMIT
    answer, shown = await long_answer(api, mode, 20, stream_max_seconds=LIMIT + 60)
    assert shown == [answer]
    assert "message_not_in_streaming_state" in api.stream_refusals
    assert done_tasks(api) == {"srvtoolu_1": "complete"}
