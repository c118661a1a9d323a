"""Discord `/reset` over the wire (INTERACTION_CREATE on the fake gateway, parsed and dispatched
by discord.py's own `CommandTree`, answered with an interaction callback to the fake REST API),
and DMs under the access policy's `dm_policy` (dpytest)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters.discord import DiscordFrontend
from adapters.discord.commands import RESET_DESCRIPTION, RESET_DONE, RESET_REFUSED
from bot.app import App
from bot.config import DiscordConfig
from bot.core.events import ConversationKey, IncomingMessage
from storage.sqlite import SqliteStore
from testkit import ScriptedReplier
from testkit.clock import FakeClock
from testkit.engine import shut_down
from testkit.fake_discord import APP_ID, FakeDiscord, frontend_for
from tests.discord_harness import close_world, engine_config, open_world
from tests.test_discord_wire import ALICE, CHANNEL_ID, DM_ID, GUILD_ID, fake, frontend

__all__ = ["fake", "frontend"]  # fixtures

BOB = {"id": "200000000000000002", "username": "bob", "discriminator": "0",
       "global_name": "Bob", "avatar": None}  # fmt: skip
EPHEMERAL = 64


@pytest.fixture
async def started(
    fake: FakeDiscord, frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock
) -> AsyncIterator[App]:
    app = App(engine_config({"block_users": [BOB["id"]]}), store, ScriptedReplier(), [frontend],
              clock=clock, owner="w1")  # fmt: skip
    await frontend.start(app)
    yield app
    await shut_down(app.engine)


async def say(app: App, key: ConversationKey, n: int, text: str, author: dict[str, Any]) -> None:
    """A message straight into the app (the gateway path for messages is tested elsewhere)."""
    message = IncomingMessage(key, str(n), author["id"], author["username"], text,
                              is_dm=key.workspace == "dm")  # fmt: skip
    await app.ingest(message)
    await app.engine.clock.advance(1.5)  # type: ignore[attr-defined]
    await app.engine.run_due()
    await app.engine.idle()


async def history(store: SqliteStore, key: ConversationKey) -> list[str]:
    return [turn.text for turn in await store.history(key.id, 10**9, 50)]


async def reset(fake: FakeDiscord, user: dict[str, Any], channel: int, guild: int | None) -> Any:
    """Run `/reset` as `user`; the interaction response Discord got."""
    interaction = fake.interaction("reset", channel, user, guild)
    await fake.dispatch("INTERACTION_CREATE", interaction)
    await fake.wait_for(lambda: any(c["interaction_id"] == interaction["id"]
                                    for c in fake.callbacks))  # fmt: skip
    return next(c for c in fake.callbacks if c["interaction_id"] == interaction["id"])


async def test_reset_in_a_dm_answers_ephemerally_and_the_next_prompt_starts_fresh(
    fake: FakeDiscord, started: App, store: SqliteStore
) -> None:
    key = ConversationKey("discord", "dm", str(DM_ID))
    await say(started, key, 1, "my number is 42", ALICE)
    assert await history(store, key) == ["my number is 42", "reply to: my number is 42"]

    callback = await reset(fake, ALICE, DM_ID, None)
    assert callback["type"] == 4  # CHANNEL_MESSAGE_WITH_SOURCE
    assert callback["data"]["content"] == RESET_DONE
    assert callback["data"]["flags"] & EPHEMERAL
    assert await history(store, key) == []
    replier = started.engine.replier
    assert isinstance(replier, ScriptedReplier)
    await say(started, key, 2, "what was my number?", ALICE)
    assert [t.text for t in replier.calls[-1].prompt.history] == []


async def test_a_blocked_user_is_told_no_and_the_channel_keeps_its_history(
    fake: FakeDiscord, started: App, store: SqliteStore
) -> None:
    key = ConversationKey("discord", str(GUILD_ID), str(CHANNEL_ID))
    await say(started, key, 1, "remember: blue", ALICE)
    callback = await reset(fake, BOB, CHANNEL_ID, GUILD_ID)
    assert callback["data"]["content"] == RESET_REFUSED
    assert callback["data"]["flags"] & EPHEMERAL
    assert len(await history(store, key)) == 2
    callback = await reset(fake, ALICE, CHANNEL_ID, GUILD_ID)
    assert callback["data"]["content"] == RESET_DONE
    assert await history(store, key) == []


async def test_with_scope_user_reset_clears_only_the_callers_conversation(
    fake: FakeDiscord, store: SqliteStore, clock: FakeClock
) -> None:
    front = frontend_for(fake, clock, DiscordConfig(enabled=True, scope="user"))
    app = App(engine_config(), store, ScriptedReplier(), [front], clock=clock, owner="w1")
    try:
        await front.start(app)
        alices = ConversationKey("discord", str(GUILD_ID), str(CHANNEL_ID), ALICE["id"])
        bobs = ConversationKey("discord", str(GUILD_ID), str(CHANNEL_ID), BOB["id"])
        await say(app, alices, 1, "alice here", ALICE)
        await say(app, bobs, 2, "bob here", BOB)
        await reset(fake, ALICE, CHANNEL_ID, GUILD_ID)
        assert await history(store, alices) == []
        assert await history(store, bobs) == ["bob here", "reply to: bob here"]
    finally:
        await shut_down(app.engine)
        await front.stop()


async def test_reset_is_registered_once_and_other_commands_are_left_alone(
    fake: FakeDiscord, started: App, store: SqliteStore, clock: FakeClock
) -> None:
    assert fake.commands["reset"]["description"] == RESET_DESCRIPTION
    assert fake.commands["reset"]["contexts"] == [0, 1]  # servers and DMs with the bot
    assert len(fake.command_posts) == 1
    fake.commands["other"] = {"id": "9", "application_id": str(APP_ID), "type": 1,
                              "name": "other", "description": "someone else's"}  # fmt: skip
    again = frontend_for(fake, clock)
    try:
        await again.start(started)  # a second process, or a restart
        assert len(fake.command_posts) == 1 and "other" in fake.commands
    finally:
        await again.stop()


async def test_a_registration_failure_is_logged_and_not_fatal(
    fake: FakeDiscord, frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    fake.commands_status = 403
    app = App(engine_config(), store, ScriptedReplier(), [frontend], clock=clock, owner="w1")
    try:
        with caplog.at_level(logging.WARNING, "burstbot.discord"):
            await frontend.start(app)  # returns: messages still work
        assert "could not register the slash commands" in caplog.text
        assert fake.commands == {}
    finally:
        await shut_down(app.engine)


async def test_with_dm_policy_off_a_dm_gets_no_reply_but_the_server_does(
    store: SqliteStore, clock: FakeClock
) -> None:
    replier = ScriptedReplier()
    world = await open_world(store, clock, replier, access={"dm_policy": "off"})
    try:
        dm = await world.alice._user.create_dm()
        await world.say(dm, world.alice, "hi in private")
        await world.say(world.listened, world.alice, "hi in public")
        await world.step(5)
        [reply] = world.sent()
        assert reply.channel.id == world.listened.id
        assert await store.conversation_state(world.key(dm).id) is None
    finally:
        await close_world(world)


async def test_with_dm_policy_off_reset_in_a_dm_is_refused(
    fake: FakeDiscord, frontend: DiscordFrontend, store: SqliteStore, clock: FakeClock
) -> None:
    app = App(engine_config({"dm_policy": "off"}), store, ScriptedReplier(), [frontend],
              clock=clock, owner="w1")  # fmt: skip
    try:
        await frontend.start(app)
        assert (await reset(fake, ALICE, DM_ID, None))["data"]["content"] == RESET_REFUSED
        assert (await reset(fake, ALICE, CHANNEL_ID, GUILD_ID))["data"]["content"] == RESET_DONE
    finally:
        await shut_down(app.engine)
