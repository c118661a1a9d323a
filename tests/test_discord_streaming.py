"""Streaming on Discord over the wire: real discord.py against the fake Discord on 127.0.0.1.

One message per burst, sent once (with the draft's nonce) and then PATCHed as the answer grows;
the fake refuses content over 2000 characters and edits of someone else's message, as Discord
does, and records every call it took.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from adapters.discord import DiscordFrontend
from bot.app import App
from bot.config import Config, parse_config
from bot.core.events import ConversationKey
from storage.sqlite import SqliteStore
from testkit import ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from testkit.engine import shut_down
from testkit.fake_discord import MESSAGE_LIMIT, Failure, FakeDiscord, frontend_for
from tests.clock_steps import step

DM_ID = 400_000_000_000_000_003
ALICE = {"id": "200000000000000001", "username": "alice", "discriminator": "0",
         "global_name": "Alice", "avatar": None}  # fmt: skip
KEY = ConversationKey("discord", "dm", str(DM_ID))
INTERVAL = 1.0


@pytest.fixture
def fake(fake_discord: FakeDiscord) -> FakeDiscord:
    return fake_discord


@pytest.fixture
async def frontend(fake: FakeDiscord, clock: FakeClock) -> AsyncIterator[DiscordFrontend]:
    front = frontend_for(fake, clock)
    yield front
    await front.stop()


def streaming_config(enabled: bool = True) -> Config:
    return parse_config(
        {"llm": {"provider": "offline"}, "console": {"enabled": False}, "engine": {"owner": "w1"},
         "streaming": {"enabled": enabled, "interval_seconds": INTERVAL}}
    )  # fmt: skip


async def streaming_app(
    frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock, enabled: bool = True
) -> tuple[App, ScriptedReplier]:
    """The real App on the fake Discord, with a replier the test drives."""
    replier = ScriptedReplier(hold=True)
    app = App(streaming_config(enabled), store, replier, [frontend], clock=clock, owner="w1")
    await frontend.start(app)
    return app, replier


async def until(predicate: Callable[[], bool], within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def say(fake: FakeDiscord, store: SqliteStore, *texts: str) -> None:
    before = await store.conversation_state(KEY.id)
    version = before.version if before else 0
    for text in texts:
        await fake.dispatch("MESSAGE_CREATE", fake.message(DM_ID, ALICE, text))
    async with asyncio.timeout(5.0):
        while (state := await store.conversation_state(KEY.id)) is None or (  # noqa: ASYNC110
            state.version < version + len(texts)
        ):
            await asyncio.sleep(0.005)


async def started(app: App, clock: FakeClock, replier: ScriptedReplier, n: int):  # type: ignore[no-untyped-def]
    await clock.advance(1.5)
    await app.engine.run_due()
    return await replier.next_call(n)


async def test_three_lines_grow_one_message_that_ends_with_the_answer(
    fake: FakeDiscord, frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock
) -> None:
    app, replier = await streaming_app(frontend, store, clock)
    await say(fake, store, "hi", "quick question", "what is a burst?")
    call = await started(app, clock, replier, 0)
    assert call.texts == ["hi", "quick question", "what is a burst?"]
    call.stream(2, "A burst is")
    await step(clock, INTERVAL)
    await until(lambda: len(fake.created) == 1)
    draft = fake.created[0]
    assert draft["request"]["enforce_nonce"] is True and len(draft["request"]["nonce"]) <= 25
    call.stream(3, " a few quick `mess")  # a half-written code span is closed while it grows
    await step(clock, INTERVAL)
    await until(lambda: len(fake.edits) == 1)
    assert fake.shown(DM_ID) == ["A burst is a few quick `mess`"]
    call.finish("A burst is a few quick messages, answered once.")
    await step(clock, INTERVAL)
    await app.engine.idle()
    assert fake.shown(DM_ID) == ["A burst is a few quick messages, answered once."]
    assert len(fake.created) == 1  # one message; the rest were edits of it
    assert [c[0] for c in fake.calls] == ["POST", "PATCH", "PATCH"]
    [row] = await store.replies(KEY.id)
    assert row.state == "sent" and row.platform_message_ids == (draft["id"],)
    await check_invariants(store, [KEY.id])
    await shut_down(app.engine)


async def test_typing_again_while_it_grows_restarts_the_same_message(
    fake: FakeDiscord, frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock
) -> None:
    app, replier = await streaming_app(frontend, store, clock)
    await say(fake, store, "what is")
    first = await started(app, clock, replier, 0)
    first.stream(2, "It is")
    await step(clock, INTERVAL)
    await until(lambda: len(fake.created) == 1)
    await say(fake, store, "the time?")
    await step(clock, INTERVAL)
    await until(lambda: fake.shown(DM_ID) == ["…"])
    await app.engine.idle()  # the superseded worker released the conversation
    second = await started(app, clock, replier, 1)
    assert second.texts == ["what is", "the time?"]
    second.stream(2, "It is noon")
    await step(clock, INTERVAL)
    await until(lambda: fake.shown(DM_ID) == ["It is noon"])
    second.finish("It is noon, to answer both.")
    await step(clock, INTERVAL)
    await app.engine.idle()
    assert fake.shown(DM_ID) == ["It is noon, to answer both."]
    assert len(fake.created) == 1
    await check_invariants(store, [KEY.id])
    await shut_down(app.engine)


async def test_a_50000_character_answer_ends_as_parts_below_the_limit(
    fake: FakeDiscord, frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock
) -> None:
    frontend.max_parts = 40
    app, replier = await streaming_app(frontend, store, clock)
    await say(fake, store, "write a lot")
    call = await started(app, clock, replier, 0)
    words = [f"word{n}" for n in range(7000)]
    answer = " ".join(words)
    assert len(answer) > 50_000
    for chunk in range(0, len(words), 1000):  # the draft grows past one message's worth
        call.stream(1000, " ".join(words[chunk : chunk + 1000]) + " ")
        await step(clock, INTERVAL)
        await until(lambda: len(fake.created) == 1)
        await asyncio.sleep(0.02)
    call.finish(answer)
    await step(clock, INTERVAL)
    for _ in range(60):  # the channel's budget paces the parts: five at once, then one a second
        replies = await store.replies(KEY.id)
        if replies and replies[0].state == "sent":
            break
        await step(clock, INTERVAL)
    await app.engine.idle()
    shown = fake.shown(DM_ID)
    assert len(shown) > 25 and all(len(part) <= MESSAGE_LIMIT for part in shown)
    assert " ".join(shown).split() == words  # every word, once, in order
    [row] = await store.replies(KEY.id)
    assert row.platform_message_ids[0] == fake.created[0]["id"]  # the draft is the first part
    assert len(fake.created) == len(shown)
    await shut_down(app.engine)


async def test_a_final_edit_that_landed_though_it_failed_leaves_one_message(
    fake: FakeDiscord, frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock
) -> None:
    """The edit that finishes the draft takes effect, but the bot hears a 503: the outbox retries
    the delivery, which edits the same message again; nothing is posted anew."""
    app, replier = await streaming_app(frontend, store, clock)
    await say(fake, store, "hello")
    call = await started(app, clock, replier, 0)
    call.stream(1, "Hel")
    await step(clock, INTERVAL)
    await until(lambda: len(fake.created) == 1)
    fake.edit_failures.append(Failure(503, {"message": "upstream overloaded"}, lands=True))
    call.finish("Hello there!")
    await step(clock, INTERVAL)
    await app.engine.idle()
    [row] = await store.replies(KEY.id)
    assert row.state == "pending" and fake.shown(DM_ID) == ["Hello there!"]  # landed, unheard
    await clock.advance(60.0)
    await app.engine.outbox.deliver_due()
    await app.engine.idle()
    [row] = await store.replies(KEY.id)
    assert row.state == "sent" and fake.shown(DM_ID) == ["Hello there!"]
    assert [c[0] for c in fake.calls].count("POST") == 1
    await shut_down(app.engine)


async def test_a_rate_limited_edit_is_waited_out(
    fake: FakeDiscord, frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock
) -> None:
    app, replier = await streaming_app(frontend, store, clock)
    await say(fake, store, "hello")
    call = await started(app, clock, replier, 0)
    call.stream(1, "Hel")
    await step(clock, INTERVAL)
    await until(lambda: len(fake.created) == 1)
    limited = {"message": "You are being rate limited.", "retry_after": 0.05, "global": False}
    headers = {"Via": "1.1 google", "Retry-After": "0.05", "X-RateLimit-Remaining": "0",
               "X-RateLimit-Reset-After": "0.05", "X-RateLimit-Bucket": "edits"}  # fmt: skip
    fake.edit_failures.append(Failure(429, limited, headers))  # as Discord sends it
    call.stream(1, "lo there")
    await step(clock, INTERVAL)
    await until(lambda: fake.shown(DM_ID) == ["Hello there"])  # discord.py retried after 429
    call.finish("Hello there!")
    await step(clock, INTERVAL)
    await app.engine.idle()
    assert fake.shown(DM_ID) == ["Hello there!"] and len(fake.created) == 1
    assert fake.edit_failures == []  # the 429 was served, and waited out
    await shut_down(app.engine)


async def test_streaming_off_sends_the_answer_once_complete(
    fake: FakeDiscord, frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock
) -> None:
    app, replier = await streaming_app(frontend, store, clock, False)
    await say(fake, store, "hello")
    call = await started(app, clock, replier, 0)
    call.stream(1, "partial")
    for _ in range(3):
        await step(clock, INTERVAL)
    call.finish("whole")
    await app.engine.idle()
    # the fake records every call: a draft posted on the way would be a second POST
    assert [c[0] for c in fake.calls] == ["POST"] and fake.shown(DM_ID) == ["whole"]
    await shut_down(app.engine)


async def test_a_final_edit_to_the_text_the_draft_shows_already_only_removes_the_button(
    fake: FakeDiscord, frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock
) -> None:
    """The stream's last edit showed the whole answer: the reply's final edit changes only the
    buttons (the draft's Stop goes, the answer's 👍/👎 come), never nothing (the read-back still
    checks the message)."""
    app, replier = await streaming_app(frontend, store, clock)
    await say(fake, store, "hi")
    call = await started(app, clock, replier, 0)
    call.stream(2, "Hello")
    await step(clock, INTERVAL)
    await until(lambda: len(fake.created) == 1)
    call.stream(2, " there.")
    await step(clock, INTERVAL)
    await until(lambda: fake.shown(DM_ID) == ["Hello there."])
    call.stream(0, "")  # nothing new: the stream asks for no edit
    await step(clock, INTERVAL)
    call.finish("Hello there.")
    await step(clock, INTERVAL)
    await app.engine.idle()
    assert fake.shown(DM_ID) == ["Hello there."]
    assert fake.redundant_edits == 0
    assert [c[0] for c in fake.calls] == ["POST", "PATCH", "PATCH"]
    [buttons] = fake.edits[-1]["components"]
    assert [button["emoji"]["name"] for button in buttons["components"]] == ["👍", "👎"]
    assert fake.edits[-1]["content"] == "Hello there."
    [row] = await store.replies(KEY.id)
    assert row.state == "sent" and row.platform_message_ids == (fake.created[0]["id"],)
    await check_invariants(store, [KEY.id])
    await shut_down(app.engine)
