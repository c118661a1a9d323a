"""👍/👎 on Slack: the real front end (Bolt, `AsyncWebClient`) against the fake Slack.

An answer carries Slack's `feedback_buttons` (in a `context_actions` block) on its last part, once,
whether it streamed into a draft or was posted whole. A press arrives as `block_actions` (a signed
form over HTTP, an `interactive` envelope over Socket Mode), is stored and decided before it is
acked, and counts once however often Slack delivers it; a later press by the same person replaces
their vote.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from adapters.slack.feedback import FEEDBACK_ACTION
from bot.core.errors import StoreError
from bot.core.events import ConversationKey
from bot.core.votes import VOTE_NOTICES, Vote, VoteAnswer
from testkit import ScriptedReplier, check_invariants
from testkit.fake_slack import TEAM, FakeSlackApi, PostedMessage, channel_message, dm
from tests.slack_harness import DM_KEY, Bot, api, running_bot, ts
from tests.test_slack_stop import deliver, press, streaming_draft, the_message
from tests.test_slack_streaming import answered, generating, until

__all__ = ["api"]  # fixture

ANSWER = "The plan is to ship on Friday."


async def streamed_answer(bot: Bot, api: FakeSlackApi, mode: str, key: ConversationKey) -> None:
    """A question in a DM, answered by a stream that ends with `ANSWER`."""
    call = await streaming_draft(bot, api, mode, key)
    call.finish(ANSWER)
    await answered(bot)
    await until(lambda: the_message(api).visible == ANSWER)


def votes_of(message: PostedMessage) -> dict[str, str]:
    """What each button of the message's `feedback_buttons` carries back, by vote."""
    [element] = message.feedback_buttons()
    return {
        json.loads(element[name]["value"])["vote"]: element[name]["text"]["text"]
        for name in ("positive_button", "negative_button")
    }


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_a_streamed_answer_carries_the_buttons_and_a_press_counts_once(
    api: FakeSlackApi, mode: str
) -> None:
    async with running_bot(api, replier=ScriptedReplier(hold=True), mode=mode) as bot:
        await deliver(bot, api, mode, dm(ts(1), "what is the plan?"))
        await streamed_answer(bot, api, mode, DM_KEY)
        message = the_message(api)  # the draft, finished: no second message
        assert message.buttons() == []  # the Stop button is gone
        assert votes_of(message) == {"up": "👍", "down": "👎"}
        assert message.feedback_buttons()[0]["action_id"] == FEEDBACK_ACTION
        assert message.text == ANSWER  # the notification fallback
        payload = api.feedback(message, "U1", positive=True)
        await press(bot, api, mode, payload)
        [vote] = await bot.store.votes(DM_KEY.id)  # stored before the ack
        assert (vote.voter_id, vote.voter_name, vote.value) == ("U1", "alice", "up")
        await press(bot, api, mode, payload)  # Slack delivering it again
        assert [v.value for v in await bot.store.votes(DM_KEY.id)] == ["up"]
        assert [c.outcome for c in await bot.store.clicks(DM_KEY.id)] == ["voted"]
        assert api.ephemerals == []  # a counted vote is acked only
        await check_invariants(bot.store, [DM_KEY.id])


async def test_slacks_retries_of_a_press_over_http_count_once(api: FakeSlackApi) -> None:
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        await deliver(bot, api, "http", dm(ts(1), "what is the plan?"))
        await streamed_answer(bot, api, "http", DM_KEY)
        payload = api.feedback(the_message(api), "U1", positive=False)
        statuses = [await bot.sender.interact(payload, retry_num=n) for n in (None, 1, 2)]
        assert statuses == [200, 200, 200]
        [vote] = await bot.store.votes(DM_KEY.id)
        assert vote.value == "down"
        outcomes = [c.outcome for c in await bot.store.clicks(DM_KEY.id)]
        assert outcomes == ["voted"]  # the retries were stored once: the same action_ts
        assert api.ephemerals == []


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_a_later_press_replaces_the_vote_and_two_people_count_separately(
    api: FakeSlackApi, mode: str
) -> None:
    thread = ConversationKey("slack", TEAM, "C1", ts(1))
    async with running_bot(api, replier=ScriptedReplier(hold=True), mode=mode) as bot:
        mention = channel_message(ts(1), "<@UBOT> what is the plan?", event_type="app_mention")
        await deliver(bot, api, mode, mention)
        await streamed_answer(bot, api, mode, thread)
        message = the_message(api)
        first_up = api.feedback(message, "U1", positive=True)
        then_down = api.feedback(message, "U1", positive=False)
        await press(bot, api, mode, first_up)
        await press(bot, api, mode, then_down)
        await press(bot, api, mode, api.feedback(message, "U2", positive=True))
        await press(bot, api, mode, first_up)  # the 👍 delivered again, after the 👎
        votes = {v.voter_id: v.value for v in await bot.store.votes(thread.id)}
        assert votes == {"U1": "down", "U2": "up"}
        older = {**first_up, "trigger_id": "another-delivery"}  # an older press, another id
        await press(bot, api, mode, older)
        assert {v.voter_id: v.value for v in await bot.store.votes(thread.id)} == votes
        outcomes = sorted(str(c.outcome) for c in await bot.store.clicks(thread.id))
        assert outcomes == ["outdated", "voted", "voted", "voted"]  # the repeat stored once


async def test_an_answer_posted_whole_has_the_buttons_on_its_last_part_only(
    api: FakeSlackApi,
) -> None:
    long_answer = "\n\n".join(f"Paragraph {n}: " + "word " * 150 for n in range(8))
    replier = ScriptedReplier(hold=True)
    sections = {"streaming": {"enabled": False}}
    async with running_bot(api, replier=replier, sections=sections) as bot:
        await deliver(bot, api, "http", dm(ts(1), "tell me everything"))
        call = await generating(bot, 0)
        call.finish(long_answer)
        await answered(bot)
        posts = api.posts()
        assert len(posts) > 1
        assert [bool(m.feedback_buttons()) for m in posts] == [False] * (len(posts) - 1) + [True]
        assert posts[-1].visible.replace("\n", "") == posts[-1].text.replace("\n", "")
        await press(bot, api, "http", api.feedback(posts[-1], "U1", positive=False))
        assert [v.value for v in await bot.store.votes(DM_KEY.id)] == ["down"]


@pytest.mark.parametrize(
    "sections",
    [
        {"feedback": {"enabled": False}},
        {"channels": [{"platform": "slack", "channel": DM_KEY.channel, "feedback": False}]},
    ],
    ids=["globally", "in-this-channel"],
)
async def test_no_buttons_where_feedback_is_off(
    api: FakeSlackApi, sections: dict[str, Any]
) -> None:
    async with running_bot(api, replier=ScriptedReplier(hold=True), sections=sections) as bot:
        await deliver(bot, api, "http", dm(ts(1), "what is the plan?"))
        await streamed_answer(bot, api, "http", DM_KEY)
        message = the_message(api)
        assert (message.feedback_buttons(), message.blocks) == ([], None)


async def test_the_buttons_elsewhere_when_one_channel_turns_them_off(api: FakeSlackApi) -> None:
    sections = {"channels": [{"platform": "slack", "channel": "C9", "feedback": False}]}
    async with running_bot(api, replier=ScriptedReplier(hold=True), sections=sections) as bot:
        await deliver(bot, api, "http", dm(ts(1), "what is the plan?"))
        await streamed_answer(bot, api, "http", DM_KEY)
        assert len(the_message(api).feedback_buttons()) == 1


async def test_a_stopped_answer_carries_no_buttons(api: FakeSlackApi) -> None:
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        await deliver(bot, api, "http", dm(ts(1), "what is the plan?"))
        await streaming_draft(bot, api, "http", DM_KEY)
        await press(bot, api, "http", api.click(the_message(api), "U1"))
        await answered(bot)
        message = the_message(api)
        assert message.visible.endswith("_(stopped by alice)_")
        assert (message.buttons(), message.feedback_buttons()) == ([], [])


async def test_a_press_naming_an_answer_that_takes_no_votes_is_told_to_the_clicker(
    api: FakeSlackApi,
) -> None:
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        await deliver(bot, api, "http", dm(ts(1), "what is the plan?"))
        await streamed_answer(bot, api, "http", DM_KEY)
        payload = api.feedback(the_message(api), "U1")
        value = json.loads(payload["actions"][0]["value"])
        payload["actions"][0]["value"] = json.dumps({**value, "reply": "r999"})
        await press(bot, api, "http", payload)
        await asyncio.wait_for(api.ephemeral_posted.wait(), 5)
        assert [e["text"] for e in api.ephemerals] == [VOTE_NOTICES["not_votable"]]
        assert await bot.store.votes(DM_KEY.id) == []


class VotesDownHost:
    """The app, with a store that fails every vote (it is down)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def vote(self, vote: Vote) -> VoteAnswer:
        raise StoreError("database is locked")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)


async def test_a_press_the_store_cannot_keep_is_answered_with_an_error(
    api: FakeSlackApi, caplog: pytest.LogCaptureFixture
) -> None:
    replier = ScriptedReplier(hold=True)
    async with running_bot(api, replier=replier, host_wrapper=VotesDownHost) as bot:
        await deliver(bot, api, "http", dm(ts(1), "what is the plan?"))
        await streamed_answer(bot, api, "http", DM_KEY)
        assert await bot.sender.interact(api.feedback(the_message(api), "U1")) == 500
        assert "a vote was not stored (database is locked)" in caplog.text
        assert await bot.store.votes(DM_KEY.id) == []
