"""👍/👎 on Discord over the wire (G16): real discord.py against the fake Discord.

An answer's last part carries two buttons (message components), put there by the final edit of a
streamed draft (in place of Stop) or posted with the part. A press arrives as INTERACTION_CREATE
on the fake gateway, is stored and decided by its interaction id, and only then answered with an
interaction callback the fake records. The fake never dedupes anything for the bot: a replay is
the same payload sent again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters.discord import DiscordFrontend
from adapters.discord.feedback import NOT_RECORDED
from bot.app import App
from bot.config import DiscordConfig, parse_config
from bot.core.errors import StoreError
from bot.core.votes import VOTE_NOTICES, thanks
from storage.sqlite import SqliteStore
from testkit import ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from testkit.engine import shut_down
from testkit.fake_discord import FakeDiscord, Json, frontend_for
from tests.test_discord_stop import (
    ALICE,
    BOB,
    CHANNEL,
    DEFERRED_UPDATE,
    EPHEMERAL,
    GUILD,
    KEY,
    MESSAGE_WITH_SOURCE,
    bots_messages,
    ended,
    press,
    streaming,
)
from tests.test_discord_streaming import INTERVAL, until

ANSWER = "The plan is to ship on Friday."


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


async def started(
    frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock, **sections: Any
) -> App:
    config = parse_config(
        {"llm": {"provider": "offline"}, "console": {"enabled": False}, "engine": {"owner": "w1"},
         "streaming": {"enabled": True, "interval_seconds": INTERVAL}, **sections}
    )  # fmt: skip
    app = App(config, store, ScriptedReplier(hold=True), [frontend], clock=clock, owner="w1")
    await frontend.start(app)
    return app


@pytest.fixture
async def app(
    frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock
) -> AsyncIterator[App]:
    running = await started(frontend, store, clock)
    yield running
    await shut_down(running.engine)


def vote_buttons(message: Json) -> dict[str, str]:
    """The message's 👍/👎 buttons: emoji → custom_id."""
    [row] = message["components"]
    assert row["type"] == 1  # an action row
    return {button["emoji"]["name"]: button["custom_id"] for button in row["components"]}


async def answered(fake: FakeDiscord, app: App, store: SqliteStore, clock: FakeClock) -> Json:
    """Alice's question, answered by a stream that ends with `ANSWER`: the answer's message."""
    call, draft = await streaming(fake, app, store, clock)
    call.finish(ANSWER)
    await ended(app, clock)
    await until(lambda: bots_messages(fake)[0]["content"] == ANSWER)
    await until(lambda: (bots_messages(fake)[0]["components"] or [{}])[0].get("components", [{}])
                [0].get("label") != "Stop")  # fmt: skip
    [message] = bots_messages(fake)
    assert message["id"] == draft["id"]  # the draft, finished: no second message
    return message


async def test_the_answer_carries_the_buttons_and_a_press_is_stored_before_it_is_answered(
    fake: FakeDiscord, app: App, store: SqliteStore, clock: FakeClock
) -> None:
    message = await answered(fake, app, store, clock)
    buttons = vote_buttons(message)
    assert sorted(buttons) == ["👍", "👎"]
    stored_when_answered: list[list[str]] = []

    async def stored(_: Json) -> None:
        stored_when_answered.append([v.value for v in await store.votes(KEY.id)])

    fake.before_callback = stored
    payload = fake.click(message["id"], buttons["👍"], ALICE)
    callbacks = await press(fake, payload, deliveries=2)  # a gateway replay
    assert stored_when_answered[0] == ["up"]
    assert callbacks[0]["type"] == MESSAGE_WITH_SOURCE
    assert callbacks[0]["data"]["flags"] & EPHEMERAL
    assert callbacks[0]["data"]["content"] == thanks("up")
    assert (callbacks[1]["type"], callbacks[1]["refused"]) == (DEFERRED_UPDATE, True)
    [vote] = await store.votes(KEY.id)
    assert (vote.voter_id, vote.voter_name, vote.value) == (ALICE["id"], "Alice", "up")
    assert [c.outcome for c in await store.clicks(KEY.id)] == ["voted"]
    await check_invariants(store, [KEY.id])


async def test_a_later_press_replaces_the_vote_an_older_one_does_not_and_people_count_apart(
    fake: FakeDiscord, app: App, store: SqliteStore, clock: FakeClock
) -> None:
    message = await answered(fake, app, store, clock)
    buttons = vote_buttons(message)
    older_up = fake.click(message["id"], buttons["👍"], ALICE)  # pressed first ...
    newer_down = fake.click(message["id"], buttons["👎"], ALICE)
    [callback] = await press(fake, newer_down)
    assert callback["data"]["content"] == thanks("down")
    [callback] = await press(fake, older_up)  # ... delivered last
    assert callback["type"] == DEFERRED_UPDATE  # nothing to say: the newer vote stands
    await press(fake, fake.click(message["id"], buttons["👍"], BOB))
    votes = {v.voter_name: v.value for v in await store.votes(KEY.id)}
    assert votes == {"Alice": "down", "Bob": "up"}
    await press(fake, fake.click(message["id"], buttons["👍"], ALICE))  # a change of mind
    votes = {v.voter_name: v.value for v in await store.votes(KEY.id)}
    assert votes == {"Alice": "up", "Bob": "up"}


async def test_an_answer_posted_whole_has_the_buttons_on_its_last_part_only(
    fake: FakeDiscord, frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock
) -> None:
    app = await started(frontend, store, clock, streaming={"enabled": False})
    try:
        await fake.dispatch("MESSAGE_CREATE", fake.message(CHANNEL, ALICE, "tell me everything",
                                                           guild_id=str(GUILD)))  # fmt: skip
        async with asyncio.timeout(5.0):
            while await store.conversation_state(KEY.id) is None:  # noqa: ASYNC110
                await asyncio.sleep(0.005)
        await clock.advance(1.5)
        await app.engine.run_due()
        replier = app.engine.replier
        assert isinstance(replier, ScriptedReplier)
        call = await replier.next_call(0)
        call.finish("\n\n".join(f"Paragraph {n}: " + "word " * 150 for n in range(5)))
        await ended(app, clock)
        await until(lambda: len(bots_messages(fake)) >= 2 and bots_messages(fake)[-1]["components"])
        parts = bots_messages(fake)
        assert [bool(m.get("components")) for m in parts] == [False] * (len(parts) - 1) + [True]
        [callback] = await press(fake, fake.click(parts[-1]["id"], vote_buttons(parts[-1])["👎"],
                                                  BOB))  # fmt: skip
        assert callback["data"]["content"] == thanks("down")
    finally:
        await shut_down(app.engine)


@pytest.mark.parametrize(
    "sections",
    [
        {"feedback": {"enabled": False}},
        {"channels": [{"platform": "discord", "channel": str(CHANNEL), "feedback": False}]},
    ],
    ids=["globally", "in-this-channel"],
)
async def test_no_buttons_where_feedback_is_off(
    fake: FakeDiscord,
    frontend: DiscordFrontend,
    store: SqliteStore,
    clock: FakeClock,
    sections: dict[str, Any],
) -> None:
    app = await started(frontend, store, clock, **sections)
    try:
        call, _ = await streaming(fake, app, store, clock)
        call.finish(ANSWER)
        await ended(app, clock)
        await until(lambda: bots_messages(fake)[0]["content"] == ANSWER)
        await until(lambda: bots_messages(fake)[0]["components"] == [])
        assert fake.edits[-1]["components"] == []  # the final edit removed Stop, added nothing
    finally:
        await shut_down(app.engine)


async def test_a_press_the_store_cannot_take_is_answered_with_an_error(
    fake: FakeDiscord, app: App, store: SqliteStore, clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    message = await answered(fake, app, store, clock)

    async def busy(*args: Any) -> Any:
        raise StoreError("database is locked")

    monkeypatch.setattr(store, "vote", busy)
    [callback] = await press(fake, fake.click(message["id"], vote_buttons(message)["👍"], ALICE))
    assert callback["type"] == MESSAGE_WITH_SOURCE and callback["data"]["flags"] & EPHEMERAL
    assert callback["data"]["content"] == NOT_RECORDED
    assert "was not recorded" in caplog.text
    assert await store.votes(KEY.id) == []


async def test_a_press_naming_an_answer_that_takes_no_votes_is_told_to_the_clicker(
    fake: FakeDiscord, app: App, store: SqliteStore, clock: FakeClock
) -> None:
    message = await answered(fake, app, store, clock)
    forged = vote_buttons(message)["👍"].replace(":r", ":r9", 1)  # another answer's id
    [callback] = await press(fake, fake.click(message["id"], forged, ALICE))
    assert callback["data"]["flags"] & EPHEMERAL
    assert callback["data"]["content"] == VOTE_NOTICES["not_votable"]
    assert await store.votes(KEY.id) == []
