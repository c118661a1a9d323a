"""Catch-up in the agent view's Messages tab (Slack): lines typed in an agent's DM while no
process listened are answered once, as one new exchange threaded under the first of them.

The real Bolt app and Web API client against the fake Slack on the agent view, whose history is
Slack's (`conversations.history` newest first, top-level messages only, `oldest` exclusive);
the real engine and SQLite store on a fake clock. Messages sent while the bot was down are put
in the fake's history with no event, as Slack would hold them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adapters.slack.agent_view import NOTE_EXCHANGE
from bot.core.events import ConversationKey
from testkit import check_invariants
from testkit.clock import FakeClock
from testkit.fake_slack import TEAM, Failure, FakeSlackApi, dm
from testkit.fake_slack_agents import app_home_opened
from tests.clock_steps import step
from tests.slack_harness import DM_KEY, Bot, running_bot, ts
from tests.test_slack_assistant import ASSISTANT, INTERVAL
from tests.test_slack_catch_up import START, until

DM_ID = DM_KEY.id


def exchange(thread_ts: str) -> ConversationKey:
    return ConversationKey("slack", TEAM, "D1", thread_ts)


@pytest.fixture
async def agent() -> AsyncIterator[FakeSlackApi]:
    """Slack, with the app on the agent view and the assistant:write scope."""
    fake = await FakeSlackApi(view="agent", status_supported=True).start()
    yield fake
    await fake.stop()


def running(api: FakeSlackApi, db: str, clock: FakeClock, **kwargs: Any) -> Any:
    return running_bot(api, db=db, clock=clock, catch_up=True, assistant=ASSISTANT, **kwargs)


async def typed(bot: Bot, api: FakeSlackApi, event: dict[str, Any]) -> None:
    """A line typed while the bot listens: in Slack's history, and its event delivered."""
    api.add_user_message("D1", str(event["ts"]), str(event["text"]))
    assert await bot.send(event) == 200
    await bot.frontend.only.assistant.idle()


async def opened(bot: Bot) -> None:
    assert await bot.send(app_home_opened("U1", "D1")) == 200
    await bot.frontend.only.assistant.idle()


async def answered(bot: Bot) -> None:
    """The window closes, the answer is written and streamed, its session and title settle."""
    await bot.step(1.5)
    await step(bot.clock, INTERVAL)
    await bot.app.engine.idle()
    await bot.step()
    await bot.frontend.only.assistant.idle()


async def caught_up(bot: Bot) -> None:
    await bot.settle()
    await bot.frontend.only.assistant.idle()
    await answered(bot)


async def texts(bot: Bot, key: ConversationKey) -> list[tuple[str, str]]:
    return [(m.text, m.via) for m in await bot.store.messages(key.id)]


async def test_lines_typed_in_the_messages_tab_while_down_are_one_new_exchange_answered_once(
    agent: FakeSlackApi, tmp_path: Path
) -> None:
    db, clock = str(tmp_path / "b.db"), FakeClock(start=START)
    async with running(agent, db, clock) as bot:
        await opened(bot)
        await typed(bot, agent, dm(ts(2), "how do I rotate the secret?"))
        await answered(bot)
        assert [(p.channel, p.thread_ts) for p in agent.posts()] == [("D1", ts(2))]
    # no process runs: the person writes two top-level lines in the Messages tab
    agent.add_user_message("D1", ts(20), "are you there?")
    agent.add_user_message("D1", ts(21), "it's urgent")
    async with running(agent, db, clock) as bot:
        await caught_up(bot)
        assert [(p.channel, p.thread_ts) for p in agent.posts()] == [("D1", ts(2)), ("D1", ts(20))]
        assert [c.texts for c in bot.replier.calls] == [["are you there?", "it's urgent"]]
        assert await texts(bot, exchange(ts(20))) == [
            ("are you there?", "catch-up"),
            ("it's urgent", "catch-up"),
        ]
        assert await texts(bot, exchange(ts(2))) == [("how do I rotate the secret?", "")]
        assert await bot.store.conversation_state(DM_ID) is None  # nothing in the DM itself
        assert ("D1", ts(20), "are you there?") in agent.agents.renames  # the exchange's title
        await check_invariants(bot.store, [exchange(ts(2)).id, exchange(ts(20)).id])
    async with running(agent, db, clock) as bot:  # caught up: a later start finds nothing new
        await caught_up(bot)
        assert len(agent.posts()) == 2 and bot.replier.calls == []


async def test_first_lines_in_a_messages_tab_opened_before_the_downtime_are_answered(
    agent: FakeSlackApi, tmp_path: Path
) -> None:
    db, clock = str(tmp_path / "b.db"), FakeClock(start=START)
    async with running(agent, db, clock) as bot:
        await opened(bot)  # noted as an agent's DM; nothing typed yet
    agent.add_user_message("D1", "1699900000.000001", "a day and more ago: left alone")
    agent.add_user_message("D1", ts(30), "hello?")
    async with running(agent, db, clock) as bot:
        await caught_up(bot)
        assert [(p.channel, p.thread_ts) for p in agent.posts()] == [("D1", ts(30))]
        assert [c.texts for c in bot.replier.calls] == [["hello?"]]


async def test_a_reply_in_the_thread_of_a_line_typed_while_down_joins_its_exchange(
    agent: FakeSlackApi, tmp_path: Path
) -> None:
    db, clock = str(tmp_path / "b.db"), FakeClock(start=START)
    async with running(agent, db, clock) as bot:
        await opened(bot)
    agent.add_user_message("D1", ts(30), "question")
    agent.add_user_message("D1", ts(31), "a detail, in its thread", thread_ts=ts(30))
    async with running(agent, db, clock) as bot:
        await caught_up(bot)
        assert [(p.channel, p.thread_ts) for p in agent.posts()] == [("D1", ts(30))]
        assert [c.texts for c in bot.replier.calls] == [["question", "a detail, in its thread"]]


async def test_a_dm_with_plain_history_from_before_the_agent_view_gets_an_exchange(
    agent: FakeSlackApi, tmp_path: Path
) -> None:
    db, clock = str(tmp_path / "b.db"), FakeClock(start=START)
    async with running(agent, db, clock) as bot:
        await typed(bot, agent, dm(ts(1), "hi, plain DM"))  # before the app's agent view
        await answered(bot)
        assert [(p.channel, p.thread_ts) for p in agent.posts()] == [("D1", None)]
        await opened(bot)  # the app moved to the agent view: the person opens the tab
    agent.add_user_message("D1", ts(40), "now in the Messages tab")
    agent.add_user_message("D1", ts(41), "while you were away")
    async with running(agent, db, clock) as bot:
        await caught_up(bot)
        assert [(p.channel, p.thread_ts) for p in agent.posts()][1:] == [("D1", ts(40))]
        assert [c.texts for c in bot.replier.calls] == [
            ["now in the Messages tab", "while you were away"]
        ]
        assert await texts(bot, DM_KEY) == [("hi, plain DM", "")]  # the DM's history stays
        await check_invariants(bot.store, [DM_ID, exchange(ts(40)).id])


async def test_lines_seen_live_and_again_by_catch_up_are_stored_once_under_their_exchange(
    agent: FakeSlackApi, tmp_path: Path
) -> None:
    db, clock = str(tmp_path / "b.db"), FakeClock(start=START)
    async with running(agent, db, clock) as bot:
        await opened(bot)
        await typed(bot, agent, dm(ts(2), "first"))
        await answered(bot)
    reads = agent.methods().count("conversations.history")
    agent.fail("conversations.history", Failure(429, "ratelimited", {"Retry-After": "600"}))
    async with running(agent, db, clock) as bot:
        await until(lambda: agent.methods().count("conversations.history") == reads + 1)
        await typed(bot, agent, dm(ts(50), "live after the restart"))  # the catch-up waits
        await typed(bot, agent, dm(ts(51), "and its second line"))  # joins its exchange
        await answered(bot)
        assert [c.texts for c in bot.replier.calls] == [["live after the restart",
                                                          "and its second line"]]  # fmt: skip
        # after its wait, the catch-up reads both lines again
        await until(lambda: agent.methods().count("conversations.history") == reads + 2, clock,
                    step=30)  # fmt: skip
        await caught_up(bot)
        assert len(bot.replier.calls) == 1 and len(agent.posts()) == 2
        assert await texts(bot, exchange(ts(50))) == [
            ("live after the restart", ""),
            ("and its second line", ""),
        ]
        assert await bot.store.conversation_state(exchange(ts(51)).id) is None  # no phantom
        assert await bot.app.notes.note(DM_ID, NOTE_EXCHANGE) == ts(50)
        await check_invariants(bot.store, [exchange(ts(2)).id, exchange(ts(50)).id])
