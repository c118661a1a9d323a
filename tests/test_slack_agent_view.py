"""Slack's agent surface (`agent_view`): the real front end (Bolt over HTTP and Socket Mode,
`AsyncWebClient`) against the fake Slack on the agent view, which sets suggested prompts only as
Slack documents for agents (the DM, no `thread_ts`), keeps agent sessions' statuses and titles,
and sends `app_home_opened` and `app_context_changed` as Slack does; the real engine and SQLite
store on a fake clock."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from testkit import ReplierCall, ScriptedReplier, check_invariants
from testkit.fake_slack import TEAM, FakeSlackApi, dm
from testkit.fake_slack_agents import app_context_changed, app_home_opened, viewer_authorizations
from tests.clock_steps import step
from tests.slack_harness import Bot, running_bot, ts
from tests.test_slack_assistant import ASSISTANT, DESIGN_PROMPTS, INTERVAL, PROMPTS, started, until

MODES = ["http", "socket"]


@pytest.fixture
async def agent() -> AsyncIterator[FakeSlackApi]:
    """Slack, with the app on the agent view and the assistant:write scope."""
    fake = await FakeSlackApi(view="agent", status_supported=True).start()
    fake.channels = {"C5": {"name": "general", "is_member": True},
                     "C7": {"name": "design", "is_member": True}}  # fmt: skip
    yield fake
    await fake.stop()


async def deliver(
    bot: Bot,
    api: FakeSlackApi,
    mode: str,
    event: dict[str, Any],
    retry: int = 0,
    event_id: str | None = None,
    viewer: str = "",
) -> None:
    """One event as Slack sends it in `mode` (`viewer`: the person the envelope names), and its
    acknowledgement."""
    authorizations = viewer_authorizations(viewer, TEAM) if viewer else None
    if mode == "http":
        status = await bot.sender.send(event, retry_num=retry or None, event_id=event_id,
                                       authorizations=authorizations)  # fmt: skip
        assert status == 200
    else:
        envelope = await api.push_envelope(event, retry, authorizations)
        await until(lambda: envelope in api.acks)
    await bot.app.engine.idle()
    await bot.frontend.only.assistant.idle()


async def opened(bot: Bot, api: FakeSlackApi, mode: str, **kwargs: Any) -> None:
    await deliver(bot, api, mode, app_home_opened("U1", "D1"), **kwargs)


async def looking_at(bot: Bot, api: FakeSlackApi, mode: str, channel: str) -> None:
    await deliver(bot, api, mode, app_context_changed(channel, TEAM), viewer="U1")


async def generating(bot: Bot, n: int) -> ReplierCall:
    await bot.clock.advance(1.5)
    await bot.app.engine.run_due()
    return await bot.replier.next_call(n)


async def answered(bot: Bot) -> None:
    await step(bot.clock, INTERVAL)
    await bot.app.engine.idle()
    await bot.step()
    await bot.frontend.only.assistant.idle()


# the Messages tab ---------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
async def test_opening_the_messages_tab_shows_the_prompts_once(
    agent: FakeSlackApi, mode: str
) -> None:
    async with running_bot(agent, assistant=ASSISTANT, mode=mode) as bot:
        await opened(bot, agent, mode, event_id="EvOpen1")
        await opened(bot, agent, mode, retry=1, event_id="EvOpen1")  # Slack's retry
        await opened(bot, agent, mode)  # the tab opened again
        await opened(bot, agent, mode, **({"retry": 1} if mode == "socket" else {}))
        assert agent.agent_view.shown == [("D1", PROMPTS, None)]
        assert agent.agent_view.dropped == []  # never with a thread_ts, which Slack ignores
        await bot.step(10)
        assert agent.posts() == []  # opening the tab is not a message: nothing owed
        home = app_home_opened("U1", "D1", tab="home")
        await deliver(bot, agent, mode, home)
        assert len(agent.agent_view.shown) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_the_prompts_follow_the_channel_the_person_looks_at(
    agent: FakeSlackApi, mode: str
) -> None:
    async with running_bot(agent, assistant=ASSISTANT, mode=mode) as bot:
        await looking_at(bot, agent, mode, "C7")  # a channel with prompts of its own
        await opened(bot, agent, mode)
        assert agent.agent_view.shown == [("D1", DESIGN_PROMPTS, None)]


# an exchange ------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
async def test_a_three_message_burst_gets_one_threaded_reply_a_session_and_one_title(
    agent: FakeSlackApi, mode: str
) -> None:
    replier = ScriptedReplier(hold=True)
    async with running_bot(agent, replier=replier, assistant=ASSISTANT, mode=mode) as bot:
        await opened(bot, agent, mode)
        lines = ["how do I rotate", "the signing secret", "without downtime?"]
        for n, text in enumerate(lines):  # three top-level messages in the Messages tab
            await deliver(bot, agent, mode, dm(ts(n + 2), text))
        assert agent.agents.renames == [("D1", ts(2), "how do I rotate")]
        call = await generating(bot, 0)
        assert call.texts == lines
        await bot.clock.advance(1.0)  # the indicator's delay
        await bot.app.engine.indicator.idle()
        await until(lambda: agent.agents.statuses_of("D1", ts(2)) == ["processing"])
        call.finish("Add the new secret first, then remove the old one.")
        await answered(bot)
        [answer] = agent.posts()
        assert (answer.channel, answer.thread_ts) == ("D1", ts(2))  # under the FIRST message
        assert answer.text == "Add the new secret first, then remove the old one."
        await until(lambda: agent.agents.statuses_of("D1", ts(2)) == ["processing", "active"])
        assert agent.reaction_log == []  # the session is the indicator
        # a line typed in the thread: the same exchange and session, the title stays
        await deliver(bot, agent, mode, dm(ts(9), "and the app token?", thread_ts=ts(2)))
        second = await generating(bot, 1)
        await bot.clock.advance(1.0)
        await bot.app.engine.indicator.idle()
        await until(lambda: agent.agents.statuses_of("D1", ts(2))[-1] == "processing")
        second.finish("The same way.")
        await answered(bot)
        assert [m.thread_ts for m in agent.posts()] == [ts(2), ts(2)]
        await until(lambda: agent.agents.statuses_of("D1", ts(2))[-1] == "active")
        assert agent.agents.statuses_of("D1", ts(2)) == ["processing", "active"] * 2
        # a new top-level message after the answer: a new exchange, under it, with its title
        await deliver(bot, agent, mode, dm(ts(12), "what about webhooks?"))
        (await generating(bot, 2)).finish("Rotate their URL.")
        await answered(bot)
        assert [m.thread_ts for m in agent.posts()] == [ts(2), ts(2), ts(12)]
        assert agent.agents.renames == [("D1", ts(2), "how do I rotate"),
                                        ("D1", ts(12), "what about webhooks?")]  # fmt: skip
        assert agent.agents.refusals == []
        await check_invariants(bot.store, [f"slack/{TEAM}/D1/{ts(2)}", f"slack/{TEAM}/D1/{ts(12)}"])


async def test_a_line_typed_while_the_answer_is_written_joins_its_exchange(
    agent: FakeSlackApi,
) -> None:
    async with running_bot(agent, replier=ScriptedReplier(hold=True)) as bot:
        await opened(bot, agent, "http")
        await deliver(bot, agent, "http", dm(ts(2), "summarize the incident"))
        first = await generating(bot, 0)
        await deliver(bot, agent, "http", dm(ts(3), "in three bullets"))  # top-level again
        await until(lambda: first.cancelled)
        (await generating(bot, 1)).finish("- one\n- two\n- three")
        await answered(bot)
        [answer] = agent.posts()
        assert answer.thread_ts == ts(2)
        assert bot.replier.calls[1].texts == ["summarize the incident", "in three bullets"]


async def test_an_exchange_whose_opener_died_before_storing_takes_lines_for_a_minute(
    agent: FakeSlackApi,
) -> None:
    """A process chose an exchange and died before storing its line: the DM's latest exchange
    names a thread with nothing stored. A line typed within a minute of it joins it (its opener
    may only be slow); one typed later starts its own exchange."""
    async with running_bot(agent, replier=ScriptedReplier(hold=True)) as bot:
        await opened(bot, agent, "http")
        dm_id, died_at = f"slack/{TEAM}/D1/", "1700000100.000000"
        await bot.store.put_note(dm_id, "exchange", ts(2), bot.clock.now())
        await deliver(bot, agent, "http", dm(ts(5), "still there?"))
        (await generating(bot, 0)).finish("Yes.")
        await answered(bot)
        await bot.store.put_note(dm_id, "exchange", died_at, bot.clock.now())
        await deliver(bot, agent, "http", dm("1700000160.000000", "hello again"))
        (await generating(bot, 1)).finish("Hi.")
        await answered(bot)
        assert [m.thread_ts for m in agent.posts()] == [ts(2), "1700000160.000000"]
        assert await bot.store.conversation_state(f"{dm_id}{died_at}") is None


@pytest.mark.parametrize("mode", MODES)
async def test_app_context_changed_changes_the_channel_the_next_answer_is_told_about(
    agent: FakeSlackApi, mode: str
) -> None:
    async with running_bot(agent, replier=ScriptedReplier(hold=True), mode=mode) as bot:
        await opened(bot, agent, mode)
        await looking_at(bot, agent, mode, "C5")
        await deliver(bot, agent, mode, dm(ts(2), "what is new here?"))
        first = await generating(bot, 0)
        assert "The user is looking at #general in Slack" in first.prompt.system
        first.finish("Nothing much.")
        await answered(bot)
        await looking_at(bot, agent, mode, "C7")
        await deliver(bot, agent, mode, dm(ts(5), "and here?", thread_ts=ts(2)))
        second = await generating(bot, 1)
        assert "The user is looking at #design in Slack" in second.prompt.system
        assert "#general" not in second.prompt.system


# which surface --------------------------------------------------------------------------------
async def test_a_dm_slack_never_showed_as_an_agents_stays_unthreaded(agent: FakeSlackApi) -> None:
    """An app not on the agent view never gets app_home_opened: its DMs stay as they were."""
    async with running_bot(agent) as bot:
        await deliver(bot, agent, "http", dm(ts(2), "hello"))
        (await generating(bot, 0)).finish("Hi.")
        await answered(bot)
        [answer] = agent.posts()
        assert answer.thread_ts is None
        assert agent.agents.renames == []


@pytest.mark.parametrize("surface", ["agent", "assistant", "plain"])
async def test_the_start_log_names_the_surface(
    agent: FakeSlackApi, surface: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="burstbot")
    async with running_bot(agent, surface=surface):
        pass
    started_lines = [r.getMessage() for r in caplog.records if "connected as" in r.getMessage()]
    assert started_lines == [f'slack: connected as UBOT in team {TEAM} (http mode, surface '
                             f'"{surface}")']  # fmt: skip


async def test_an_app_on_the_agent_view_configured_assistant_keeps_working_with_one_line(
    agent: FakeSlackApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="burstbot")
    async with running_bot(agent, assistant=ASSISTANT, surface="assistant") as bot:
        await opened(bot, agent, "http")
        await looking_at(bot, agent, "http", "C5")
        await opened(bot, agent, "http")
        await deliver(bot, agent, "http", dm(ts(2), "hello"))
        (await generating(bot, 0)).finish("Hi.")
        await answered(bot)
        assert agent.agent_view.shown == [("D1", PROMPTS, None)]
        assert [m.thread_ts for m in agent.posts()] == [ts(2)]
    lines = [r.getMessage() for r in caplog.records if "surface =" in r.getMessage()]
    assert lines == [
        "slack: the app runs agent_view (app_home_opened in the Messages tab, "
        'app_context_changed) but [slack] surface = "assistant": served all the same; set '
        'surface = "agent" (or move the app to assistant_view, docs/slack-assistant.md)'
    ]


async def test_an_app_on_the_assistant_view_configured_agent_keeps_working_with_one_line(
    api: FakeSlackApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="burstbot")
    api.status_supported = True
    async with running_bot(api, assistant=ASSISTANT, surface="agent") as bot:
        for n in (1, 5):
            await deliver(bot, api, "http", started(ts(n)))
        assert api.suggested == [("D1", ts(1), PROMPTS, None), ("D1", ts(5), PROMPTS, None)]
    lines = [r.getMessage() for r in caplog.records if "surface =" in r.getMessage()]
    assert lines == [
        "slack: the app runs assistant_view (assistant_thread_* events) but [slack] surface = "
        '"agent": served all the same; set surface = "assistant" (or move the app to '
        "agent_view, docs/slack-assistant.md)"
    ]


async def test_plain_serves_dms_and_mentions_only(
    agent: FakeSlackApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="burstbot")
    async with running_bot(agent, assistant=ASSISTANT, surface="plain") as bot:
        await opened(bot, agent, "http")
        await opened(bot, agent, "http")
        await deliver(bot, agent, "http", dm(ts(2), "hello"))
        (await generating(bot, 0)).finish("Hi.")
        await answered(bot)
        assert agent.agent_view.shown == []
        [answer] = agent.posts()
        assert answer.thread_ts is None  # a plain DM
    lines = [r.getMessage() for r in caplog.records if 'surface = "plain"' in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("slack: app_home_opened ignored")


@pytest.fixture
async def api() -> AsyncIterator[FakeSlackApi]:
    fake = await FakeSlackApi().start()
    yield fake
    await fake.stop()
