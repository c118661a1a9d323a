"""The Slack front end posting replies: real Bolt `AsyncApp` and `AsyncWebClient` against a
fake Slack Web API, signed HTTP events, the real engine and SQLite store on a fake clock."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from adapters.markdown import TRUNCATED_NOTE
from adapters.slack import SlackFrontend, build_slack_frontend
from adapters.slack.events import RESET_COMMAND
from adapters.slack.mrkdwn import MAX_PART_CHARS
from bot.config import SlackConfig
from bot.core.errors import ConfigError, PermanentDeliveryError, RetryableDeliveryError
from bot.core.events import ConversationKey, Reply
from testkit import ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from testkit.fake_slack import TEAM, UPSTREAM_DOWN, Failure, FakeSlackApi, dm
from tests.slack_harness import DM_KEY, Bot, api, bot, running_bot, slack_config, ts

__all__ = ["api", "bot"]  # fixtures


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
        assert (row.attempts, row.claim_token) == (0, 2)  # a restart's new claim is no failure
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
    await bot.clock.advance(7.0)  # the channel's posts are held for everyone until then
    api.fail("chat.postMessage", Failure(error="channel_not_found"))
    with pytest.raises(PermanentDeliveryError, match="channel_not_found"):
        await bot.frontend.deliver(reply)
    assert api.posts() == []
    await bot.clock.advance(1.34)  # after a 429 the channel's budget restarts slower: 45 a minute
    assert await bot.frontend.deliver(reply) == [f"C1:{api.posts()[0].ts}"]


PAGES = {
    "load balancer": UPSTREAM_DOWN,
    "html": Failure(
        status=502,
        page="<html><body><h1>502 Bad Gateway</h1></body></html>",
        content_type="text/html",
    ),
    "broken json": Failure(status=500, page='{"ok": fal', content_type="application/json"),
}


@pytest.mark.parametrize("page", PAGES.values(), ids=PAGES.keys())
async def test_an_answer_that_is_not_slacks_json_is_a_retryable_outage(
    api: FakeSlackApi, bot: Bot, page: Failure
) -> None:
    reply = Reply("r9", ConversationKey("slack", TEAM, "C1", ts(1)), "hi", 1)
    for method in ("chat.postMessage", "conversations.replies"):
        api.fail(method, page)
    with pytest.raises(RetryableDeliveryError, match=f"part 0: HTTP {page.status}"):
        await bot.frontend.deliver(reply)
    with pytest.raises(RetryableDeliveryError, match=f"earlier posts: HTTP {page.status}"):
        await bot.frontend.deliver(replace(reply, attempt=2))  # a redelivery reads back first
    assert api.posts() == []


async def test_model_output_is_mrkdwn_split_and_cannot_ping(api: FakeSlackApi, bot: Bot) -> None:
    text = "# Plan\n**Hey** <!channel> @here <!subteam^S1|devs>\n```python\nx = 1 < 2\n```"
    reply = Reply("r1", ConversationKey("slack", TEAM, "C1", ts(1)), text, 1)
    await bot.frontend.deliver(reply)
    [post] = api.posts()
    assert post.text.startswith("*Plan*\n*Hey* &lt;!channel&gt; @\u200bhere &lt;!subteam^S1|devs")
    assert post.text.endswith("```\nx = 1 &lt; 2\n```")
    assert "<!" not in post.text


# thinking indicator ---------------------------------------------------------------------------
INDICATOR_CALLS = ("reactions.add", "reactions.remove", "assistant.threads.setStatus")


def indicator_calls(api: FakeSlackApi) -> list[str]:
    return [name for name in api.methods() if name in INDICATOR_CALLS]


async def test_a_reply_within_the_delay_costs_no_indicator_call(
    api: FakeSlackApi, bot: Bot
) -> None:
    for n, text in enumerate(["a", "b", "c"], start=1):
        await bot.send(dm(ts(n), text))
        await bot.step(0.5)
    await bot.step(1.0)  # the burst closes 1.5 s after "c"; the model answers at once
    assert len(api.posts()) == 1
    await bot.step(30)
    assert indicator_calls(api) == []
    assert api.reactions == set()


async def test_a_slow_reply_gets_one_on_and_one_off_per_burst(api: FakeSlackApi) -> None:
    replier = ScriptedReplier(hold=True)
    async with running_bot(api, replier=replier) as bot:
        engine = bot.app.engine

        async def advance(seconds: float) -> None:  # the model is held: no waiting for workers
            await bot.clock.advance(seconds)
            await engine.run_due()
            await engine.indicator.idle()

        await bot.send(dm(ts(1), "a"))
        await advance(0.5)
        await bot.send(dm(ts(2), "b"))
        await advance(1.5)  # the burst closes; the model is slow
        await replier.next_call(0)
        await advance(0.9)
        assert indicator_calls(api) == []  # within the delay
        await advance(0.2)
        assert api.reactions == {("D1", ts(2), "hourglass_flowing_sand")}
        await bot.send(dm(ts(3), "c"))  # while it is on: the burst grows, nothing is called
        await bot.send(dm(ts(4), "d"))
        await advance(1.5)
        (await replier.next_call(1)).finish("all four")
        await bot.step()
        assert [p.text for p in api.posts()] == ["all four"]
        assert indicator_calls(api) == ["reactions.add", "reactions.remove"]
        assert api.reactions == set()
        await bot.step(60)
        assert indicator_calls(api) == ["reactions.add", "reactions.remove"]


async def test_a_reply_that_fails_for_good_takes_its_indicator_down(api: FakeSlackApi) -> None:
    replier = ScriptedReplier(hold=True)
    async with running_bot(api, replier=replier) as bot:
        await bot.send(dm(ts(1), "are you there?"))
        await bot.clock.advance(1.5)
        await bot.app.engine.run_due()
        await bot.clock.advance(1.1)  # the model is slow: the indicator goes on
        await bot.app.engine.indicator.idle()
        assert api.reactions == {("D1", ts(1), "hourglass_flowing_sand")}
        api.fail("chat.postMessage", Failure(error="channel_not_found"))
        (await replier.next_call(0)).finish("never seen")
        await bot.step()
        assert api.posts() == []
        assert api.reactions == set()
        assert indicator_calls(api) == ["reactions.add", "reactions.remove"]


async def test_an_indicator_goes_off_when_another_process_posted_the_reply(
    api: FakeSlackApi, tmp_path: Path
) -> None:
    """The process posting the reply takes the indicator down at once, from the store's record:
    it needs nothing of the process that turned it on, which may have been killed since."""
    db, clock = str(tmp_path / "shared.db"), FakeClock()
    slow = ScriptedReplier(hold=True)
    async with (
        running_bot(api, db=db, clock=clock, owner="w1") as first,
        running_bot(api, db=db, clock=clock, owner="w2", replier=slow) as second,
    ):
        indicator = first.app.engine.indicator
        await first.send(dm(ts(1), "who answers?"))  # `first` saw it, `second` serves it
        await clock.advance(1.5)
        await second.app.engine.run_due()
        await slow.next_call(0)
        await clock.advance(1.0)
        await indicator.idle()
        assert api.reactions == {("D1", ts(1), "hourglass_flowing_sand")}
        slow.calls[0].finish("from the other process")
        await second.step()
        assert len(api.posts()) == 1
        assert api.reactions == set()  # `first`'s indicator has not looked yet
        await clock.advance(indicator.recheck)
        await indicator.idle()
        assert indicator_calls(api) == ["reactions.add", "reactions.remove"]


async def test_assistant_status_where_the_app_has_it(api: FakeSlackApi) -> None:
    api.status_supported = True
    replier = ScriptedReplier(hold=True)
    async with running_bot(api, replier=replier) as bot:
        await bot.send(dm(ts(2), "in a thread", thread_ts=ts(1)))
        await bot.clock.advance(1.5)
        await bot.app.engine.run_due()
        await bot.clock.advance(1.0)
        await bot.app.engine.indicator.idle()
        (await replier.next_call(0)).finish("done")
        await bot.step()
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

    manifest = yaml.safe_load(
        (Path(__file__).parent.parent / "adapters/slack/manifest.yml").read_text()
    )
    events = set(manifest["settings"]["event_subscriptions"]["bot_events"])
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    agent = {"app_home_opened", "app_context_changed"}  # the agent surface (agent_view)
    uninstall = {"app_uninstalled", "tokens_revoked"}
    session = {"agent_session_stopped"}  # Slack's Stop on an exchange's agent session
    assert events == {"app_mention", "message.channels", "message.groups", "message.im",
                      "message.mpim", *agent, *uninstall, *session}  # fmt: skip
    assert "assistant:write" in scopes  # the suggested prompts
    assert "assistant_view" not in manifest["features"]  # the surface Slack will deprecate
    view = manifest["features"]["agent_view"]
    assert view["agent_description"] and 1 <= len(view["suggested_prompts"]) <= 4
    assert manifest["features"]["app_home"]["messages_tab_enabled"] is True
    message_events = events - {"app_mention", *agent, *uninstall, *session}
    for event in message_events:  # message.im: im:history, ...
        assert event.replace("message.", "") + ":history" in scopes
    assert {"app_mentions:read", "chat:write", "reactions:write", "commands"} <= scopes
    commands = [c["command"] for c in manifest["features"]["slash_commands"]]
    assert commands == [RESET_COMMAND]  # the one command the adapter listens for
    assert manifest["settings"]["socket_mode_enabled"] is True
    assert manifest["settings"]["interactivity"]["is_enabled"] is True  # the Stop button
    assert manifest["features"]["bot_user"]["display_name"]


async def test_a_reply_longer_than_the_part_cap_is_truncated_with_a_note(
    api: FakeSlackApi,
) -> None:
    replier = ScriptedReplier(hold=True)
    async with running_bot(api, replier=replier, max_parts_per_reply=3) as bot:
        await bot.send(dm(ts(1), "write a novel"))
        await bot.clock.advance(1.5)
        await bot.app.engine.run_due()
        code = "```\n" + "\n".join(f"line {n} " + "x" * 70 for n in range(400)) + "\n```"
        (await replier.next_call(0)).finish("Here it is:\n\n" + code)
        await bot.step()
        parts = [p.text for p in api.posts()]
        assert len(parts) == 3 and all(len(p) <= MAX_PART_CHARS for p in parts)
        assert parts[-1].endswith("```\n" + TRUNCATED_NOTE)
        assert all(p.count("```") % 2 == 0 for p in parts)
        [row] = await bot.store.replies(DM_KEY.id)
        assert row.state == "sent" and len(row.platform_message_ids) == 3


async def test_a_second_part_that_landed_though_its_post_failed_is_not_posted_again(
    api: FakeSlackApi,
) -> None:
    """Between parts: the first part posts, the second lands but the bot hears a 500. The retry
    reads back what the reply already shows (its parts carry the reply's id) and posts nothing."""
    replier = ScriptedReplier(hold=True)
    async with running_bot(api, replier=replier) as bot:
        await bot.send(dm(ts(1), "write two pages"))
        await bot.clock.advance(1.5)
        await bot.app.engine.run_due()
        api.fail(
            "chat.postMessage", Failure(status=500, error="internal_error", lands=True), after=1
        )
        page = "\n".join(f"line {n} " + "x" * 70 for n in range(60))
        (await replier.next_call(0)).finish(page + "\n\n" + page)
        await bot.step()
        assert len(api.posts()) == 2
        [row] = await bot.store.replies(DM_KEY.id)
        assert row.state == "pending"
        await bot.step(5)
        [row] = await bot.store.replies(DM_KEY.id)
        assert row.state == "sent" and len(row.platform_message_ids) == 3  # each part once
        assert [f"D1:{p.ts}" for p in api.posts()] == list(row.platform_message_ids)
