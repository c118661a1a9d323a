"""Delivery through long platform faults (G13): the real Slack front end against a fake Slack whose
load balancer answers a plain-text 503 for minutes, on a fake clock. A transient failure is
retried until the platform is back, whatever the number of attempts; only a permanent error fails
a reply, at once and with its reason."""

from __future__ import annotations

import logging

import pytest

from testkit.fake_slack import UPSTREAM_DOWN, Failure, FakeSlackApi, dm
from tests.slack_harness import DM_KEY, Bot, api, bot, ts

__all__ = ["api", "bot"]  # fixtures

OUTAGE_SECONDS = 5 * 60
STEP_SECONDS = 1.0


async def test_an_outage_of_minutes_ends_with_the_reply_posted_once_soon_after_recovery(
    api: FakeSlackApi, bot: Bot, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    await bot.send(dm(ts(1), "are you there?"))  # acknowledged before the outage
    api.outage = UPSTREAM_DOWN
    started = bot.clock.now()
    while bot.clock.now() - started < OUTAGE_SECONDS:
        await bot.step(STEP_SECONDS)
    [row] = await bot.store.replies(DM_KEY.id)
    assert (row.state, api.posts()) == ("pending", [])
    assert row.attempts > 8  # the old limit; every one of them a failure, none a give-up
    assert row.last_error is not None and "HTTP 503: upstream connect error" in row.last_error

    api.outage = None
    recovered = bot.clock.now()
    while not api.posts():
        await bot.step(STEP_SECONDS)
        assert bot.clock.now() - recovered <= 60, "not posted within a minute of recovery"
    await bot.step(10 * 60)
    [post] = api.posts()
    assert post.metadata is not None and post.metadata["event_payload"]["reply_id"] == f"r{row.id}"
    [sent] = await bot.store.replies(DM_KEY.id)
    assert sent.state == "sent" and sent.platform_message_ids == (f"D1:{post.ts}",)

    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    failures = [r for r in caplog.records if "delivery failed" in r.getMessage()]
    assert len(failures) == sent.attempts  # one warning line per failed attempt
    assert all(r.levelno == logging.WARNING for r in failures)


async def test_a_rate_limited_look_up_and_a_new_claim_are_not_failed_attempts(
    api: FakeSlackApi, bot: Bot
) -> None:
    api.fail("chat.postMessage", Failure(status=500, error="internal_error", lands=True))
    limited = Failure(status=429, error="ratelimited", headers={"Retry-After": "20"})
    api.fail("conversations.history", limited, times=2)
    await bot.send(dm(ts(1), "hi"))
    await bot.step(1.5)  # posted, but told it failed: one failed attempt
    for _ in range(3):  # two redeliveries whose read-back is rate limited, then the read-back
        await bot.step(31)
    [post] = api.posts()
    [row] = await bot.store.replies(DM_KEY.id)
    assert (row.state, row.attempts, row.claim_token) == ("sent", 1, 4)
    assert row.platform_message_ids == (f"D1:{post.ts}",)


@pytest.mark.parametrize("error", ["channel_not_found", "not_in_channel", "is_archived"])
async def test_a_permanent_error_fails_the_reply_at_once_with_its_reason(
    api: FakeSlackApi, bot: Bot, error: str
) -> None:
    api.fail("chat.postMessage", Failure(error=error))
    await bot.send(dm(ts(1), "hi"))
    await bot.step(1.5)
    [row] = await bot.store.replies(DM_KEY.id)
    assert (row.state, row.attempts) == ("failed", 1)
    assert row.last_error is not None and row.last_error.endswith(error)
    assert (await bot.store.backlog()).outbox_failed == 1
    await bot.step(3600)  # failed is final until an operator re-queues it
    assert api.posts() == [] and api.methods().count("chat.postMessage") == 1


async def test_the_first_event_during_an_outage_is_stored_not_acked_and_dropped(
    api: FakeSlackApi, bot: Bot
) -> None:
    """Bolt asks `auth.test` on its first event; failing, it would answer 200 and drop it."""
    api.outage = UPSTREAM_DOWN
    assert await bot.send(dm(ts(1), "hello during the outage")) == 200
    state = await bot.store.conversation_state(DM_KEY.id)
    assert state is not None and state.version == 1
