"""Slack's assistant threads: the real front end (Bolt in HTTP and Socket Mode, `AsyncWebClient`)
against the fake Web API, which records `assistant.threads.*` calls and refuses them without the
`assistant:write` scope, as Slack does; the real engine and SQLite store on a fake clock."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from bot.config import parse_config
from bot.core.errors import ConfigError, PermanentReplierError
from bot.core.events import ConversationKey
from bot.core.notes import NoteBook
from testkit import ReplierCall, ScriptedReplier, check_invariants
from testkit.fake_slack import TEAM, FakeSlackApi, assistant_event, dm
from tests.clock_steps import step
from tests.slack_harness import Bot, api, running_bot, ts

__all__ = ["api"]  # fixture

PROMPTS = [{"title": "Summarize", "message": "Summarize what I am looking at"}]
DESIGN_PROMPTS = [
    {"title": "Critique", "message": "Critique the latest mockup"},
    {"title": "Name it", "message": "Suggest a name for this feature"},
]
ASSISTANT = {"suggested_prompts": PROMPTS, "channel_prompts": {"C7": DESIGN_PROMPTS}}
INTERVAL = 1.0


def thread_key(thread_ts: str, channel: str = "D1") -> ConversationKey:
    return ConversationKey("slack", TEAM, channel, thread_ts)


def started(thread_ts: str, viewing: str = "", channel: str = "D1") -> dict[str, Any]:
    return assistant_event("assistant_thread_started", channel, thread_ts, "U1", viewing)


def viewing(thread_ts: str, channel: str) -> dict[str, Any]:
    return assistant_event("assistant_thread_context_changed", "D1", thread_ts, "U1", channel)


async def until(predicate: Any, within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def deliver(
    bot: Bot, api: FakeSlackApi, mode: str, event: dict[str, Any], retry: int = 0
) -> None:
    """One event, as Slack sends it in `mode`, and its acknowledgement (a 200, an envelope ack)."""
    if mode == "http":
        assert await bot.send(event, retry_num=retry or None) == 200
        return
    envelope = await api.push_envelope(event, retry_attempt=retry)
    await until(lambda: envelope in api.acks)
    await bot.app.engine.idle()


async def settled(bot: Bot) -> None:
    await bot.frontend.only.assistant.idle()


async def generating(bot: Bot, n: int) -> ReplierCall:
    await bot.clock.advance(1.5)
    await bot.app.engine.run_due()
    return await bot.replier.next_call(n)


# opening a thread -------------------------------------------------------------------------------
async def test_thread_started_sets_the_prompts_once_and_owes_no_reply(api: FakeSlackApi) -> None:
    api.status_supported = True
    async with running_bot(api, assistant=ASSISTANT) as bot:
        assert await bot.send(started(ts(1), viewing="C5"), event_id="Ev1") == 200
        assert await bot.send(started(ts(1), viewing="C5"), event_id="Ev1", retry_num=1) == 200
        assert await bot.send(started(ts(2), viewing="C7")) == 200  # a channel with its own
        await settled(bot)
        assert api.suggested == [("D1", ts(1), PROMPTS, None), ("D1", ts(2), DESIGN_PROMPTS, None)]
        await bot.step(10)
        assert api.posts() == []  # no greeting configured, and opening is not a message
        assert await bot.store.conversation_state(thread_key(ts(1)).id) is None
        assert [m for m in api.methods() if m.startswith("chat.")] == []


async def test_a_configured_greeting_is_posted_in_the_thread(api: FakeSlackApi) -> None:
    api.status_supported = True
    assistant = {"greeting": "Hi! Ask me anything.", "prompts_title": "Try:"}
    async with running_bot(api, assistant=assistant) as bot:
        await bot.send(started(ts(1)))
        await bot.send(started(ts(1)), retry_num=1)
        await settled(bot)
        [greeting] = api.posts()
        assert (greeting.text, greeting.thread_ts) == ("Hi! Ask me anything.", ts(1))
        assert api.suggested == []  # no prompts configured: no call


async def test_socket_mode_acks_the_opening_after_the_note_and_dedupes_redeliveries(
    api: FakeSlackApi,
) -> None:
    api.status_supported = True
    hosts: list[SlowNotesHost] = []
    async with running_bot(api, host_wrapper=slow_notes(hosts), mode="socket", assistant=ASSISTANT):
        first = await api.push_envelope(started(ts(1), viewing="C5"))
        await until(lambda: hosts[0].notes.waiting > 0)  # reached the store, which is slow
        assert api.acks == [], "acked before the thread was noted"
        hosts[0].notes.gate.set()
        await asyncio.wait_for(api.ack_received.wait(), 5)
        assert api.acks == [first]
        api.ack_received.clear()
        again = await api.push_envelope(started(ts(1), viewing="C5"), retry_attempt=1)
        await until(lambda: again in api.acks)
        await until(lambda: len(api.suggested) == 1)
        assert api.suggested == [("D1", ts(1), PROMPTS, None)]
        assert "chat.postMessage" not in api.methods()


class SlowNotes:
    """The store's notes, each write held until the test opens the gate (a slow disk)."""

    def __init__(self, notes: NoteBook) -> None:
        self.inner, self.gate, self.waiting = notes, asyncio.Event(), 0

    async def note(self, conversation_id: str, name: str) -> str | None:
        return await self.inner.note(conversation_id, name)

    async def put_note(self, conversation_id: str, name: str, value: str, now: float) -> None:
        await self._slowly()
        await self.inner.put_note(conversation_id, name, value, now)

    async def add_note(self, conversation_id: str, name: str, value: str, now: float) -> bool:
        await self._slowly()
        return await self.inner.add_note(conversation_id, name, value, now)

    async def noted(self, name: str, under: str) -> list[str]:
        return await self.inner.noted(name, under)

    async def swap_note(
        self, conversation_id: str, name: str, expected: str | None, value: str, now: float
    ) -> bool:
        await self._slowly()
        return await self.inner.swap_note(conversation_id, name, expected, value, now)

    async def _slowly(self) -> None:
        self.waiting += 1
        await self.gate.wait()


class SlowNotesHost:
    def __init__(self, app: Any) -> None:
        self.app, self.notes = app, SlowNotes(app.notes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)


def slow_notes(hosts: list[SlowNotesHost]) -> Any:
    def wrap(app: Any) -> SlowNotesHost:
        hosts.append(SlowNotesHost(app))
        return hosts[-1]

    return wrap


# a burst in the thread ------------------------------------------------------------------------
@pytest.mark.parametrize("surface", ["assistant", "agent"])
@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_three_lines_get_one_streamed_answer_with_status_and_a_title_once(
    api: FakeSlackApi, mode: str, surface: str
) -> None:
    """The assistant surface's behaviour, whether the config says "assistant" or (an app not
    yet moved to the agent view) "agent"."""
    api.status_supported = True
    key = thread_key(ts(1))
    replier = ScriptedReplier(hold=True)
    running = running_bot(api, replier=replier, assistant=ASSISTANT, mode=mode, surface=surface)
    async with running as bot:
        await deliver(bot, api, mode, started(ts(1)))
        for n, text in enumerate(["how do I rotate", "the signing secret", "without downtime?"]):
            await deliver(bot, api, mode, dm(ts(n + 2), text, thread_ts=ts(1)))
        await settled(bot)
        assert api.titles == [("D1", ts(1), "how do I rotate")]
        call = await generating(bot, 0)
        assert call.texts == ["how do I rotate", "the signing secret", "without downtime?"]
        await bot.clock.advance(1.0)  # the indicator's delay
        await bot.app.engine.indicator.idle()
        assert api.statuses == [("D1", ts(1), "is thinking…")]
        call.stream(3, "Add the new secret")
        await step(bot.clock, INTERVAL)
        await until(lambda: len(api.posts()) == 1)
        call.stream(3, " first, then")
        await step(bot.clock, INTERVAL)
        await until(lambda: "chat.appendStream" in api.methods())
        call.finish("Add the new secret first, then remove the old one.")
        await step(bot.clock, INTERVAL)
        await bot.app.engine.idle()
        await bot.step()
        [answer] = api.posts()
        assert answer.thread_ts == ts(1) and not answer.streaming
        assert answer.text == "Add the new secret first, then remove the old one."
        # one native stream: started once, appended to, stopped once, then the final text
        assert api.chat_log == [
            {"method": "chat.startStream", "ts": answer.ts, "text": "Add the new secret"},
            {"method": "chat.appendStream", "ts": answer.ts, "text": " first, then"},
            {"method": "chat.stopStream", "ts": answer.ts, "text": ""},
            {"method": "chat.update", "ts": answer.ts, "text": answer.text},
        ]
        assert answer.metadata is not None and answer.metadata["event_payload"]["part"] == 0
        assert api.statuses == [("D1", ts(1), "is thinking…"), ("D1", ts(1), "")]
        # the next burst: answered as usual, the title stays
        await deliver(bot, api, mode, dm(ts(9), "and for the app token?", thread_ts=ts(1)))
        (await generating(bot, 1)).finish("The same way.")
        await step(bot.clock, INTERVAL)
        await bot.step()
        await settled(bot)
        assert len(api.posts()) == 2
        assert api.titles == [("D1", ts(1), "how do I rotate")]
        await check_invariants(bot.store, [key.id])


async def test_a_line_typed_while_the_status_shows_is_answered_once(api: FakeSlackApi) -> None:
    api.status_supported = True
    key = thread_key(ts(1))
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        await bot.send(started(ts(1)))
        await bot.send(dm(ts(2), "what is half of", thread_ts=ts(1)))
        first = await generating(bot, 0)
        await bot.clock.advance(1.0)
        await bot.app.engine.indicator.idle()
        assert api.statuses == [("D1", ts(1), "is thinking…")]
        await bot.send(dm(ts(3), "ten?", thread_ts=ts(1)))  # while it shows
        await until(lambda: first.cancelled)
        await bot.app.engine.idle()
        second = await generating(bot, 1)
        assert second.texts == ["what is half of", "ten?"]
        second.finish("Five.")
        await step(bot.clock, INTERVAL)
        await bot.step()
        assert [m.text for m in api.posts()] == ["Five."]
        assert api.statuses == [("D1", ts(1), "is thinking…"), ("D1", ts(1), "")]
        await check_invariants(bot.store, [key.id])


async def test_the_status_is_cleared_when_the_burst_fails(api: FakeSlackApi) -> None:
    api.status_supported = True
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        await bot.send(started(ts(1)))
        await bot.send(dm(ts(2), "hello", thread_ts=ts(1)))
        call = await generating(bot, 0)
        await bot.clock.advance(1.0)
        await bot.app.engine.indicator.idle()
        assert api.statuses == [("D1", ts(1), "is thinking…")]
        call.fail(PermanentReplierError("invalid_request_error: prompt is too long"))
        await bot.app.engine.idle()
        await bot.step()
        [apology] = api.posts()
        assert apology.thread_ts == ts(1)
        assert api.statuses == [("D1", ts(1), "is thinking…"), ("D1", ts(1), "")]


async def test_the_title_can_come_from_the_answer_or_not_at_all(api: FakeSlackApi) -> None:
    api.status_supported = True
    async with running_bot(api, assistant={"set_title": "answer"}) as bot:
        await bot.send(started(ts(1)))
        await bot.send(dm(ts(2), "hi", thread_ts=ts(1)))
        await bot.step(1.5)
        await settled(bot)
        assert api.titles == [("D1", ts(1), "reply to: hi")]
    api.titles.clear()
    async with running_bot(api, assistant={"set_title": "off"}) as bot:
        await bot.send(started(ts(5)))
        await bot.send(dm(ts(6), "hi", thread_ts=ts(5)))
        await bot.step(1.5)
        await settled(bot)
        assert api.titles == [] and len(api.posts()) == 2


async def test_a_dm_thread_not_opened_as_an_assistant_thread_gets_no_title(
    api: FakeSlackApi,
) -> None:
    api.status_supported = True
    async with running_bot(api) as bot:
        await bot.send(dm(ts(2), "hi", thread_ts=ts(1)))
        await bot.step(1.5)
        await settled(bot)
        assert api.titles == [] and len(api.posts()) == 1


# context --------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_the_viewed_channel_is_noted_and_named_in_the_next_prompt(
    api: FakeSlackApi, mode: str
) -> None:
    api.status_supported = True
    api.channels = {"C5": {"name": "general", "is_member": True},
                    "C7": {"name": "design", "is_member": True}}  # fmt: skip
    api.add_user_message("C7", ts(1), "the mockups are in figma")
    async with running_bot(api, mode=mode) as bot:
        await deliver(bot, api, mode, started(ts(10), viewing="C5"))
        await deliver(bot, api, mode, viewing(ts(10), "C7"))
        await deliver(bot, api, mode, viewing(ts(10), "C7"), retry=1)
        await deliver(bot, api, mode, dm(ts(11), "what is this channel about?", thread_ts=ts(10)))
        await bot.step(1.5)
        [call] = bot.replier.calls
        assert "The user is looking at #design" in call.prompt.system
        assert "#general" not in call.prompt.system
        assert "the mockups are in figma" not in call.prompt.system  # reading it is opt-in
        assert "conversations.history" not in api.methods()


async def test_reading_the_viewed_channel_is_opt_in_and_only_where_the_bot_is_a_member(
    api: FakeSlackApi,
) -> None:
    api.status_supported = True
    api.channels = {"C7": {"name": "design", "is_member": True},
                    "C8": {"name": "secret-plans", "is_member": False}}  # fmt: skip
    api.add_user_message("C7", ts(1), "the mockups are in figma", user="U2")
    api.add_user_message("C8", ts(2), "we acquire the competitor on friday")
    assistant = {"channel_context": True}
    async with running_bot(api, assistant=assistant) as bot:
        await bot.send(started(ts(10), viewing="C7"))
        await bot.send(dm(ts(11), "summarize please", thread_ts=ts(10)))
        await bot.step(1.5)
        await bot.send(viewing(ts(10), "C8"))
        await bot.send(dm(ts(12), "and this one?", thread_ts=ts(10)))
        await bot.step(1.5)
        first, second = bot.replier.calls
        assert "bob: the mockups are in figma" in first.prompt.system
        assert "The user is looking at #secret-plans" in second.prompt.system
        assert "competitor" not in second.prompt.system
        read = [args["channel"] for method, args in api.calls if method == "conversations.history"]
        assert read == ["C7"]


# without the scope ------------------------------------------------------------------------------
async def test_without_the_scope_one_warning_line_and_replies_as_before(
    api: FakeSlackApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="burstbot")
    async with running_bot(api, assistant=ASSISTANT, surface="assistant") as bot:
        for n in (1, 5):
            assert await bot.send(started(ts(n))) == 200
            await bot.send(dm(ts(n + 1), "hello", thread_ts=ts(n)))
            await bot.step(1.5)
            await bot.step(1.0)
            await settled(bot)
        assert len(api.posts()) == 2
        assert api.suggested == [] and api.titles == []
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert [r.getMessage() for r in warnings] == [
            "slack: assistant.threads.setSuggestedPrompts refused (missing_scope): the app needs "
            "the assistant:write scope and the assistant view (adapters/slack/manifest.yml)",
            "slack: assistant.threads.setTitle refused (missing_scope): the app needs the "
            "assistant:write scope and the assistant view (adapters/slack/manifest.yml)",
        ]
        assert all(r.exc_info is None for r in caplog.records)


async def test_assistant_events_with_assistant_threads_off_are_acked_and_ignored(
    api: FakeSlackApi,
) -> None:
    api.status_supported = True
    async with running_bot(api, assistant={**ASSISTANT, "enabled": False}) as bot:
        assert await bot.send(started(ts(1), viewing="C7")) == 200
        await bot.send(dm(ts(2), "hi", thread_ts=ts(1)))
        await bot.step(1.5)
        await settled(bot)
        assert api.suggested == [] and api.titles == []
        assert len(api.posts()) == 1  # still a DM thread, answered as one


async def test_a_malformed_assistant_event_is_acked_with_a_warning(
    api: FakeSlackApi, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_bot(api) as bot:
        event = {"type": "assistant_thread_started", "assistant_thread": {"channel_id": "D1"}}
        assert await bot.send(event) == 200
        assert "thread_ts is not a Slack timestamp" in caplog.text


# config -----------------------------------------------------------------------------------------
def test_the_assistant_section_is_strict() -> None:
    def slack(assistant: dict[str, Any]) -> None:
        parse_config({"slack": {"assistant": assistant}})

    with pytest.raises(ConfigError, match=r"slack\.assistant\.prompts: unknown key"):
        slack({"prompts": PROMPTS})
    with pytest.raises(ConfigError, match=r"slack\.assistant\.suggested_prompts"):
        slack({"suggested_prompts": PROMPTS * 5})
    with pytest.raises(ConfigError, match=r"suggested_prompts\.0\.message"):
        slack({"suggested_prompts": [{"title": "no message"}]})
    with pytest.raises(ConfigError, match=r"C7: at most 4 prompts"):
        slack({"channel_prompts": {"C7": PROMPTS * 5}})
    with pytest.raises(ConfigError, match=r"slack\.assistant\.set_title"):
        slack({"set_title": True})


async def test_a_reload_changes_the_prompts_of_the_next_thread(
    api: FakeSlackApi, tmp_path: Path
) -> None:
    api.status_supported = True
    async with running_bot(api, assistant=ASSISTANT) as bot:
        await bot.send(started(ts(1)))
        await settled(bot)
        config = tmp_path / "burstbot.toml"
        config.write_text(
            '[llm]\nprovider = "offline"\n[console]\nenabled = false\n'
            f'[slack]\nenabled = true\nmode = "http"\napi_base_url = "{api.url}"\n'
            '[slack.assistant]\nsuggested_prompts = [{ title = "New", message = "A new one" }]\n'
        )
        bot.app.config_path = config
        plan = bot.app.reload()
        assert plan is not None and "slack.assistant.suggested_prompts" in plan.applied
        await bot.send(started(ts(2)))
        await settled(bot)
        assert [prompts for _, _, prompts, _ in api.suggested] == [
            PROMPTS,
            [{"title": "New", "message": "A new one"}],
        ]


def test_the_assistant_section_changes_without_a_restart() -> None:
    from bot.ops.reload import plan_reload

    running = parse_config({"slack": {"enabled": True, "http_port": 3000}})
    loaded = parse_config(
        {"slack": {"enabled": True, "http_port": 3001, "assistant": {"suggested_prompts": PROMPTS}}}
    )
    plan = plan_reload(running, loaded)
    assert plan.applied == ("slack.assistant.suggested_prompts",)
    assert plan.needs_restart == ("slack.http_port",)
    assert plan.config.slack.http_port == 3000
    assert plan.config.slack.assistant.suggested_prompts[0].title == "Summarize"
