"""The Stop button on Discord over the wire (G16): real discord.py against the fake Discord.

The streamed draft carries a Stop button; a press arrives as INTERACTION_CREATE on the fake
gateway, is stored and decided by its interaction id, and only then answered with an interaction
callback the fake records (a deferred update when the stop applies, an ephemeral notice when it
does not). The fake never dedupes anything for the bot: a replay is the same payload sent again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters.discord import DiscordFrontend
from adapters.discord.render import to_discord
from adapters.discord.stop import NOT_RECORDED, STOP_LABEL
from bot.app import App
from bot.config import DiscordConfig
from bot.core.clicks import NOTICES, stopped_text
from bot.core.errors import StoreError
from bot.core.events import ConversationKey
from storage.sqlite import SqliteStore
from testkit import ReplierCall, ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from testkit.engine import shut_down
from testkit.fake_discord import FakeDiscord, Json, frontend_for
from tests.clock_steps import step
from tests.test_discord_streaming import INTERVAL, streaming_config, until

GUILD, CHANNEL = 400_000_000_000_000_001, 400_000_000_000_000_002
ALICE = {"id": "200000000000000001", "username": "alice", "discriminator": "0",
         "global_name": "Alice", "avatar": None}  # fmt: skip
BOB = {**ALICE, "id": "200000000000000002", "username": "bob", "global_name": "Bob"}
KEY = ConversationKey("discord", str(GUILD), str(CHANNEL))
STOPPED = to_discord(stopped_text("The plan is", "Alice"))  # what Alice's stop leaves shown
EPHEMERAL = 64
DEFERRED_UPDATE = 6
MESSAGE_WITH_SOURCE = 4


@pytest.fixture
def fake(fake_discord: FakeDiscord) -> FakeDiscord:
    fake_discord.guilds.append(GUILD)
    fake_discord.add_channel(CHANNEL, "text", guild_id=GUILD)
    return fake_discord


@pytest.fixture
async def frontend(fake: FakeDiscord, clock: FakeClock) -> AsyncIterator[DiscordFrontend]:
    front = frontend_for(fake, clock, DiscordConfig(enabled=True, listen_channels=[str(CHANNEL)]))
    yield front
    await front.stop()


@pytest.fixture
async def app(
    frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock
) -> AsyncIterator[App]:
    started = App(streaming_config(), store, ScriptedReplier(hold=True), [frontend], clock=clock,
                  owner="w1")  # fmt: skip
    await frontend.start(started)
    yield started
    await shut_down(started.engine)


async def streaming(
    fake: FakeDiscord, app: App, store: SqliteStore, clock: FakeClock, key: ConversationKey = KEY
) -> tuple[ReplierCall, Json]:
    """Alice asks in the listened channel; the answer streams into a draft: (call, draft)."""
    await fake.dispatch("MESSAGE_CREATE", fake.message(CHANNEL, ALICE, "what is the plan?",
                                                       guild_id=str(GUILD)))  # fmt: skip
    async with asyncio.timeout(5.0):
        while await store.conversation_state(key.id) is None:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
    await clock.advance(1.5)
    await app.engine.run_due()
    replier = app.engine.replier
    assert isinstance(replier, ScriptedReplier)
    call = await replier.next_call(0)
    call.stream(2, "The plan is")
    await step(clock, INTERVAL)
    await until(lambda: len(fake.created) == 1)
    return call, fake.created[0]


def stop_button(message: Json) -> Json:
    [row] = message["components"]
    assert row["type"] == 1  # an action row
    [button] = row["components"]
    assert button["type"] == 2 and button["label"] == STOP_LABEL
    return button


def shows_stop(message: Json) -> bool:
    labels = [b.get("label") for row in message["components"] for b in row["components"]]
    return STOP_LABEL in labels


async def press(fake: FakeDiscord, payload: Json, deliveries: int = 1) -> list[Json]:
    """Deliver a click `deliveries` times (a gateway replay repeats it); the callbacks it got."""
    for _ in range(deliveries):
        await fake.dispatch("INTERACTION_CREATE", payload)

    def answered() -> list[Json]:
        return [c for c in fake.callbacks if c["interaction_id"] == payload["id"]]

    await until(lambda: len(answered()) == deliveries)
    return answered()


async def ended(app: App, clock: FakeClock) -> None:
    await step(clock, INTERVAL)
    await app.engine.idle()


def bots_messages(fake: FakeDiscord) -> list[Json]:
    bot_id = fake.bot_user["id"]
    return [m for m in fake.history[CHANNEL] if m["author"]["id"] == bot_id]


async def test_a_stop_mid_stream_shows_the_stopped_text_in_the_one_message_without_the_button(
    fake: FakeDiscord, app: App, store: SqliteStore, clock: FakeClock
) -> None:
    call, draft = await streaming(fake, app, store, clock)
    button = stop_button(draft)
    stored_when_answered: list[list[str | None]] = []

    async def stored(_: Json) -> None:
        stored_when_answered.append([c.outcome for c in await store.clicks(KEY.id)])

    fake.before_callback = stored
    [callback] = await press(fake, fake.click(draft["id"], button["custom_id"], ALICE))
    assert callback["type"] == DEFERRED_UPDATE and not callback["refused"]
    assert stored_when_answered == [["stopped"]]  # stored and decided before Discord was answered
    await until(lambda: call.cancelled)  # the model request was closed, not read to its end
    await ended(app, clock)
    await until(lambda: bots_messages(fake)[0]["components"] == [])
    [message] = bots_messages(fake)  # no second reply
    assert message["id"] == draft["id"]
    assert message["content"] == STOPPED
    assert fake.edits[-1]["components"] == []  # the final edit removed the button
    [row] = await store.replies(KEY.id)
    assert row.state == "sent" and row.platform_message_ids == (draft["id"],)
    [generation] = await store.generations(KEY.id)
    assert generation.outcome == "stopped" and generation.error == "stopped by Alice"
    await check_invariants(store, [KEY.id])


async def test_a_replayed_click_stops_once_and_only_its_first_answer_is_taken(
    fake: FakeDiscord, app: App, store: SqliteStore, clock: FakeClock
) -> None:
    call, draft = await streaming(fake, app, store, clock)
    payload = fake.click(draft["id"], stop_button(draft)["custom_id"], ALICE)
    callbacks = await press(fake, payload, deliveries=2)
    assert [c["type"] for c in callbacks] == [DEFERRED_UPDATE, DEFERRED_UPDATE]  # no notice
    assert [c["refused"] for c in callbacks] == [False, True]  # Discord takes one answer
    await ended(app, clock)
    await until(lambda: bots_messages(fake)[0]["components"] == [])
    assert [c.outcome for c in await store.clicks(KEY.id)] == ["stopped"]
    assert await store.current_version(KEY.id) == 2  # the message, then one stop
    assert [m["content"] for m in bots_messages(fake)] == [STOPPED]
    assert len(await store.replies(KEY.id)) == 1 and call.cancelled


async def test_someone_elses_stop_is_refused_to_them_alone_and_the_answer_goes_on(
    fake: FakeDiscord, app: App, store: SqliteStore, clock: FakeClock
) -> None:
    call, draft = await streaming(fake, app, store, clock)
    custom_id = stop_button(draft)["custom_id"]
    late = fake.click(draft["id"], custom_id, ALICE)  # pressed now, delivered after the end
    [callback] = await press(fake, fake.click(draft["id"], custom_id, BOB))
    assert callback["type"] == MESSAGE_WITH_SOURCE
    assert callback["data"]["flags"] & EPHEMERAL
    assert callback["data"]["content"] == NOTICES["refused"]
    assert await store.current_version(KEY.id) == 1 and not call.cancelled
    call.finish("The plan is to ship on Friday.")
    await ended(app, clock)
    await until(lambda: not shows_stop(bots_messages(fake)[0]))  # the answer's 👍/👎 instead
    assert [m["content"] for m in bots_messages(fake)] == ["The plan is to ship on Friday."]
    [callback] = await press(fake, late)
    assert callback["type"] == MESSAGE_WITH_SOURCE and callback["data"]["flags"] & EPHEMERAL
    assert callback["data"]["content"] == NOTICES["ended"]
    assert [m["content"] for m in bots_messages(fake)] == ["The plan is to ship on Friday."]


async def test_a_click_the_store_cannot_take_is_answered_with_an_error_and_can_be_pressed_again(
    fake: FakeDiscord, app: App, store: SqliteStore, clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    call, draft = await streaming(fake, app, store, clock)
    custom_id = stop_button(draft)["custom_id"]
    real = store.stop

    async def busy(*args: Any) -> Any:
        raise StoreError("database is locked")

    monkeypatch.setattr(store, "stop", busy)
    [callback] = await press(fake, fake.click(draft["id"], custom_id, ALICE))
    assert callback["type"] == MESSAGE_WITH_SOURCE and callback["data"]["flags"] & EPHEMERAL
    assert callback["data"]["content"] == NOT_RECORDED
    assert "was not recorded" in caplog.text
    assert not call.cancelled and await store.clicks(KEY.id) == []
    monkeypatch.setattr(store, "stop", real)
    [callback] = await press(fake, fake.click(draft["id"], custom_id, ALICE))  # pressed again
    assert callback["type"] == DEFERRED_UPDATE
    await until(lambda: call.cancelled)


async def test_with_scope_user_the_button_names_whose_conversation_it_stops(
    fake: FakeDiscord, store: SqliteStore, clock: FakeClock
) -> None:
    """Each person has a conversation of their own in the channel: Bob's press on Alice's answer
    is refused (her conversation's, not an unknown one of his), and hers stops it."""
    config = DiscordConfig(enabled=True, listen_channels=[str(CHANNEL)], scope="user")
    front = frontend_for(fake, clock, config)
    app = App(streaming_config(), store, ScriptedReplier(hold=True), [front], clock=clock,
              owner="w1")  # fmt: skip
    alices = ConversationKey("discord", str(GUILD), str(CHANNEL), ALICE["id"])
    try:
        await front.start(app)
        call, draft = await streaming(fake, app, store, clock, alices)
        custom_id = stop_button(draft)["custom_id"]
        [refused] = await press(fake, fake.click(draft["id"], custom_id, BOB))
        assert refused["data"]["content"] == NOTICES["refused"]
        [applied] = await press(fake, fake.click(draft["id"], custom_id, ALICE))
        assert applied["type"] == DEFERRED_UPDATE
        await until(lambda: call.cancelled)
        assert [c.outcome for c in await store.clicks(alices.id)] == ["refused", "stopped"]
    finally:
        await shut_down(app.engine)
        await front.stop()
