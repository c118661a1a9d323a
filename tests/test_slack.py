"""The Slack front end receiving events: real Bolt `AsyncApp` and `AsyncWebClient` against a
fake Slack Web API, signed HTTP events, the real engine and SQLite store on a fake clock."""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from adapters.slack import SlackFrontend
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey, Event
from bot.core.store import IngestResult
from testkit import check_invariants
from testkit.fake_slack import (
    BOT_ID,
    BOT_USER,
    TEAM,
    EventSender,
    FakeSlackApi,
    channel_message,
    dm,
)
from tests.slack_harness import DM_KEY, Bot, api, bot, running_bot, slack_config, stored_texts, ts

__all__ = ["api", "bot"]  # fixtures


# what counts, and one reply per burst ---------------------------------------------------------
async def test_three_message_dm_burst_gets_one_reply(api: FakeSlackApi, bot: Bot) -> None:
    for n, text in enumerate(["so about", "the deploy", "is it *done*?"]):
        assert await bot.send(dm(ts(n), text)) == 200
        await bot.step(0.5)
    await bot.step(1.5)
    [post] = api.posts()
    assert post.channel == "D1" and post.thread_ts is None
    assert post.text == "reply to: so about | the deploy | is it _done_?"
    assert post.metadata == {
        "event_type": "burstbot_reply",
        "event_payload": {"reply_id": "r1", "part": 0, "conversation": DM_KEY.id},
    }
    assert [c.texts for c in bot.replier.calls] == [["so about", "the deploy", "is it *done*?"]]
    assert bot.replier.calls[0].prompt.burst[0].author_name == "alice"
    await check_invariants(bot.store, [DM_KEY.id])


async def test_channel_mention_gets_one_reply_in_its_thread(api: FakeSlackApi, bot: Bot) -> None:
    text = f"<@{BOT_USER}> what's our SLA?"
    assert await bot.send(channel_message(ts(1), text, event_type="app_mention")) == 200
    assert await bot.send(channel_message(ts(1), text)) == 200  # the `message` twin
    await bot.step(1.5)
    [post] = api.posts()
    assert (post.channel, post.thread_ts) == ("C1", ts(1))
    assert bot.replier.calls[0].texts == ["what's our SLA?"]
    # a later reply in that thread counts without a mention; it continues the same conversation
    assert await bot.send(channel_message(ts(2), "and for EU?", thread_ts=ts(1))) == 200
    await bot.step(1.5)
    assert [p.thread_ts for p in api.posts()] == [ts(1), ts(1)]
    assert bot.replier.calls[1].texts == ["and for EU?"]
    assert "conversations.replies" not in api.methods()  # remembered, no lookup needed


async def test_mention_twins_count_once_against_the_rate_limit(api: FakeSlackApi) -> None:
    """Slack sends a channel mention twice (`app_mention` and `message`): one message, counted
    once. Past the limit, both twins are refused, with one notice between them."""
    limits = {"user_messages_per_window": 1, "window_seconds": 3600, "rate_notice": "slow down"}
    async with running_bot(api, limits=limits) as bot:
        for n, text in [(1, "what's our SLA?"), (2, "and for EU?")]:
            mention = f"<@{BOT_USER}> {text}"
            assert await bot.send(channel_message(ts(n), mention, event_type="app_mention")) == 200
            assert await bot.send(channel_message(ts(n), mention)) == 200
        await bot.step(1.5)
        assert sorted((p.thread_ts, p.text) for p in api.posts()) == [
            (ts(1), "reply to: what's our SLA?"),
            (ts(2), "slow down"),  # the notice: an outbox row of the refused message's thread
        ]
        key = ConversationKey("slack", TEAM, "C1", ts(2))
        state = await bot.store.conversation_state(key.id)
        assert state is not None and state.version == 0  # refused: its message never stored


async def test_channel_messages_without_mention_are_ignored_unless_listened(
    api: FakeSlackApi,
) -> None:
    async with running_bot(api, listen_channels=["C9"]) as bot:
        assert await bot.send(channel_message(ts(1), "chatter", channel="C1")) == 200
        assert await bot.send(channel_message(ts(2), "in a listened channel", channel="C9")) == 200
        assert await bot.send(channel_message(ts(3), "and again", channel="C9")) == 200
        await bot.step(1.5)
        [post] = api.posts()
        assert (post.channel, post.thread_ts) == ("C9", None)
        assert bot.replier.calls[0].texts == ["in a listened channel", "and again"]
        assert await bot.store.conversation_state(ConversationKey("slack", TEAM, "C1").id) is None


async def test_thread_we_are_not_part_of_is_ignored_and_ours_is_found_after_restart(
    api: FakeSlackApi, tmp_path: Path
) -> None:
    api.add_user_message("C1", ts(1), "human thread")
    api.add_user_message("C1", ts(5), f"<@{BOT_USER}> help", user="U2")
    api.add_user_message("C1", ts(6), "answer", user=BOT_USER, thread_ts=ts(5))
    api.messages[-1].bot_id = BOT_ID
    async with running_bot(api, db=str(tmp_path / "b.db")) as bot:
        assert await bot.send(channel_message(ts(2), "reply", thread_ts=ts(1))) == 200
        assert await bot.send(channel_message(ts(7), "thanks! one more", thread_ts=ts(5))) == 200
        await bot.settle()  # both threads looked up in the background, after the acks
        await bot.step(1.5)
        [post] = api.posts(channel="C1")[1:]  # [0] is the seeded earlier answer
        assert post.thread_ts == ts(5)
        assert bot.replier.calls[0].texts == ["thanks! one more"]
        assert api.methods().count("conversations.replies") == 2


async def test_bot_messages_never_count(api: FakeSlackApi, bot: Bot) -> None:
    events = [
        dm(ts(1), "from another bot", bot_id="B2", bot_profile={"name": "other"}),
        dm(ts(2), "legacy bot", subtype="bot_message"),
        dm(ts(3), "ourselves", user=BOT_USER),
        channel_message(ts(4), f"<@{BOT_USER}> hi from bot", event_type="app_mention", bot_id="B2"),
        dm(ts(5), "joined", subtype="channel_join"),
    ]
    for event in events:
        assert await bot.send(event) == 200
    await bot.step(10)
    assert api.posts() == [] and bot.replier.calls == []
    assert await bot.store.conversation_state(DM_KEY.id) is None


# retries, twins, signatures -------------------------------------------------------------------
async def test_every_event_retried_and_twinned_gives_no_duplicate(
    api: FakeSlackApi, bot: Bot
) -> None:
    rng = random.Random(4)
    mention = f"<@{BOT_USER}> deploy status?"
    events = [dm(ts(1), "one"), dm(ts(2), "two"), dm(ts(3), "three")]
    events += [
        channel_message(ts(10), mention, event_type="app_mention"),
        channel_message(ts(10), mention),
    ]
    for event in events:
        event_id = f"Ev{event['ts']}{event['type']}"
        assert await bot.send(event, event_id=event_id) == 200
        for retry in range(1, rng.randint(1, 3) + 1):
            assert await bot.send(event, event_id=event_id, retry_num=retry) == 200
    assert await stored_texts(bot, DM_KEY) == ["one", "two", "three"]
    await bot.step(1.5)
    # a late retry (Slack's 1-minute and 5-minute ones) of an answered message changes nothing
    assert await bot.send(events[0], retry_num=2) == 200
    assert await bot.send(events[3], retry_num=3) == 200
    await bot.step(60)
    assert sorted((p.channel, p.thread_ts) for p in api.posts()) == [
        ("C1", ts(10)),
        ("D1", None),
    ]
    assert len(bot.replier.calls) == 2
    await check_invariants(bot.store, [DM_KEY.id, ConversationKey("slack", TEAM, "C1", ts(10)).id])


async def test_bad_signature_or_stale_timestamp_is_401_and_nothing_stored(
    api: FakeSlackApi, bot: Bot
) -> None:

    assert await bot.send(dm(ts(1), "forged"), signature="v0=" + "0" * 64) == 401
    assert await bot.send(dm(ts(2), "old"), timestamp=int(time.time()) - 600) == 401
    await bot.step(10)
    assert await bot.store.conversation_state(DM_KEY.id) is None
    assert api.posts() == []


class GatedHost:
    """The app as Host, with ingest held until the test opens the gate (a slow disk)."""

    def __init__(self, app: Any) -> None:
        self.app, self.gate, self.fail_next = app, asyncio.Event(), False
        self.reached = asyncio.Event()  # an event got as far as storing

    async def ingest(self, event: Event) -> IngestResult:
        self.reached.set()
        await self.gate.wait()
        if self.fail_next:
            self.fail_next = False
            raise OSError("disk full")
        result: IngestResult = await self.app.ingest(event)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)


def gated(hosts: list[GatedHost]) -> Any:
    def wrap(app: Any) -> GatedHost:
        hosts.append(GatedHost(app))
        return hosts[-1]

    return wrap


async def test_the_ack_waits_until_the_message_is_stored(api: FakeSlackApi) -> None:
    hosts: list[GatedHost] = []
    async with running_bot(api, host_wrapper=gated(hosts)) as bot:
        host = hosts[0]
        request = asyncio.create_task(bot.send(dm(ts(1), "hello")))
        await asyncio.wait_for(host.reached.wait(), 5)
        # An ack sent before storing would have been written before `reached`; a request sent
        # after it (refused by the signature check) is answered only after that one's answer.
        forged = EventSender(bot.sender.url, "not-the-signing-secret")
        assert await forged.send(dm(ts(9), "probe")) == 401
        assert not request.done(), "acked before the message was stored"
        host.gate.set()
        assert await asyncio.wait_for(request, 5) == 200
        assert await stored_texts(bot, DM_KEY) == ["hello"]
        # storing fails: no ack, so Slack retries; the retry stores it
        host.fail_next = True
        assert await bot.send(dm(ts(2), "again")) == 500
        assert await stored_texts(bot, DM_KEY) == ["hello"]
        assert await bot.send(dm(ts(2), "again"), retry_num=1) == 200
        assert await stored_texts(bot, DM_KEY) == ["hello", "again"]


async def test_socket_mode_acks_after_storing_and_dedupes_redeliveries(api: FakeSlackApi) -> None:
    hosts: list[GatedHost] = []
    async with running_bot(api, host_wrapper=gated(hosts), mode="socket") as bot:
        assert "apps.connections.open" in api.methods() and api.sockets
        first = await api.push_envelope(dm(ts(1), "over the socket"))
        await asyncio.wait_for(hosts[0].reached.wait(), 5)
        # A bot's message is acked without being stored; acks share one websocket, in order, so
        # once its ack is in, an ack of `first` sent before storing would be in too.
        probe = await api.push_envelope({**dm(ts(9), "probe"), "bot_id": "B0OTHER"})
        await asyncio.wait_for(api.ack_received.wait(), 5)
        assert api.acks == [probe], "acked before the message was stored"
        api.ack_received.clear()
        hosts[0].gate.set()
        await asyncio.wait_for(api.ack_received.wait(), 5)
        assert api.acks == [probe, first]
        assert await stored_texts(bot, DM_KEY) == ["over the socket"]
        # Slack redelivers an unacked envelope (perhaps to another connection): stored once
        hosts[0].fail_next = True
        api.ack_received.clear()
        failed = await api.push_envelope(dm(ts(2), "second"))
        for attempt in (1, 2):
            api.ack_received.clear()
            await api.push_envelope(dm(ts(2), "second"), retry_attempt=attempt)
            await asyncio.wait_for(api.ack_received.wait(), 5)
        # the redeliveries' acks came in order after any ack of the failed delivery
        assert failed not in api.acks
        assert await stored_texts(bot, DM_KEY) == ["over the socket", "second"]
        await bot.step(1.5)
        [post] = api.posts()
        assert post.text == "reply to: over the socket | second"


async def test_socket_mode_with_a_rejected_app_token_is_one_clear_error(api: FakeSlackApi) -> None:
    config = slack_config(api, mode="socket")
    frontend = SlackFrontend(config.slack, "xoxb-test", app_token="xapp-revoked")
    with pytest.raises(ConfigError, match=r"SLACK_APP_TOKEN \(invalid_auth\)"):
        await frontend.start(None)  # type: ignore[arg-type]
    await frontend.stop()


# edits and deletes ----------------------------------------------------------------------------
async def test_edit_and_delete_inside_the_window_are_reflected(api: FakeSlackApi, bot: Bot) -> None:
    await bot.send(dm(ts(1), "ship it on mondya"))
    await bot.send(dm(ts(2), "wrong thread, ignore"))
    await bot.send(dm(ts(3), "ok?"))
    edit = {
        "type": "message", "subtype": "message_changed", "channel": "D1", "channel_type": "im",
        "hidden": True, "ts": ts(4),
        "message": {"type": "message", "user": "U1", "text": "ship it on monday", "ts": ts(1)},
        "previous_message": {"type": "message", "user": "U1", "text": "ship it on mondya",
                             "ts": ts(1)},
    }  # fmt: skip
    delete = {
        "type": "message", "subtype": "message_deleted", "channel": "D1", "channel_type": "im",
        "hidden": True, "ts": ts(5), "deleted_ts": ts(2),
        "previous_message": {"type": "message", "user": "U1", "text": "wrong thread, ignore",
                             "ts": ts(2)},
    }  # fmt: skip
    unfurl = {**edit, "ts": ts(6), "previous_message": edit["message"]}  # same text: not an edit
    for event in (edit, delete, unfurl):
        assert await bot.send(event) == 200
    await bot.step(1.5)
    assert [c.texts for c in bot.replier.calls] == [["ship it on monday", "ok?"]]
    state = await bot.store.conversation_state(DM_KEY.id)
    assert state is not None and state.version == 5  # 3 messages + 1 edit + 1 delete
    assert len(api.posts()) == 1


async def test_url_verification_challenge_is_answered(api: FakeSlackApi, bot: Bot) -> None:
    body = json.dumps({"token": "legacy", "challenge": "c-123", "type": "url_verification"})
    stamp = str(int(time.time()))
    signature = bot.sender.verifier.generate_signature(timestamp=stamp, body=body)
    headers = {"Content-Type": "application/json", "X-Slack-Request-Timestamp": stamp,
               "X-Slack-Signature": signature}  # fmt: skip
    async with (
        aiohttp.ClientSession() as session,
        session.post(bot.sender.url, data=body, headers=headers) as response,
    ):
        assert response.status == 200
        assert "c-123" in await response.text()
