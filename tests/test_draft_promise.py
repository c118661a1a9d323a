"""One visible message per burst with streaming on (G10), through the faults that broke it.

Each test is a bug that was seen: a draft whose post's response was lost was looked up only after
the burst's newest message (so a second draft was posted beside it); a draft a person deleted lost
the reply (`chat.update` answered `message_not_found` until delivery gave up); the end of a stream
waited for a draft edit that the platform held back; a commit the final check discarded left the
generation's text on screen; a late edit of a stale generation overwrote the final text. Slack and
Discord run through their real clients against the fakes; the core's rules on `RecordingFrontend`.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from adapters.discord import DiscordFrontend
from bot.app import App
from bot.core.errors import RetryableDeliveryError
from bot.core.events import ConversationKey, Draft
from bot.core.streaming import WAITING
from storage.sqlite import SqliteStore
from testkit import Fault, RecordingFrontend, ReplierCall, ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from testkit.engine import shut_down
from testkit.fake_discord import FakeDiscord
from testkit.fake_slack import Failure, FakeSlackApi, dm
from tests.clock_steps import step
from tests.conftest import KEY as CONFTEST_KEY
from tests.conftest import SETTINGS, message
from tests.slack_harness import DM_KEY, Bot, api, running_bot, ts
from tests.test_discord_streaming import (
    DM_ID,
    KEY,
    fake,
    frontend,
    say,
    started,
    streaming_app,
    until,
)
from tests.test_slack_streaming import (
    answered,
    draft_post_lost,
    drafted,
    generating,
    post_and_update_calls,
    shown,
)
from tests.test_streaming import (
    one_message_generating,
    start_generation,
    streaming_engine,
    streaming_frontend,
)

__all__ = ["api", "fake", "frontend"]  # fixtures

INTERVAL = 1.0
KEY_CORE = message(1).key


def now_ts() -> str:
    """A message ts from the wall clock, later than anything the fake posted so far."""
    return f"{time.time() + 1:.6f}"


async def slack_draft_deleted_mid_stream(api: FakeSlackApi, bot: Bot) -> ReplierCall:
    """A burst streaming into its draft, which a person then deleted."""
    await bot.send(dm(ts(1), "tell me"))
    call = await generating(bot, 0)
    call.stream(1, "Once")
    await step(bot.clock, INTERVAL)
    await drafted(bot)
    api.messages.remove(api.posts()[0])
    return call


# Slack --------------------------------------------------------------------------------------------
async def test_slack_a_lost_draft_is_found_from_its_creation_not_after_the_newest_message(
    api: FakeSlackApi,
) -> None:
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        await draft_post_lost(api, bot)  # the first generation, superseded below
        assert (
            await bot.sender.send(dm(now_ts(), "and one more thing")) == 200
        )  # newer than the draft
        await step(bot.clock, INTERVAL)
        await bot.app.engine.idle()  # superseded
        second = await generating(bot, 1)
        assert second.texts == ["hello", "and one more thing"]
        second.stream(2, "Hi again")
        await step(bot.clock, INTERVAL)
        await until(lambda: shown(api) == ["Hi again"])
        second.finish("Hi again, to both.")
        await answered(bot)
        assert shown(api) == ["Hi again, to both."]
        assert post_and_update_calls(api).count("chat.postMessage") == 1
        await check_invariants(bot.store, [DM_KEY.id])


async def test_slack_a_found_draft_finished_as_part_0_is_not_posted_again_on_a_retry(
    api: FakeSlackApi,
) -> None:
    """The final update labels the draft with the reply's id: a retry of part 1 reads part 0
    back as the reply's own and posts only part 1 (what `RecordingFrontend` must mimic)."""
    first_part, second_part = "a" * 3000, "b" * 3000
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        call = await draft_post_lost(api, bot)
        api.fail("chat.postMessage", Failure(status=500, error="internal_error"))  # part 1
        call.finish(f"{first_part}\n\n{second_part}")
        await answered(bot)
        [row] = await bot.store.replies(DM_KEY.id)
        assert row.state == "pending" and len(row.platform_message_ids) == 1
        await step(bot.clock, 30.0)
        await bot.app.engine.outbox.deliver_due()
        await bot.app.engine.idle()
        assert shown(api) == [first_part, second_part]
        await check_invariants(bot.store, [DM_KEY.id])


async def test_slack_a_draft_deleted_while_it_grows_is_posted_anew_once(api: FakeSlackApi) -> None:
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        call = await slack_draft_deleted_mid_stream(api, bot)
        call.stream(2, " upon a")
        await step(bot.clock, INTERVAL)
        await until(lambda: shown(api) == ["Once upon a"])
        call.finish("Once upon a time.")
        await answered(bot)
        assert shown(api) == ["Once upon a time."]
        assert post_and_update_calls(api).count("chat.postMessage") == 2  # the first was deleted
        [row] = await bot.store.replies(DM_KEY.id)
        assert row.state == "sent"
        await check_invariants(bot.store, [DM_KEY.id])


async def test_slack_a_draft_deleted_before_the_final_edit_still_gets_the_answer(
    api: FakeSlackApi,
) -> None:
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        call = await slack_draft_deleted_mid_stream(api, bot)
        call.finish("Once upon a time.")
        await answered(bot)
        assert shown(api) == ["Once upon a time."]
        [row] = await bot.store.replies(DM_KEY.id)
        assert row.state == "sent" and row.attempts == 0  # no failed attempt
        [message] = api.posts()
        assert row.platform_message_ids == (f"D1:{message.ts}",)
        assert message.metadata is not None
        assert message.metadata["event_payload"]["reply_id"] == f"r{row.id}"  # found on retry
        await check_invariants(bot.store, [DM_KEY.id])


async def test_slack_a_stale_edit_landing_after_the_final_text_is_undone(
    api: FakeSlackApi, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_bot(api, replier=ScriptedReplier(hold=True)) as bot:
        await bot.send(dm(ts(1), "hello"))
        call = await generating(bot, 0)
        call.stream(1, "Hel")
        await step(bot.clock, INTERVAL)
        await drafted(bot)
        final_update = api.hold("chat.update")  # the final edit lands, then waits
        call.finish("Hello there.")
        await step(bot.clock, INTERVAL)
        await api.held["chat.update"].wait()
        api.posts()[0].text = "Hel"  # a stale generation's late edit lands right after it
        caplog.set_level(logging.WARNING, "burstbot")
        del api.holds["chat.update"]
        final_update.set()
        await bot.app.engine.idle()
        assert shown(api) == ["Hello there."]
        assert "stale draft edit" in caplog.text
        await check_invariants(bot.store, [DM_KEY.id])


async def draft_recorded(store: SqliteStore, key: ConversationKey) -> None:
    """The draft's message id is in the store (bounded wait for the store's thread)."""
    async with asyncio.timeout(5.0):
        while (draft := await store.draft(key.id)) is None or not draft.message_id:  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def discord_draft_deleted_mid_stream(
    fake: FakeDiscord, frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock
) -> tuple[App, ReplierCall]:
    """A burst streaming into its draft, which a person then deleted."""
    app, replier = await streaming_app(frontend, store, clock)
    await say(fake, store, "tell me")
    call = await started(app, clock, replier, 0)
    call.stream(1, "Once")
    await step(clock, INTERVAL)
    await until(lambda: len(fake.created) == 1)
    await draft_recorded(store, KEY)
    draft_id = fake.created[0]["id"]
    fake.history[DM_ID] = [m for m in fake.history[DM_ID] if m["id"] != draft_id]
    return app, call


# Discord ------------------------------------------------------------------------------------------
async def test_discord_a_draft_deleted_while_it_grows_is_posted_anew_once(
    fake: FakeDiscord, frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock
) -> None:
    app, call = await discord_draft_deleted_mid_stream(fake, frontend, store, clock)
    call.stream(2, " upon a")
    await step(clock, INTERVAL)
    await until(lambda: fake.shown(DM_ID) == ["Once upon a"])
    call.finish("Once upon a time.")
    await step(clock, INTERVAL)
    await app.engine.idle()
    assert fake.shown(DM_ID) == ["Once upon a time."]
    assert len(fake.created) == 2
    await check_invariants(store, [KEY.id])
    await shut_down(app.engine)


async def test_discord_a_draft_deleted_before_the_final_edit_still_gets_the_answer(
    fake: FakeDiscord, frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock
) -> None:
    app, call = await discord_draft_deleted_mid_stream(fake, frontend, store, clock)
    call.finish("Once upon a time.")
    await step(clock, INTERVAL)
    await app.engine.idle()
    assert fake.shown(DM_ID) == ["Once upon a time."]
    [row] = await store.replies(KEY.id)
    assert row.state == "sent" and row.platform_message_ids == (fake.created[1]["id"],)
    await check_invariants(store, [KEY.id])
    await shut_down(app.engine)


async def test_discord_a_draft_deleted_after_it_showed_the_whole_answer_is_posted_anew(
    fake: FakeDiscord, frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock
) -> None:
    """The draft already shows the final text (a short answer streamed whole, or a long one's
    first part once full), so finishing needs no edit and only reads it back: that read finding
    it deleted must post it anew, not take "gone" for "could not read"."""
    app, replier = await streaming_app(frontend, store, clock)
    await say(fake, store, "tell me")
    call = await started(app, clock, replier, 0)
    call.stream(1, "Once upon a time.")
    await step(clock, INTERVAL)
    await until(lambda: fake.shown(DM_ID) == ["Once upon a time."])
    await draft_recorded(store, KEY)
    fake.history[DM_ID] = []  # a person deleted it
    call.finish("Once upon a time.")
    await step(clock, INTERVAL)
    await app.engine.idle()
    assert fake.shown(DM_ID) == ["Once upon a time."]
    [row] = await store.replies(KEY.id)
    assert row.state == "sent" and row.platform_message_ids == (fake.created[1]["id"],)
    await check_invariants(store, [KEY.id])
    await shut_down(app.engine)


# the core's rules -------------------------------------------------------------------------------
class HeldEdits(RecordingFrontend):
    """Edits of partial text wait (like discord.py sleeping out a 429) until released."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(drafts=True, clock=clock)
        self.release = asyncio.Event()
        self.unstored = asyncio.Event()
        self.cancelled = 0

    async def edit_draft(self, key: ConversationKey, message_id: str, text: str) -> None:
        if not text.endswith("."):
            self.unstored.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        await super().edit_draft(key, message_id, text)


async def test_the_end_of_a_stream_cancels_a_held_edit_instead_of_waiting_for_it(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend = HeldEdits(clock)
    replier = ScriptedReplier(hold=True)
    engine = streaming_engine(store, clock, replier, frontend)
    await engine.ingest(message(1, "hello"))
    call = await start_generation(engine, clock, replier, 0)
    call.stream(1, "Hel")
    await step(clock, INTERVAL)
    await until(lambda: len(frontend.posts) == 1)
    await draft_recorded(store, CONFTEST_KEY)
    call.stream(1, "lo")
    await step(clock, INTERVAL)
    await until(frontend.unstored.is_set)  # an edit is held back by the platform
    call.finish("Hello.")
    async with asyncio.timeout(5):  # before: the engine waited on the held edit
        await step(clock, INTERVAL)
        await engine.idle()
    assert frontend.cancelled == 1
    assert frontend.visible() == ["Hello."]
    frontend.release.set()
    await asyncio.sleep(0)
    assert frontend.visible() == ["Hello."]  # the held edit never lands after the answer
    await check_invariants(store, [KEY_CORE.id], frontend=frontend)


async def test_a_commit_the_final_check_discards_leaves_the_draft_waiting_not_stale(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend = streaming_frontend(clock)
    replier = ScriptedReplier(hold=True)
    engine = streaming_engine(store, clock, replier, frontend)
    await engine.ingest(message(1, "hello"))
    call = await start_generation(engine, clock, replier, 0)
    call.stream(2, "Hi there")
    await until(lambda: frontend.visible() == ["Hi there"])  # the first word shows at once
    call.finish("Hi there, welcome.")
    await until(lambda: KEY_CORE.id not in engine.supervisor._watched)  # the watch ended
    await engine.ingest(message(2, "wait, one more"))  # after the watch, before the final check
    await step(clock, INTERVAL)
    await until(lambda: frontend.visible() == [WAITING])
    assert [g.outcome for g in await store.generations()] == ["discarded"]
    await engine.idle()
    again = await start_generation(engine, clock, replier, 1)
    again.finish("Hi there, and to the one more.")
    await step(clock, INTERVAL)
    await engine.idle()
    assert frontend.visible() == ["Hi there, and to the one more."]
    assert len(frontend.posts) == 1
    await check_invariants(store, [KEY_CORE.id], frontend=frontend)


class CountedLookups(RecordingFrontend):
    """Counts look-ups of a draft by its key."""

    lookups = 0

    async def find_draft(self, key: ConversationKey, draft: Draft) -> str | None:
        self.lookups += 1
        return await super().find_draft(key, draft)


async def test_a_draft_of_unknown_outcome_is_not_posted_again_until_its_absence_is_proven(
    store: SqliteStore, clock: FakeClock
) -> None:
    """A post in flight does not show in a read: a second draft waits a lease TTL."""
    frontend = CountedLookups(drafts=True, clock=clock)
    replier = ScriptedReplier(hold=True)
    engine = streaming_engine(store, clock, replier, frontend)
    await engine.ingest(message(1, "hello"))
    lease = await store.acquire_lease(KEY_CORE.id, "x", clock.now(), 30.0)
    assert lease is not None
    in_flight = Draft("dinflight00000000000", None, clock.now(), None)
    assert await store.record_draft(lease.conversation_id, lease.token, in_flight)
    await store.release_lease(lease.conversation_id, lease.token)
    call = await start_generation(engine, clock, replier, 0)
    call.stream(2, "Hi there")
    await step(clock, INTERVAL)
    await until(lambda: frontend.lookups == 1)
    waits_out = clock.now() + 20.0  # the stream sleeps until the draft's absence is proven
    await until(lambda: any(wake > waits_out for wake in clock.waiting()))
    assert frontend.posts == []  # its post may still land: nothing new yet
    for _ in range(30):
        await step(clock, INTERVAL)
    await until(lambda: frontend.visible() == ["Hi there"])
    call.finish("Hi there.")
    await step(clock, INTERVAL)
    await engine.idle()
    assert frontend.visible() == ["Hi there."] and len(frontend.posts) == 1


async def test_discord_a_stale_edit_landing_after_the_final_text_is_undone(
    fake: FakeDiscord, frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock
) -> None:
    app, replier = await streaming_app(frontend, store, clock)
    await say(fake, store, "hello")
    call = await started(app, clock, replier, 0)
    call.stream(1, "Hel")
    await step(clock, INTERVAL)
    await until(lambda: len(fake.created) == 1)

    def stale_edit_lands(message: dict[str, object]) -> None:
        if message["content"] == "Hello there.":
            fake.after_edit = None
            message["content"] = "Hel"  # a stale generation's late edit, right after the final

    fake.after_edit = stale_edit_lands
    call.finish("Hello there.")
    await step(clock, INTERVAL)
    await app.engine.idle()
    assert fake.shown(DM_ID) == ["Hello there."]
    assert [c[2] for c in fake.calls if c[0] == "PATCH"][-2:] == ["Hello there."] * 2
    await shut_down(app.engine)


async def test_a_found_draft_finished_as_part_0_is_not_posted_again_when_part_1_is_retried(
    store: SqliteStore, clock: FakeClock
) -> None:
    """The draft's post landed but its response was lost, so the reply's delivery looked it up
    and finished it as part 0; part 1 then failed. The retry must read part 0 back as the
    reply's (its final edit labelled it so), not post the draft again."""
    frontend = streaming_frontend(clock, parts=2)
    engine, call = await one_message_generating(store, clock, frontend)
    frontend.post_faults.append(Fault(RetryableDeliveryError("lost"), landed=True, part=0))
    call.stream(2, "Hi there")
    await until(lambda: len(frontend.posts) == 1)  # it landed; the stream saw an error
    draft = await store.draft(KEY_CORE.id)
    assert draft is not None and draft.message_id is None
    frontend.post_faults.append(Fault(RetryableDeliveryError("502"), part=1))
    call.finish("a" * 30 + "b" * 30)
    await step(clock, INTERVAL)
    await engine.idle()
    [row] = await store.replies(KEY_CORE.id)
    assert row.state == "pending" and len(row.platform_message_ids) == 1  # part 0 is out
    await step(clock, SETTINGS.delivery_backoff_max_seconds)
    await engine.outbox.deliver_due()
    await engine.idle()
    assert frontend.visible() == ["a" * 30, "b" * 30]
    assert [post.part for post in frontend.posts] == [0, 1]
    await check_invariants(store, [KEY_CORE.id], frontend=frontend)


class HeldDraftPost(RecordingFrontend):
    """A draft's post that is on its way (not landed yet) until the test lets it through."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(drafts=True, clock=clock)
        self.on_its_way = asyncio.Event()
        self.lands = asyncio.Event()

    async def post_draft(self, key: ConversationKey, draft: Draft, text: str) -> str:
        self.on_its_way.set()
        await self.lands.wait()
        return await super().post_draft(key, draft, text)


async def test_a_reply_committed_while_its_drafts_post_is_in_flight_awaits_that_post(
    store: SqliteStore, clock: FakeClock
) -> None:
    """The reply's delivery awaits this process's own post of the draft (its answer, when it
    lands) instead of waiting out a lease TTL for a post that may still land unseen."""
    frontend = HeldDraftPost(clock)
    engine, call = await one_message_generating(store, clock, frontend)
    call.stream(2, "Hi there")
    await until(frontend.on_its_way.is_set)
    call.finish("Hi there, welcome.")
    await step(clock, INTERVAL)  # the stream's interval before the final edit
    async with asyncio.timeout(5.0):
        while not await store.replies(KEY_CORE.id):  # noqa: ASYNC110
            await asyncio.sleep(0.005)
    frontend.lands.set()  # the draft's post lands after the commit
    await engine.idle()
    [row] = await store.replies(KEY_CORE.id)
    assert row.state == "sent", row  # before: pending, retried a lease TTL after the draft
    assert row.sent_at is not None and row.sent_at - row.created_at <= INTERVAL  # the test's step
    assert frontend.visible() == ["Hi there, welcome."] and len(frontend.posts) == 1
    await check_invariants(store, [KEY_CORE.id], frontend=frontend)
