"""The Stop button on Slack: the real front end (Bolt, `AsyncWebClient`) against the fake Slack.

A streamed draft carries a Stop button; a press arrives as `block_actions` (a signed form over
HTTP, an `interactive` envelope over Socket Mode), is stored and decided before it is acked, and
counts once however often it is delivered. The answer ends with what was shown and who stopped
it, in the same message, without the button; a refused press is told to the clicker alone.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bot.core.clicks import NOTICES, Click, ClickAnswer
from bot.core.errors import StoreError
from bot.core.events import ConversationKey
from testkit import ScriptedReplier, check_invariants
from testkit.fake_slack import TEAM, FakeSlackApi, PostedMessage, channel_message, dm
from tests.clock_steps import step
from tests.slack_harness import DM_KEY, Bot, api, running_bot, ts
from tests.test_slack_streaming import INTERVAL, answered, drafted, generating, until

__all__ = ["api"]  # fixture

STOPPED = "The plan is\n\n_(stopped by alice)_"


async def deliver(bot: Bot, api: FakeSlackApi, mode: str, event: dict[str, Any]) -> None:
    """A person's message, as Slack delivers it in `mode`; returns once it is acked."""
    if mode == "http":
        assert await bot.send(event) == 200
        return
    envelope = await api.push_envelope(event)
    await until(lambda: envelope in api.acks)


async def press(bot: Bot, api: FakeSlackApi, mode: str, payload: dict[str, Any]) -> None:
    """One delivery of a button press; returns once Slack has its ack."""
    if mode == "http":
        assert await bot.sender.interact(payload) == 200
        return
    envelope = await api.push_interactive(payload)
    await until(lambda: envelope in api.acks)


async def streaming_draft(bot: Bot, api: FakeSlackApi, mode: str, key: ConversationKey) -> Any:
    """A burst whose answer is streaming: "The plan is" shows in the draft. The model's call."""
    call = await generating(bot, 0)
    call.stream(3, "The plan is")
    await step(bot.clock, INTERVAL)
    await drafted(bot, key)
    await until(lambda: [m.visible for m in api.posts()] == ["The plan is"])
    return call


def the_message(api: FakeSlackApi) -> PostedMessage:
    [message] = api.posts()
    return message


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_a_stop_mid_stream_ends_the_answer_in_the_same_message(
    api: FakeSlackApi, mode: str
) -> None:
    async with running_bot(api, replier=ScriptedReplier(hold=True), mode=mode) as bot:
        await deliver(bot, api, mode, dm(ts(1), "what is the plan?"))
        call = await streaming_draft(bot, api, mode, DM_KEY)
        [button] = the_message(api).buttons()
        assert (button["action_id"], button["text"]["text"]) == ("burstbot_stop", "Stop")
        assert the_message(api).text == "The plan is"  # the notification fallback
        await press(bot, api, mode, api.click(the_message(api), "U1"))
        [click] = await bot.store.clicks(DM_KEY.id)  # stored before the ack
        assert (click.outcome, click.clicker_name) == ("stopped", "alice")
        await answered(bot)
        await until(lambda: call.cancelled)  # the model request was closed
        message = the_message(api)  # no second reply
        assert (message.visible, message.text, message.buttons()) == (STOPPED, STOPPED, [])
        assert api.ephemerals == []
        [generation] = await bot.store.generations(DM_KEY.id)
        assert generation.outcome == "stopped"
        await check_invariants(bot.store, [DM_KEY.id])


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_the_same_press_delivered_twice_stops_once(api: FakeSlackApi, mode: str) -> None:
    async with running_bot(api, replier=ScriptedReplier(hold=True), mode=mode) as bot:
        await deliver(bot, api, mode, dm(ts(1), "what is the plan?"))
        await streaming_draft(bot, api, mode, DM_KEY)
        payload = api.click(the_message(api), "U1")
        await press(bot, api, mode, payload)
        await press(bot, api, mode, payload)  # Slack delivering it again
        assert [c.outcome for c in await bot.store.clicks(DM_KEY.id)] == ["stopped"]
        assert await bot.store.current_version(DM_KEY.id) == 2  # the message, then one stop
        await answered(bot)
        assert [m.visible for m in api.posts()] == [STOPPED]
        assert api.ephemerals == []  # the repeat was answered with its ack alone
        assert len(await bot.store.replies(DM_KEY.id)) == 1


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_a_stop_by_someone_else_is_refused_and_told_to_them_alone(
    api: FakeSlackApi, mode: str
) -> None:
    thread = ConversationKey("slack", TEAM, "C1", ts(1))
    async with running_bot(api, replier=ScriptedReplier(hold=True), mode=mode) as bot:
        mention = channel_message(ts(1), "<@UBOT> what is the plan?", event_type="app_mention")
        await deliver(bot, api, mode, mention)
        call = await streaming_draft(bot, api, mode, thread)
        await press(bot, api, mode, api.click(the_message(api), "U2"))
        await asyncio.wait_for(api.ephemeral_posted.wait(), 5)
        assert api.ephemerals == [
            {"channel": "C1", "user": "U2", "text": NOTICES["refused"], "thread_ts": ts(1)}
        ]
        assert [c.outcome for c in await bot.store.clicks(thread.id)] == ["refused"]
        assert not call.cancelled  # the answer goes on
        call.finish("The plan is to ship on Friday.")
        await answered(bot)
        message = the_message(api)
        assert (message.visible, message.buttons()) == ("The plan is to ship on Friday.", [])
        assert message.thread_ts == ts(1)


async def test_a_press_after_the_answer_ended_changes_nothing_and_says_so(
    api: FakeSlackApi,
) -> None:
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        await deliver(bot, api, "http", dm(ts(1), "what is the plan?"))
        call = await streaming_draft(bot, api, "http", DM_KEY)
        late = api.click(the_message(api), "U1")  # pressed now, delivered after the end
        call.finish("The plan is done.")
        await answered(bot)
        await press(bot, api, "http", late)
        await asyncio.wait_for(api.ephemeral_posted.wait(), 5)
        assert [e["text"] for e in api.ephemerals] == [NOTICES["ended"]]
        assert [m.visible for m in api.posts()] == ["The plan is done."]
        assert not call.cancelled


class StoreDownHost:
    """The app, with a store that fails every click (it is down)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def click(self, click: Click) -> ClickAnswer:
        raise StoreError("database is locked")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)


async def test_a_press_the_store_cannot_keep_is_answered_with_an_error(
    api: FakeSlackApi, caplog: pytest.LogCaptureFixture
) -> None:
    replier = ScriptedReplier(hold=True)
    async with running_bot(api, replier=replier, host_wrapper=StoreDownHost) as bot:
        await deliver(bot, api, "http", dm(ts(1), "what is the plan?"))
        call = await streaming_draft(bot, api, "http", DM_KEY)
        assert await bot.sender.interact(api.click(the_message(api), "U1")) == 500
        assert "a Stop click was not stored (database is locked)" in caplog.text
        assert not call.cancelled and await bot.store.clicks(DM_KEY.id) == []
        call.finish("The plan is done.")
        await answered(bot)
        assert [m.visible for m in api.posts()] == ["The plan is done."]


async def test_a_press_of_a_button_this_app_does_not_have_is_ignored(
    api: FakeSlackApi, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        await deliver(bot, api, "http", dm(ts(1), "what is the plan?"))
        call = await streaming_draft(bot, api, "http", DM_KEY)
        payload = api.click(the_message(api), "U1")
        payload["actions"][0]["action_id"] = "someone_elses_button"
        assert await bot.sender.interact(payload) == 200
        assert "an action this app does not have" in caplog.text
        assert await bot.store.clicks(DM_KEY.id) == [] and not call.cancelled


async def test_each_draft_edit_keeps_the_button_under_the_new_text(api: FakeSlackApi) -> None:
    """`chat.update` keeps a message's blocks when it is sent none: an edit of the text alone
    would leave the old text showing. A draft taken over (its button's value not known to the
    process editing it) gets the value from the message's metadata."""
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        await deliver(bot, api, "http", dm(ts(1), "what is the plan?"))
        call = await streaming_draft(bot, api, "http", DM_KEY)
        pressed_before = api.click(the_message(api), "U1")["actions"][0]["value"]
        bot.frontend.only.drafts._stops.clear()  # as a process that took the draft over
        call.stream(2, " to ship")
        await step(bot.clock, INTERVAL)
        await until(lambda: the_message(api).visible == "The plan is to ship")
        [button] = the_message(api).buttons()
        assert button["value"] == pressed_before  # the same draft, read back from its label
        await press(bot, api, "http", api.click(the_message(api), "U1"))
        await answered(bot)
        assert the_message(api).visible == "The plan is to ship\n\n_(stopped by alice)_"
