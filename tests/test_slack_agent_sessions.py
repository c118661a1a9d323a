"""Slack agent sessions: the real front end (Bolt, `AsyncWebClient`) against the fake Slack.

In a workspace whose app is an agent, a thread's answer shows as its session `processing` while
it is written and `active` once it is posted; Slack's own Stop on the session arrives as
`agent_session_stopped` (signed HTTP, with Slack's retries, or Socket Mode), is stored and
decided before it is acked, counts once, and ends the answer with what was shown and who stopped
it. Where sessions are refused (not an agent) or do not apply (a top-level DM), drafts keep the
Stop button; a failing status call never holds up the answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.agent_sessions import NOTE_SESSION
from adapters.slack.outbound import SESSION_STATUS
from bot.cli.explain import explain_lines
from bot.core.clicks import NOTICES, Click, ClickAnswer
from bot.core.errors import StoreError
from bot.core.events import ConversationKey
from testkit import ScriptedReplier, check_invariants
from testkit.fake_slack import (
    TEAM,
    Failure,
    FakeSlackApi,
    PostedMessage,
    assistant_event,
    channel_message,
    dm,
)
from testkit.fake_slack_agents import NOT_AN_AGENT
from tests.clock_steps import step
from tests.slack_harness import DM_KEY, Bot, running_bot, ts
from tests.test_slack_stop import deliver, streaming_draft
from tests.test_slack_streaming import INTERVAL, answered, drafted, generating, until

THREAD = ConversationKey("slack", TEAM, "C1", ts(1))
STOPPED = "The plan is\n\n_(stopped by alice)_"


@pytest.fixture
async def agent() -> AsyncIterator[FakeSlackApi]:
    """Slack, with the app declared an agent (and subscribed to agent_session_stopped)."""
    fake = await FakeSlackApi(agent=True).start()
    yield fake
    await fake.stop()


@pytest.fixture
async def api() -> AsyncIterator[FakeSlackApi]:
    fake = await FakeSlackApi().start()
    yield fake
    await fake.stop()


def mention() -> dict[str, Any]:
    return channel_message(ts(1), "<@UBOT> what is the plan?", event_type="app_mention")


def the_message(api: FakeSlackApi) -> PostedMessage:
    [message] = api.posts()
    return message


def statuses(api: FakeSlackApi) -> list[str]:
    return api.agents.statuses_of(THREAD.channel, THREAD.thread)


async def processing(bot: Bot, api: FakeSlackApi) -> Any:
    """The thread's burst is being answered, "The plan is" in its draft, and its session shows
    `processing` (the indicator's delay has passed). The model's call."""
    call = await streaming_draft(bot, api, "http", THREAD)
    await until(lambda: statuses(api) == ["processing"])
    return call


async def stop_session(
    bot: Bot, api: FakeSlackApi, mode: str, event: dict[str, Any], retry: int = 0
) -> None:
    """One delivery of the session's stop; returns once Slack has its ack."""
    if mode == "http":
        retry_num = retry or None  # Slack's retries carry the first delivery's event_id
        assert await bot.sender.send(event, retry_num=retry_num, event_id="EvStop1") == 200
        return
    envelope = await api.push_envelope(event, retry_attempt=retry)
    await until(lambda: envelope in api.acks)


async def test_a_threads_session_is_processing_while_its_answer_is_written(
    agent: FakeSlackApi,
) -> None:
    async with running_bot(agent, replier=ScriptedReplier(hold=True)) as bot:
        await deliver(bot, agent, "http", mention())
        call = await processing(bot, agent)
        note = await bot.store.note(THREAD.id, NOTE_SESSION)
        assert note == f"C1:{ts(1)}"  # what the session's stop will name
        call.stream(2, " to ship")
        await step(bot.clock, INTERVAL)
        await until(lambda: the_message(agent).visible == "The plan is to ship")
        assert the_message(agent).buttons() == []  # Slack's session shows the Stop
        call.finish("The plan is to ship on Friday.")
        await answered(bot)
        await until(lambda: statuses(agent) == ["processing", "active"])
        message = the_message(agent)
        assert (message.visible, message.thread_ts, message.buttons()) == (
            "The plan is to ship on Friday.", ts(1), [])  # fmt: skip
        assert agent.reaction_log == []  # the session is the indicator: no reaction
        assert len(await bot.store.replies(THREAD.id)) == 1


async def test_a_stopper_users_info_does_not_know_is_named_by_id_not_by_escaped_markup(
    agent: FakeSlackApi,
) -> None:
    """An admin `users.info` has no name for: the stopped line shows their id as plain text. A
    `<@U…>` mention cannot survive the reply's rendering (every `<` is escaped so that no text
    pings anyone): people would read "&lt;@U3&gt;" or "<@U3>" as literal text."""
    access = {"admin_ids": ["U3"]}
    async with running_bot(agent, replier=ScriptedReplier(hold=True), access=access) as bot:
        await deliver(bot, agent, "http", mention())
        await processing(bot, agent)
        await stop_session(bot, agent, "http", agent.stop_session("C1", ts(1), "U3"))
        await answered(bot)
        await until(lambda: "stopped by" in the_message(agent).text)
        assert the_message(agent).visible == "The plan is\n\n_(stopped by U3)_"


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_a_stop_of_the_session_ends_the_answer_in_the_same_message(
    agent: FakeSlackApi, mode: str
) -> None:
    async with running_bot(agent, replier=ScriptedReplier(hold=True), mode=mode) as bot:
        await deliver(bot, agent, mode, mention())
        call = await streaming_draft(bot, agent, mode, THREAD)
        await until(lambda: statuses(agent) == ["processing"])
        await stop_session(bot, agent, mode, agent.stop_session("C1", ts(1), "U1"))
        [click] = await bot.store.clicks(THREAD.id)  # stored before the ack
        assert (click.outcome, click.clicker_name, click.target) == ("stopped", "alice",
                                                                     f"C1:{ts(1)}")  # fmt: skip
        await answered(bot)
        await until(lambda: call.cancelled)  # the model request was closed
        message = the_message(agent)  # no second reply
        assert (message.visible, message.buttons()) == (STOPPED, [])
        await until(lambda: statuses(agent) == ["processing", "active"])  # moved on by us
        assert agent.ephemerals == []
        [generation] = await bot.store.generations(THREAD.id)
        assert generation.outcome == "stopped"
        explained = "\n".join(await explain_lines(bot.store, THREAD.id, bot.clock.now()) or [])
        assert "clicked   stop: stopped by alice at" in explained  # `burstbot explain`
        await check_invariants(bot.store, [THREAD.id])


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_the_same_stop_delivered_twice_stops_once(agent: FakeSlackApi, mode: str) -> None:
    async with running_bot(agent, replier=ScriptedReplier(hold=True), mode=mode) as bot:
        await deliver(bot, agent, mode, mention())
        await streaming_draft(bot, agent, mode, THREAD)
        await until(lambda: statuses(agent) == ["processing"])
        event = agent.stop_session("C1", ts(1), "U1")
        await stop_session(bot, agent, mode, event)
        await stop_session(bot, agent, mode, event, retry=1)  # Slack delivering it again
        assert [c.outcome for c in await bot.store.clicks(THREAD.id)] == ["stopped"]
        assert await bot.store.current_version(THREAD.id) == 2  # the message, then one stop
        await answered(bot)
        assert [m.visible for m in agent.posts()] == [STOPPED]
        assert agent.ephemerals == []
        assert len(await bot.store.replies(THREAD.id)) == 1


async def test_a_stop_by_someone_else_is_refused_and_told_to_them_alone(
    agent: FakeSlackApi,
) -> None:
    async with running_bot(agent, replier=ScriptedReplier(hold=True)) as bot:
        await deliver(bot, agent, "http", mention())
        call = await processing(bot, agent)
        await stop_session(bot, agent, "http", agent.stop_session("C1", ts(1), "U2"))
        await asyncio.wait_for(agent.ephemeral_posted.wait(), 5)
        assert agent.ephemerals == [
            {"channel": "C1", "user": "U2", "text": NOTICES["refused"], "thread_ts": ts(1)}
        ]
        assert [(c.outcome, c.clicker_name) for c in await bot.store.clicks(THREAD.id)] == [
            ("refused", "bob")
        ]
        assert not call.cancelled  # the answer goes on
        call.finish("The plan is to ship on Friday.")
        await answered(bot)
        assert the_message(agent).visible == "The plan is to ship on Friday."
        await until(lambda: statuses(agent) == ["processing", "active"])


async def test_a_stop_after_the_answer_changes_nothing_and_says_so(agent: FakeSlackApi) -> None:
    async with running_bot(agent, replier=ScriptedReplier(hold=True)) as bot:
        await deliver(bot, agent, "http", mention())
        call = await processing(bot, agent)
        late = agent.stop_session("C1", ts(1), "U1")  # pressed now, delivered after
        call.finish("The plan is done.")
        await answered(bot)
        await stop_session(bot, agent, "http", late)
        await asyncio.wait_for(agent.ephemeral_posted.wait(), 5)
        assert [e["text"] for e in agent.ephemerals] == [NOTICES["ended"]]
        assert [m.visible for m in agent.posts()] == ["The plan is done."]


async def test_a_workspace_without_agent_sessions_shows_the_stop_button(
    api: FakeSlackApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "burstbot.slack")
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        await deliver(bot, api, "http", mention())
        call = await streaming_draft(bot, api, "http", THREAD)
        await until(lambda: api.agents.refusals == [NOT_AN_AGENT])
        await until(lambda: bool(api.reaction_log))  # the thinking reaction instead
        call.stream(2, " to ship")
        await step(bot.clock, INTERVAL)
        await until(lambda: the_message(api).visible == "The plan is to ship")
        [button] = the_message(api).buttons()
        assert button["action_id"] == "burstbot_stop"
        assert api.agents.session_log == []
        assert f"refused ({NOT_AN_AGENT}): no agent sessions in workspace" in caplog.text
        call.finish("The plan is to ship on Friday.")
        await answered(bot)
        assert the_message(api).buttons() == []


async def test_a_top_level_dm_has_no_session_and_keeps_the_stop_button(
    agent: FakeSlackApi,
) -> None:
    async with running_bot(agent, replier=ScriptedReplier(hold=True)) as bot:
        await deliver(bot, agent, "http", dm(ts(1), "what is the plan?"))
        call = await streaming_draft(bot, agent, "http", DM_KEY)
        await until(lambda: bool(agent.reaction_log))  # the indicator went on: as a reaction
        assert [b["action_id"] for b in the_message(agent).buttons()] == ["burstbot_stop"]
        assert "agents.sessions.setStatus" not in agent.methods()
        call.finish("Done.")
        await answered(bot)


async def test_a_failing_status_call_does_not_hold_up_the_answer(
    agent: FakeSlackApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "burstbot.slack")
    agent.fail("agents.sessions.setStatus", Failure(status=500, error="internal_error"), times=2)
    async with running_bot(agent, replier=ScriptedReplier(hold=True)) as bot:
        await deliver(bot, agent, "http", mention())
        call = await streaming_draft(bot, agent, "http", THREAD)
        await until(lambda: agent.methods().count("agents.sessions.setStatus") == 1)
        call.finish("The plan is to ship on Friday.")
        await answered(bot)
        assert the_message(agent).visible == "The plan is to ship on Friday."
        await until(lambda: agent.methods().count("agents.sessions.setStatus") == 2)
        assert len(await bot.store.replies(THREAD.id)) == 1
        logged = [r for r in caplog.records if "agents.sessions.setStatus failed" in r.message]
        assert len(logged) == 1  # logged once, however often it fails
        assert agent.agents.session_log == []
        # the next answer in the workspace tries again, and Slack takes it
        again = channel_message(ts(5), "<@UBOT> and?", event_type="app_mention", thread_ts=ts(1))
        await deliver(bot, agent, "http", again)
        call = await generating(bot, 1)
        call.stream(2, "Then")
        await step(bot.clock, INTERVAL)
        await drafted(bot, THREAD)
        await until(lambda: statuses(agent) == ["processing"])
        call.finish("Then we rest.")
        await answered(bot)
        await until(lambda: statuses(agent) == ["processing", "active"])


async def test_without_the_stop_event_subscribed_the_status_shows_but_the_button_stays(
    agent: FakeSlackApi, caplog: pytest.LogCaptureFixture
) -> None:
    """Slack warns that nobody could stop the session: the person keeps our Stop button."""
    caplog.set_level(logging.WARNING, "burstbot.slack")
    agent.agents.stop_subscribed = False
    async with running_bot(agent, replier=ScriptedReplier(hold=True)) as bot:
        await deliver(bot, agent, "http", mention())
        call = await processing(bot, agent)
        call.stream(2, " to ship")
        await step(bot.clock, INTERVAL)
        await until(lambda: the_message(agent).visible == "The plan is to ship")
        assert [b["action_id"] for b in the_message(agent).buttons()] == ["burstbot_stop"]
        assert "subscribe the app to agent_session_stopped" in caplog.text
        call.finish("Done.")
        await answered(bot)
        await until(lambda: statuses(agent) == ["processing", "active"])


async def test_the_fake_checks_set_status_as_slack_does(agent: FakeSlackApi) -> None:
    """Through slack_sdk: the status values Slack takes, a thread required, a title's limit."""
    client = AsyncWebClient(token="xoxb-test", base_url=agent.url)
    ok = await client.agents_sessions_setStatus(
        channel_id="C1", thread_ts=ts(1), status="processing", title="Plans"
    )
    assert (ok["status"], ok["title"], ok.get("warning")) == ("processing", "Plans", None)
    for args in (
        {"channel_id": "C1", "thread_ts": ts(1), "status": "thinking"},  # not a lifecycle state
        {"channel_id": "C1", "status": "active"},  # no thread: sessions are thread-based
        {"channel_id": "C1", "thread_ts": ts(2), "status": "active", "title": "x" * 201},
    ):
        with pytest.raises(SlackApiError) as refused:
            await client.agents_sessions_setStatus(**args)
        assert refused.value.response["error"] == "invalid_arguments"
    await client.agents_sessions_setStatus(channel_id="C1", thread_ts=ts(1), status="active")
    assert statuses(agent) == ["processing", "active"]
    agent.agents.agent = False
    with pytest.raises(SlackApiError) as refused:
        await client.agents_sessions_setStatus(channel_id="C1", thread_ts=ts(1), status="active")
    assert refused.value.response["error"] == NOT_AN_AGENT
    assert agent.agents.refusals == ["invalid_arguments"] * 3 + [NOT_AN_AGENT]
    with pytest.raises(AssertionError, match="no stop button"):
        agent.stop_session("C1", ts(1))  # the session is not processing: no Stop shows


async def test_a_rate_limited_status_holds_the_workspaces_status_calls(
    agent: FakeSlackApi, caplog: pytest.LogCaptureFixture
) -> None:
    """A 429 holds the workspace's status budget for its Retry-After: a burst meanwhile shows
    the thinking reaction and makes no status call; both answers go on."""
    caplog.set_level(logging.WARNING, "burstbot.slack")
    limited = Failure(status=429, error="ratelimited", headers={"Retry-After": "10"})
    agent.fail(SESSION_STATUS, limited)
    other = ConversationKey("slack", TEAM, "C1", ts(3))
    async with running_bot(agent, replier=ScriptedReplier(hold=True)) as bot:
        await deliver(bot, agent, "http", mention())
        first = await streaming_draft(bot, agent, "http", THREAD)
        await until(lambda: agent.methods().count(SESSION_STATUS) == 1 and bool(agent.reactions))
        another = channel_message(ts(3), "<@UBOT> and you?", event_type="app_mention")
        assert await bot.sender.send(another) == 200  # (not bot.send: a generation is held)
        second = await generating(bot, 1)
        second.stream(2, "Me")
        await step(bot.clock, INTERVAL)
        await drafted(bot, other)
        await until(lambda: len(agent.reactions) == 2)  # its indicator went on: as a reaction
        assert agent.methods().count(SESSION_STATUS) == 1  # held: no call
        assert "rate limited" in caplog.text
        await step(bot.clock, 10.0)  # the Retry-After passes
        first.finish("The plan is to ship.")
        second.finish("Me too.")
        await answered(bot)
        assert sorted(m.visible for m in agent.posts()) == ["Me too.", "The plan is to ship."]
        assert agent.agents.statuses_of(THREAD.channel, THREAD.thread) in ([], ["active"])


class StoreDownOnce:
    """The app, whose store fails the first click it is handed (it is down for a moment)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.failed = False

    async def click(self, click: Click) -> ClickAnswer:
        if not self.failed:
            self.failed = True
            raise StoreError("database is locked")
        return cast(ClickAnswer, await self.app.click(click))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)


async def test_a_stop_the_store_cannot_keep_is_not_acked_and_slacks_retry_stops(
    agent: FakeSlackApi, caplog: pytest.LogCaptureFixture
) -> None:
    """Unlike a button press, an event is delivered again when it gets no 2xx: the retry is the
    stop, stored then."""
    replier = ScriptedReplier(hold=True)
    async with running_bot(agent, replier=replier, host_wrapper=StoreDownOnce) as bot:
        await deliver(bot, agent, "http", mention())
        call = await processing(bot, agent)
        event = agent.stop_session("C1", ts(1), "U1")
        assert await bot.sender.send(event, event_id="EvStop1") == 500
        assert "event not stored (database is locked)" in caplog.text
        assert await bot.store.clicks(THREAD.id) == [] and not call.cancelled
        await stop_session(bot, agent, "http", event, retry=1)  # Slack's retry
        assert [c.outcome for c in await bot.store.clicks(THREAD.id)] == ["stopped"]
        await answered(bot)
        await until(lambda: call.cancelled)
        assert [m.visible for m in agent.posts()] == [STOPPED]


async def test_a_stop_in_an_assistant_thread_ends_its_native_stream_in_the_same_message(
    agent: FakeSlackApi,
) -> None:
    """An assistant thread streams natively: Slack's Stop ends the stream itself (naming it in
    `streaming_message_ts`); the stopped answer is that message, updated."""
    agent.status_supported = True
    thread = ConversationKey("slack", TEAM, "D1", ts(1))
    async with running_bot(agent, replier=ScriptedReplier(hold=True)) as bot:
        await bot.send(assistant_event("assistant_thread_started", "D1", ts(1), "U1"))
        await bot.send(dm(ts(2), "what is the plan?", thread_ts=ts(1)))
        call = await generating(bot, 0)
        call.stream(3, "The plan is")
        await step(bot.clock, INTERVAL)
        await until(lambda: agent.agents.statuses_of("D1", ts(1)) == ["processing"])
        [stream] = [m for m in agent.posts() if m.streaming]
        event = agent.stop_session("D1", ts(1), "U1")
        assert event["streaming_message_ts"] == [stream.ts] and not stream.streaming
        await stop_session(bot, agent, "http", event)
        await answered(bot)
        await until(lambda: call.cancelled)
        [answer] = [m for m in agent.posts() if m.thread_ts == ts(1)]
        assert (answer.ts, answer.text) == (stream.ts, STOPPED)
        await until(lambda: agent.agents.statuses_of("D1", ts(1)) == ["processing", "active"])
        assert agent.statuses == []  # the session showed the work, not the assistant status
        await check_invariants(bot.store, [thread.id])
