"""The Slack front end end to end: real Bolt `AsyncApp` and `AsyncWebClient`, a fake Slack Web API,
signed HTTP events, the real engine and SQLite store on a fake clock."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adapters.slack import SlackFrontend, build_slack_frontend
from bot.clock import FakeClock
from bot.errors import ConfigError, PermanentDeliveryError, RetryableDeliveryError
from bot.events import ConversationKey, Event, Reply
from bot.store import IngestResult
from bot.testing import ScriptedReplier, check_invariants
from tests.fakes.slack_api import BOT_ID, BOT_USER, TEAM, Failure, FakeSlackApi, channel_message, dm
from tests.slack_harness import Bot, running_bot, slack_config

DM_KEY = ConversationKey("slack", TEAM, "D1", "")


@pytest.fixture
async def api() -> AsyncIterator[FakeSlackApi]:
    fake = await FakeSlackApi().start()
    yield fake
    await fake.stop()


@pytest.fixture
async def bot(api: FakeSlackApi) -> AsyncIterator[Bot]:
    async with running_bot(api) as running:
        yield running


def ts(n: int) -> str:
    return f"1700000000.{n:06d}"


async def stored_texts(bot: Bot, key: ConversationKey) -> list[str]:
    state = await bot.store.conversation_state(key.id)
    assert state is not None
    messages = await bot.store.pending_messages(key.id, state.answered_version, state.version)
    return [m.text for m in messages]


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
    import time

    assert await bot.send(dm(ts(1), "forged"), signature="v0=" + "0" * 64) == 401
    assert await bot.send(dm(ts(2), "old"), timestamp=int(time.time()) - 600) == 401
    await bot.step(10)
    assert await bot.store.conversation_state(DM_KEY.id) is None
    assert api.posts() == []


class GatedHost:
    """The app as Host, with ingest held until the test opens the gate (a slow disk)."""

    def __init__(self, app: Any) -> None:
        self.app, self.gate, self.fail_next = app, asyncio.Event(), False

    async def ingest(self, event: Event) -> IngestResult:
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
        await asyncio.sleep(0.2)  # bounded real wait for the request to reach the listener
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
        await asyncio.sleep(0.2)  # bounded real wait: the envelope reaches the listener
        assert api.acks == [], "acked before the message was stored"
        hosts[0].gate.set()
        await asyncio.wait_for(api.ack_received.wait(), 5)
        assert api.acks == [first]
        assert await stored_texts(bot, DM_KEY) == ["over the socket"]
        # Slack redelivers an unacked envelope (perhaps to another connection): stored once
        hosts[0].fail_next = True
        api.ack_received.clear()
        failed = await api.push_envelope(dm(ts(2), "second"))
        await asyncio.sleep(0.2)
        assert failed not in api.acks
        for attempt in (1, 2):
            api.ack_received.clear()
            await api.push_envelope(dm(ts(2), "second"), retry_attempt=attempt)
            await asyncio.wait_for(api.ack_received.wait(), 5)
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


# posting --------------------------------------------------------------------------------------
async def test_lost_post_response_is_not_posted_twice(api: FakeSlackApi, bot: Bot) -> None:
    api.fail("chat.postMessage", Failure(status=500, error="internal_error", lands=True))
    await bot.send(dm(ts(1), "hi"))
    await bot.step(1.5)
    assert len(api.posts()) == 1  # it landed, but we were told it failed
    [row] = await bot.store.replies(DM_KEY.id)
    assert row.state == "pending"
    await bot.step(5)  # the retry looks for the metadata first
    assert len(api.posts()) == 1
    [row] = await bot.store.replies(DM_KEY.id)
    assert row.state == "sent" and row.platform_message_ids == (f"D1:{api.posts()[0].ts}",)
    assert "conversations.history" in api.methods()


async def test_crash_between_commit_and_post_redelivers_without_double_posting(
    api: FakeSlackApi, tmp_path: Path
) -> None:
    db, clock = str(tmp_path / "burstbot.db"), FakeClock()
    long_text = "\n\n".join(f"paragraph {n}: " + "word " * 300 for n in range(6))
    posted = api.hold("chat.postMessage")
    replier = ScriptedReplier(hold=True)
    async with running_bot(api, db=db, clock=clock, replier=replier, owner="first") as first:
        await first.send(dm(ts(1), "write a lot"))
        await first.clock.advance(1.5)
        await first.app.engine.run_due()
        (await replier.next_call(0)).finish(long_text)
        await asyncio.wait_for(api.held["chat.postMessage"].wait(), 5)
        # the process dies here: part 0 is on Slack, the outbox row is still pending
    assert len(api.posts()) == 1
    del api.holds["chat.postMessage"]
    posted.set()
    async with running_bot(api, db=db, clock=clock, owner="second") as second:
        await second.step(31)  # past the first process's delivery claim
        parts = api.posts()
        assert len(parts) >= 3
        assert [p.metadata["event_payload"]["part"] for p in parts] == list(range(len(parts)))
        assert len({p.metadata["event_payload"]["reply_id"] for p in parts}) == 1
        assert all(len(p.text) <= 3500 for p in parts)
        [row] = await second.store.replies(DM_KEY.id)
        assert row.state == "sent" and len(row.platform_message_ids) == len(parts)
        await check_invariants(second.store, [DM_KEY.id])


async def test_rate_limit_is_retryable_with_retry_after_and_missing_channel_is_permanent(
    api: FakeSlackApi, bot: Bot
) -> None:
    reply = Reply("r9", ConversationKey("slack", TEAM, "C1", ts(1)), "hi", 1)
    api.fail("chat.postMessage", Failure(status=429, error="ratelimited",
                                         headers={"Retry-After": "7"}))  # fmt: skip
    with pytest.raises(RetryableDeliveryError) as retry:
        await bot.frontend.deliver(reply)
    assert retry.value.retry_after == 7.0
    api.fail("chat.postMessage", Failure(error="channel_not_found"))
    with pytest.raises(PermanentDeliveryError, match="channel_not_found"):
        await bot.frontend.deliver(reply)
    assert api.posts() == []
    assert await bot.frontend.deliver(reply) == [f"C1:{api.posts()[0].ts}"]


async def test_model_output_is_mrkdwn_split_and_cannot_ping(api: FakeSlackApi, bot: Bot) -> None:
    text = "# Plan\n**Hey** <!channel> @here <!subteam^S1|devs>\n```python\nx = 1 < 2\n```"
    reply = Reply("r1", ConversationKey("slack", TEAM, "C1", ts(1)), text, 1)
    await bot.frontend.deliver(reply)
    [post] = api.posts()
    assert post.text.startswith("*Plan*\n*Hey* &lt;!channel&gt; @\u200bhere &lt;!subteam^S1|devs")
    assert post.text.endswith("```\nx = 1 &lt; 2\n```")
    assert "<!" not in post.text


# thinking indicator ---------------------------------------------------------------------------
async def test_reaction_follows_the_latest_message_and_goes_when_the_reply_is_posted(
    api: FakeSlackApi, bot: Bot
) -> None:
    await bot.send(dm(ts(1), "a"))
    assert api.reactions == {("D1", ts(1), "hourglass_flowing_sand")}
    await bot.send(dm(ts(2), "b"))
    assert api.reactions == {("D1", ts(2), "hourglass_flowing_sand")}
    await bot.step(1.5)
    assert len(api.posts()) == 1 and api.reactions == set()


async def test_assistant_status_where_the_app_has_it(api: FakeSlackApi) -> None:
    api.status_supported = True
    async with running_bot(api) as bot:
        await bot.send(dm(ts(2), "in a thread", thread_ts=ts(1)))
        await bot.step(1.5)
        [post] = api.posts()
        assert post.thread_ts == ts(1)
        assert api.statuses == [("D1", ts(1), "is thinking…"), ("D1", ts(1), "")]
        assert "reactions.add" not in api.methods()


# startup --------------------------------------------------------------------------------------
async def test_rejected_token_is_one_clear_config_error(api: FakeSlackApi) -> None:
    config = slack_config(api)
    frontend = SlackFrontend(config.slack, "xoxb-wrong", signing_secret="s")
    with pytest.raises(ConfigError, match=r"SLACK_BOT_TOKEN \(invalid_auth\)"):
        await frontend.start(None)  # type: ignore[arg-type]
    await frontend.stop()


def test_missing_secrets_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from bot.config import SlackConfig

    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="SLACK_BOT_TOKEN is not set"):
        build_slack_frontend(SlackConfig(enabled=True))
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1")
    monkeypatch.setenv("SLACK_APP_TOKEN", "xoxb-not-an-app-token")
    with pytest.raises(ConfigError, match="app-level token"):
        build_slack_frontend(SlackConfig(enabled=True, mode="socket"))
    monkeypatch.delenv("SLACK_SIGNING_SECRET", raising=False)
    with pytest.raises(ConfigError, match="SLACK_SIGNING_SECRET"):
        build_slack_frontend(SlackConfig(enabled=True, mode="http"))


def test_manifest_subscribes_to_what_the_adapter_reads_with_the_scopes_it_needs() -> None:
    import yaml

    manifest = yaml.safe_load(
        (Path(__file__).parent.parent / "adapters/slack/manifest.yml").read_text()
    )
    events = set(manifest["settings"]["event_subscriptions"]["bot_events"])
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    assert events == {"app_mention", "message.channels", "message.groups", "message.im",
                      "message.mpim"}  # fmt: skip
    for event in events - {"app_mention"}:  # message.im needs im:history, ...
        assert event.replace("message.", "") + ":history" in scopes
    assert {"app_mentions:read", "chat:write", "reactions:write"} <= scopes
    assert manifest["settings"]["socket_mode_enabled"] is True
    assert manifest["features"]["bot_user"]["display_name"]


async def test_url_verification_challenge_is_answered(api: FakeSlackApi, bot: Bot) -> None:
    import json
    import time

    import aiohttp

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
