"""Slack `/reset` and DMs under the access policy: signed slash commands (HTTP mode) and
`slash_commands` envelopes (Socket Mode) into the real Bolt app, the real engine and SQLite store
on a fake clock, against the fake Slack Web API."""

from __future__ import annotations

import asyncio

from adapters.slack.events import RESET_DONE, RESET_IN_THREADS, RESET_REFUSED
from bot.core.events import ConversationKey
from testkit.fake_slack import TEAM, FakeSlackApi, channel_message, dm
from tests.slack_harness import DM_KEY, Bot, api, bot, running_bot, ts

__all__ = ["api", "bot"]  # fixtures

EPHEMERAL_DONE = {"text": RESET_DONE, "response_type": "ephemeral"}


def history(bot: Bot, call: int) -> list[str]:
    return [turn.text for turn in bot.replier.calls[call].prompt.history]


async def test_reset_in_a_dm_leaves_earlier_turns_out_of_the_next_prompt(bot: Bot) -> None:
    await bot.send(dm(ts(1), "my number is 42"))
    await bot.step(1.5)
    await bot.send(dm(ts(2), "and my name is Ada"))
    await bot.step(1.5)
    assert history(bot, 1) == ["alice: my number is 42", "reply to: my number is 42"]

    assert await bot.sender.command("/reset", "D1") == (200, EPHEMERAL_DONE)
    await bot.send(dm(ts(3), "what was my number?"))
    await bot.step(1.5)
    assert history(bot, 2) == []
    assert bot.replier.calls[2].texts == ["what was my number?"]
    # the messages stay stored (explain still shows them); only prompts start fresh
    assert len(await bot.store.messages(DM_KEY.id)) == 3


async def test_a_blocked_user_is_told_no_and_nothing_is_reset(api: FakeSlackApi) -> None:
    access = {"block_users": ["U2"]}
    async with running_bot(api, access=access, listen_channels=["C9"]) as bot:
        await bot.send(channel_message(ts(1), "remember: blue", channel="C9"))
        await bot.step(1.5)
        assert await bot.sender.command("/reset", "C9", user="U2") == (
            200,
            {"text": RESET_REFUSED, "response_type": "ephemeral"},
        )
        await bot.send(channel_message(ts(2), "what colour?", channel="C9"))
        await bot.step(1.5)
        assert history(bot, 1) == ["U1: remember: blue", "reply to: remember: blue"]
        # the same command from someone allowed does clear it
        assert await bot.sender.command("/reset", "C9", user="U1") == (200, EPHEMERAL_DONE)
        await bot.send(channel_message(ts(3), "and now?", channel="C9"))
        await bot.step(1.5)
        assert history(bot, 2) == []


async def test_reset_where_each_mention_thread_is_its_own_conversation_says_so(bot: Bot) -> None:
    status, body = await bot.sender.command("/reset", "C1")
    assert status == 200 and body["text"] == RESET_IN_THREADS
    assert await bot.store.conversation_state(ConversationKey("slack", TEAM, "C1").id) is None


async def test_dm_policy_off_refuses_dms_and_their_reset_but_not_channels(
    api: FakeSlackApi,
) -> None:
    async with running_bot(api, access={"dm_policy": "off"}, listen_channels=["C9"]) as bot:
        assert await bot.send(dm(ts(1), "hello in private")) == 200
        assert await bot.send(channel_message(ts(2), "hello in public", channel="C9")) == 200
        await bot.step(10)
        [post] = api.posts()
        assert post.channel == "C9"
        assert await bot.store.conversation_state(DM_KEY.id) is None
        _, body = await bot.sender.command("/reset", "D1")
        assert body["text"] == RESET_REFUSED


async def test_reset_over_socket_mode_is_answered_in_the_ack(api: FakeSlackApi) -> None:
    async with running_bot(api, mode="socket") as bot:
        api.ack_received.clear()
        await api.push_envelope(dm(ts(1), "my number is 42"))
        await asyncio.wait_for(api.ack_received.wait(), 5)
        await bot.step(1.5)
        api.ack_received.clear()
        envelope = await api.push_command(bot.sender.command_form("/reset", "D1"))
        await asyncio.wait_for(api.ack_received.wait(), 5)
        assert api.ack_payloads[envelope] == EPHEMERAL_DONE
        api.ack_received.clear()
        await api.push_envelope(dm(ts(2), "what was my number?"))
        await asyncio.wait_for(api.ack_received.wait(), 5)
        await bot.step(1.5)
        assert history(bot, 1) == []
