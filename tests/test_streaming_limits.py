"""Many conversations streaming at once inside the platform's rate limits: the real Slack front end
against a fake Web API that enforces Slack's limits as token buckets (429 + Retry-After), all on
one fake clock. Drafts share the workspace's `chat.update` budget; each final text goes out ahead
of the drafts, so none meets a 429 and none is cut short."""

from __future__ import annotations

import asyncio

from testkit import ReplierCall, ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from testkit.fake_slack import TEAM, FakeSlackApi, dm
from tests.clock_steps import step
from tests.slack_harness import Bot, api, running_bot, ts

__all__ = ["api"]  # fixture

CONVERSATIONS = 8  # the engine's slots in these tests (`max_concurrent_generations`)
SLOTS = {"engine": {"max_concurrent_generations": CONVERSATIONS}}
TICK = 0.25  # a token from every model this often


def channel(n: int) -> str:
    return f"D{n}"


async def stream_for(bot: Bot, calls: list[ReplierCall], seconds: float, start: int) -> None:
    for tick in range(int(seconds / TICK)):
        for call in calls:
            call.stream(1, f"w{start + tick} ")
        await step(bot.clock, TICK, within=0.2)


async def drafts_landed(bot: Bot, ids: list[str]) -> None:
    """Until no draft post is still on its way (each recorded draft has its message id): a reply
    committed while its draft's post is in flight waits for that post's outcome (G10), which is
    not what these tests are about (bounded real-time wait for the HTTP calls)."""
    async with asyncio.timeout(5.0):
        while True:
            drafts = [await bot.store.draft(cid) for cid in ids]
            if all(d is None or d.message_id is not None for d in drafts):
                return
            await asyncio.sleep(0.005)


async def shown_within_one_tick(bot: Bot, api: FakeSlackApi, where: str, answer: str) -> None:
    """The commit and the outbox's final edit take no fake time at all: nothing waits for a
    token (bounded real-time wait for the store and the HTTP calls)."""
    async with asyncio.timeout(5.0):
        while [m.text for m in api.posts(where)] != [answer]:  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def test_conversations_streaming_at_once_share_the_budget_and_finals_go_first(
    api: FakeSlackApi,
) -> None:
    clock = FakeClock()
    api.enforce_rate_limits(clock=clock.monotonic)
    async with running_bot(
        api, clock=clock, replier=ScriptedReplier(hold=True), sections=SLOTS
    ) as bot:
        for n in range(CONVERSATIONS):
            await bot.send(dm(ts(n + 1), f"question {n}", channel=channel(n)))
        await bot.clock.advance(1.5)
        await bot.app.engine.run_due()
        calls = [await bot.replier.next_call(n) for n in range(CONVERSATIONS)]
        await stream_for(bot, calls, 10.0, 0)
        streaming = list(calls)
        for turn in range(CONVERSATIONS):  # one answer ends every 1.5 s while the rest stream
            call = streaming.pop(0)
            answer = f"answer to {call.texts[0]}, complete."
            call.finish(answer)
            number = int(call.texts[0].split()[-1])  # the conversation it answers
            await shown_within_one_tick(bot, api, channel(number), answer)
            await stream_for(bot, streaming, 1.25, 100 + 10 * turn)
        assert api.rate_limited == {"chat.update": 0, "chat.postMessage": 0}
        assert len(api.updates) > 2 * CONVERSATIONS  # the drafts did grow, in fewer edits
        ids = [f"slack/{TEAM}/{channel(n)}/" for n in range(CONVERSATIONS)]
        await check_invariants(bot.store, ids)


async def test_a_generation_never_waits_for_a_drafts_budget_and_frees_its_slot_at_once(
    api: FakeSlackApi,
) -> None:
    """Three rounds of eight (the engine's slots) in one workspace: each round's generations end,
    commit and free their slots the moment the model is done, with no fake time passing, so the
    next round starts at once; replies that got no draft are posted whole, and nothing meets a
    429."""
    clock = FakeClock()
    api.enforce_rate_limits(clock=clock.monotonic)
    rounds = 3
    async with running_bot(
        api, clock=clock, replier=ScriptedReplier(hold=True), sections=SLOTS
    ) as bot:
        for n in range(rounds * CONVERSATIONS):
            await bot.send(dm(ts(n + 1), f"question {n}", channel=channel(n)))
        await bot.clock.advance(1.5)
        for round_ in range(rounds):
            await bot.app.engine.run_due()
            first = round_ * CONVERSATIONS
            calls = [await bot.replier.next_call(first + n) for n in range(CONVERSATIONS)]
            await stream_for(bot, calls, 3.0, 10 * round_)
            cids = [f"slack/{TEAM}/{channel(first + n)}/" for n in range(CONVERSATIONS)]
            await drafts_landed(bot, cids)
            for call in calls:
                call.finish(f"answer to {call.texts[0]}, complete.")
            for call in calls:  # no fake time passes from here on
                number = int(call.texts[0].split()[-1])
                answer = f"answer to {call.texts[0]}, complete."
                await shown_within_one_tick(bot, api, channel(number), answer)
            async with asyncio.timeout(5.0):
                while bot.app.engine._workers:  # noqa: ASYNC110
                    await asyncio.sleep(0.005)
        assert api.rate_limited == {"chat.update": 0, "chat.postMessage": 0}
        ids = [f"slack/{TEAM}/{channel(n)}/" for n in range(rounds * CONVERSATIONS)]
        await check_invariants(bot.store, ids)
