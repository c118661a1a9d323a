"""Streaming on Slack: the real front end (Bolt, `AsyncWebClient`) against the fake Web API.

A burst's answer is one message: `chat.postMessage` once (with the draft's metadata), then
`chat.update` as it grows, and the reply that finishes it updates it once more. The fake refuses
updates of messages that are not the bot's and text over Slack's limit, and posts nothing by
itself (a lost response leaves the message there, as on Slack).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from bot.core.events import ConversationKey
from testkit import ReplierCall, ScriptedReplier, check_invariants
from testkit.fake_slack import TEAM, Failure, FakeSlackApi, dm
from tests.clock_steps import step
from tests.slack_harness import DM_KEY, Bot, api, running_bot, ts

__all__ = ["api"]  # fixture

INTERVAL = 1.0


async def until(predicate: Callable[[], bool], within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def generating(bot: Bot, n: int) -> ReplierCall:
    await bot.clock.advance(1.5)
    await bot.app.engine.run_due()
    return await bot.replier.next_call(n)


async def drafted(bot: Bot, key: ConversationKey = DM_KEY) -> None:
    """The draft is posted and its message id recorded."""
    async with asyncio.timeout(5.0):
        while (draft := await bot.store.draft(key.id)) is None or not draft.message_id:  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def answered(bot: Bot) -> None:
    await step(bot.clock, INTERVAL)
    await bot.app.engine.idle()


async def draft_post_lost(api: FakeSlackApi, bot: Bot) -> ReplierCall:
    """A burst of one message ("hello") whose draft's post landed while its caller saw a 500."""
    await bot.send(dm(ts(1), "hello"))
    call = await generating(bot, 0)
    api.fail("chat.postMessage", Failure(status=500, error="internal_error", lands=True))
    call.stream(1, "Hi")
    await step(bot.clock, INTERVAL)
    await until(lambda: len(api.posts()) == 1)  # it landed; the caller saw a 500
    return call


def shown(api: FakeSlackApi) -> list[str]:
    return [m.text for m in api.posts()]


def post_and_update_calls(api: FakeSlackApi) -> list[str]:
    return [m for m in api.methods() if m.startswith("chat.")]


async def test_three_lines_grow_one_message_that_ends_with_the_answer(
    api: FakeSlackApi,
) -> None:
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        for n, text in enumerate(["hey", "so about the deploy", "is it done?"]):
            assert await bot.send(dm(ts(n + 1), text)) == 200
        call = await generating(bot, 0)
        assert call.texts == ["hey", "so about the deploy", "is it done?"]
        call.stream(3, "The deploy *is")
        await step(bot.clock, INTERVAL)
        await drafted(bot)
        call.stream(3, " done*, see [the log](https://ci.example/")
        await step(bot.clock, INTERVAL)
        await until(lambda: len(api.updates) == 1)
        assert shown(api) == ["The deploy _is done_, see"]  # no half-written link
        call.finish("The deploy *is done*, see [the log](https://ci.example/42).")
        await answered(bot)
        assert shown(api) == ["The deploy _is done_, see <https://ci.example/42|the log>."]
        assert post_and_update_calls(api) == ["chat.postMessage", "chat.update", "chat.update"]
        [message] = api.posts()
        [row] = await bot.store.replies(DM_KEY.id)
        assert row.state == "sent" and row.platform_message_ids == (f"D1:{message.ts}",)
        assert message.metadata is not None
        assert message.metadata["event_payload"]["reply_id"] == f"r{row.id}"  # found on retry
        await check_invariants(bot.store, [DM_KEY.id])


async def test_typing_again_in_a_thread_restarts_the_same_message(api: FakeSlackApi) -> None:
    thread = ConversationKey("slack", TEAM, "D1", ts(1))
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        await bot.send(dm(ts(2), "what is half of", thread_ts=ts(1)))
        first = await generating(bot, 0)
        first.stream(2, "Half of what")
        await step(bot.clock, INTERVAL)
        await drafted(bot, thread)
        assert await bot.sender.send(dm(ts(3), "ten?", thread_ts=ts(1))) == 200  # mid-stream
        await step(bot.clock, INTERVAL)
        await until(lambda: shown(api) == ["…"])  # still reading
        await bot.app.engine.idle()
        second = await generating(bot, 1)
        assert second.texts == ["what is half of", "ten?"]
        second.stream(2, "Half of ten")
        await step(bot.clock, INTERVAL)
        await until(lambda: shown(api) == ["Half of ten"])
        second.finish("Half of ten is five.")
        await answered(bot)
        assert shown(api) == ["Half of ten is five."]
        [message] = api.posts()
        assert message.thread_ts == ts(1)
        assert post_and_update_calls(api).count("chat.postMessage") == 1
        await check_invariants(bot.store, [thread.id])


async def test_a_50000_character_answer_ends_as_parts_below_the_limit(
    api: FakeSlackApi,
) -> None:
    async with running_bot(api, replier=ScriptedReplier(hold=True), max_parts_per_reply=40) as bot:
        await bot.send(dm(ts(1), "write a lot"))
        call = await generating(bot, 0)
        words = [f"word{n}" for n in range(7000)]
        for chunk in range(0, len(words), 1000):
            call.stream(1000, " ".join(words[chunk : chunk + 1000]) + " ")
            await step(bot.clock, INTERVAL)
            await until(lambda: len(api.posts()) == 1)
            await asyncio.sleep(0.02)
        assert len(api.posts()[0].text) <= 3500  # the draft shows one part's worth
        answer = " ".join(words)
        assert len(answer) > 50_000
        call.finish(answer)
        for _ in range(30):  # the parts go out at the channel's budget: a few, then one a second
            await step(bot.clock, INTERVAL)
            if [r.state for r in await bot.store.replies(DM_KEY.id)] == ["sent"]:
                break
        await bot.app.engine.idle()
        parts = shown(api)
        assert len(parts) > 14 and all(len(p) <= 3500 for p in parts)
        assert " ".join(parts).split() == words
        await check_invariants(bot.store, [DM_KEY.id])


async def test_updates_are_no_more_frequent_than_the_interval(api: FakeSlackApi) -> None:
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        await bot.send(dm(ts(1), "count"))
        call = await generating(bot, 0)
        started = bot.clock.now()
        for n in range(40):  # a token every 0.25 s for 10 s
            call.stream(1, f"{n} ")
            await bot.clock.advance(0.25)
            await asyncio.sleep(0.01)
        elapsed = bot.clock.now() - started
        streamed = len(api.updates) + len(api.posts())
        assert 5 <= streamed <= elapsed / INTERVAL + 1
        call.finish("done")
        await answered(bot)
        assert shown(api) == ["done"]


async def test_a_draft_post_whose_response_was_lost_is_found_not_posted_again(
    api: FakeSlackApi,
) -> None:
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        call = await draft_post_lost(api, bot)
        call.stream(1, " there")
        await step(bot.clock, INTERVAL)
        await until(lambda: shown(api) == ["Hi there"])
        call.finish("Hi there!")
        await answered(bot)
        assert shown(api) == ["Hi there!"]
        assert post_and_update_calls(api).count("chat.postMessage") == 1  # the lost one, only
        await check_invariants(bot.store, [DM_KEY.id])


async def test_a_draft_update_that_would_change_nothing_is_not_sent(api: FakeSlackApi) -> None:
    """Two partial texts that render alike (a half-written code span is closed either way): the
    second would set the draft to what it shows, so it is not sent; the final update relabels
    the message, so it is."""
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        await bot.send(dm(ts(1), "hello"))
        call = await generating(bot, 0)
        call.stream(1, "Use `x")
        await step(bot.clock, INTERVAL)
        await drafted(bot)
        call.stream(1, "`")  # "Use `x`": shown as the draft already shows it
        await step(bot.clock, INTERVAL)
        await step(bot.clock, INTERVAL)
        call.finish("Use `x`.")
        await answered(bot)
        assert shown(api) == ["Use `x`."]
        assert api.redundant_updates == 0
        assert post_and_update_calls(api) == ["chat.postMessage", "chat.update"]
        await check_invariants(bot.store, [DM_KEY.id])
