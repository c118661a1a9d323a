"""The Discord adapter on discord.py (driven by dpytest) in front of the real engine and store."""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator

import discord
import pytest
from discord.ext.test import backend
from discord.ext.test import factories as facts

from adapters.discord.render import MESSAGE_LIMIT, nonce_for
from adapters.markdown import TRUNCATED_NOTE
from bot.config import DiscordConfig
from bot.core.events import Reply
from bot.wiring import build_serving, engine_settings
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from tests.discord_harness import DiscordWorld, close_world, engine_config, open_world


@pytest.fixture
def replier() -> ScriptedReplier:
    return ScriptedReplier()


@pytest.fixture
async def world(
    store: SqliteStore, clock: FakeClock, replier: ScriptedReplier
) -> AsyncIterator[DiscordWorld]:
    w = await open_world(store, clock, replier)
    yield w
    await close_world(w)


async def stored_texts(store: SqliteStore, conversation_id: str) -> list[str]:
    return [m.text for m in await store.pending_messages(conversation_id, 0, 10**9)]


async def test_a_burst_from_a_member_gets_one_reply(
    world: DiscordWorld, store: SqliteStore, replier: ScriptedReplier
) -> None:
    key = world.key(world.listened)
    for n, text in enumerate(("so about", "the deploy", "is it friday?"), start=1):
        await world.say(world.listened, world.alice, text)  # returns when the handler has
        assert len(await stored_texts(store, key.id)) == n  # stored before returning
        await world.step(0.5)
    assert await stored_texts(store, key.id) == ["so about", "the deploy", "is it friday?"]
    assert world.sent() == []  # quiet window still open
    await world.step(1.5)
    [reply] = world.sent()
    assert reply.content == "reply to: so about | the deploy | is it friday?"
    assert reply.channel.id == world.listened.id
    assert len(replier.calls) == 1
    await world.step(10)
    assert world.sent() == []
    await check_invariants(store, [key.id])


async def test_plain_chatter_in_a_channel_not_listened_to_gets_nothing(
    world: DiscordWorld, store: SqliteStore, replier: ScriptedReplier
) -> None:
    await world.say(world.chatter, world.alice, "lunch?")
    await world.say(world.chatter, world.bob, "sure")
    await world.step(20)
    assert world.sent() == [] and replier.calls == []
    assert await store.conversation_state(world.key(world.chatter).id) is None


async def test_a_dm_is_answered_in_the_dm(world: DiscordWorld, store: SqliteStore) -> None:
    dm = await world.alice._user.create_dm()
    await world.say(dm, world.alice, "hi bot")
    await world.step(1.5)
    [reply] = world.sent()
    assert reply.content == "reply to: hi bot" and reply.channel.id == dm.id
    assert (await store.conversation_state(f"discord/dm/{dm.id}/")) is not None


async def test_dms_can_be_switched_off(world: DiscordWorld) -> None:
    world.route(allow_dms=False)
    dm = await world.bob._user.create_dm()
    await world.say(dm, world.bob, "hi bot")
    await world.step(5)
    assert world.sent() == []


async def test_a_mention_or_a_reply_to_the_bot_counts_in_any_channel(world: DiscordWorld) -> None:
    me = world.me
    await world.say(world.chatter, world.alice, f"<@{me.id}> what's up", mentions=[me])
    await world.step(1.5)
    [answer] = world.sent()
    assert answer.content == "reply to: @FakeApp_nick what's up"

    referenced = facts.dict_from_message(answer)
    await world.say(
        world.chatter,
        world.bob,
        "and tomorrow?",
        type=19,
        message_reference={"message_id": answer.id, "channel_id": world.chatter.id},
        referenced_message=referenced,
    )
    await world.step(1.5)
    assert [m.content for m in world.sent()] == ["reply to: and tomorrow?"]


async def test_allowed_guilds_limits_the_guilds_served(world: DiscordWorld) -> None:
    world.route(allowed_guilds=frozenset({world.guild.id + 1}))
    await world.say(world.listened, world.alice, f"<@{world.me.id}> hello", mentions=[world.me])
    await world.step(5)
    assert world.sent() == []


async def test_bots_and_webhooks_never_count(world: DiscordWorld, store: SqliteStore) -> None:
    other_bot = world.state.store_user(facts.make_user_dict("otherbot", 2, None, bot=True))
    await world.say(world.listened, world.me, "my own earlier answer")
    await world.say(world.listened, other_bot, f"<@{world.me.id}> ping", mentions=[world.me])
    await world.say(world.listened, world.bob, "from a webhook", webhook_id=str(facts.make_id()))
    await world.step(20)
    assert world.sent() == []
    assert await store.conversation_state(world.key(world.listened).id) is None


async def test_edit_and_delete_inside_the_window_shape_the_burst(
    world: DiscordWorld, store: SqliteStore
) -> None:
    key = world.key(world.listened)
    first = await world.say(world.listened, world.alice, "deploy at 5")
    second = await world.say(world.listened, world.alice, "on tuesday")
    third = await world.say(world.listened, world.alice, "oops wrong channel")
    version = (await store.conversation_state(key.id)).version  # type: ignore[union-attr]

    await world.edit(first, first["content"])  # an embed unfurl: same content
    assert (await store.conversation_state(key.id)).version == version  # type: ignore[union-attr]

    await world.edit(second, "on wednesday")
    await world.delete(third)
    assert (await store.conversation_state(key.id)).version == version + 2  # type: ignore[union-attr]
    await world.step(1.5)
    assert [m.content for m in world.sent()] == ["reply to: deploy at 5 | on wednesday"]
    await check_invariants(store, [key.id])


async def test_a_burst_bulk_deleted_is_skipped_without_a_model_call(
    world: DiscordWorld, store: SqliteStore, replier: ScriptedReplier
) -> None:
    first = await world.say(world.listened, world.alice, "spam one")
    second = await world.say(world.listened, world.alice, "spam two")
    await world.gateway("MESSAGE_DELETE_BULK", {"ids": [first["id"], second["id"]],
                        "channel_id": world.listened.id, "guild_id": world.guild.id})  # fmt: skip
    await world.step(1.5)
    assert world.sent() == [] and replier.calls == []
    await check_invariants(store, [world.key(world.listened).id])


async def test_edits_of_messages_no_longer_cached_count_only_when_discord_marks_them_edited(
    world: DiscordWorld, store: SqliteStore
) -> None:
    key = world.key(world.listened)
    data = await world.say(world.listened, world.alice, "see https://example.com")
    world.state._messages.clear()  # as after a restart: discord.py no longer has the message
    await world.gateway("MESSAGE_UPDATE", {**data, "embeds": [{"title": "Example"}]})  # unfurl
    assert (await store.conversation_state(key.id)).version == 1  # type: ignore[union-attr]
    await world.edit(data, "see https://example.org")
    assert (await store.conversation_state(key.id)).version == 2  # type: ignore[union-attr]
    await world.step(1.5)
    assert [m.content for m in world.sent()] == ["reply to: see https://example.org"]


async def test_the_same_message_dispatched_twice_is_one_reply(
    world: DiscordWorld, store: SqliteStore, replier: ScriptedReplier
) -> None:
    key = world.key(world.listened)
    data = world.payload(world.listened, world.alice, "are we there yet")
    await world.dispatch_create(data)
    await world.dispatch_create(data)  # a gateway RESUME replays the event
    assert (await store.conversation_state(key.id)).version == 1  # type: ignore[union-attr]
    await world.step(1.5)
    await world.dispatch_create(data)  # a replay after the answer
    await world.step(10)
    assert [m.content for m in world.sent()] == ["reply to: are we there yet"]
    assert len(replier.calls) == 1
    await check_invariants(store, [key.id])


async def test_scope_user_gives_each_person_a_burst_of_their_own(
    store: SqliteStore, clock: FakeClock, replier: ScriptedReplier
) -> None:
    world = await open_world(store, clock, replier, DiscordConfig(enabled=True, scope="user"))
    try:
        await world.say(world.listened, world.alice, "alice one")
        await world.say(world.listened, world.bob, "bob one")
        await world.say(world.listened, world.alice, "alice two")
        await world.step(1.5)
        assert sorted(m.content for m in world.sent()) == [
            "reply to: alice one | alice two",
            "reply to: bob one",
        ]
        alice_key = world.key(world.listened, thread=str(world.alice.id))
        await check_invariants(store, [alice_key.id])
        assert await stored_texts(store, alice_key.id) == ["alice one", "alice two"]
    finally:
        await close_world(world)


def thread_payload(world: DiscordWorld, parent_id: int, owner_id: int) -> dict[str, object]:
    return {
        "id": facts.make_id(),
        "guild_id": world.guild.id,
        "parent_id": parent_id,
        "owner_id": owner_id,
        "type": 11,
        "name": "a thread",
        "member_count": 2,
        "message_count": 0,
        "thread_metadata": {
            "archived": False,
            "auto_archive_duration": 60,
            "archive_timestamp": "2026-01-01T00:00:00+00:00",
            "locked": False,
        },
    }


async def test_threads_the_bot_started_or_under_a_listened_channel_count(
    world: DiscordWorld, store: SqliteStore
) -> None:
    started_by_bot = thread_payload(world, world.chatter.id, world.me.id)
    under_listened = thread_payload(world, world.listened.id, world.alice.id)
    elsewhere = thread_payload(world, world.chatter.id, world.alice.id)
    threads = []
    for data in (started_by_bot, under_listened, elsewhere):
        world.state.parse_thread_create(data)
        threads.append(world.guild.get_thread(int(data["id"])))  # type: ignore[call-overload]
    for thread in threads:
        await world.say(thread, world.alice, f"in {thread.id}", guild_id=world.guild.id)
    await world.step(1.5)
    answered = sorted(m.channel.id for m in world.sent())
    assert answered == sorted([threads[0].id, threads[1].id])
    # A thread is its own conversation, apart from its parent channel.
    assert await store.conversation_state(world.key(threads[1]).id) is not None
    assert await store.conversation_state(world.key(world.listened).id) is None


async def test_typing_shows_once_the_burst_waited_past_the_delay_until_the_reply(
    store: SqliteStore, clock: FakeClock
) -> None:
    replier = ScriptedReplier(hold=True)
    world = await open_world(store, clock, replier)
    try:
        await world.say(world.listened, world.alice, "think hard")
        await world.step()
        await world.advance(1.5)
        await world.app.engine.run_due()
        call = await replier.next_call(0)
        assert world.typing_in == []  # a reply within the indicator delay would need none
        await world.advance(1.0)
        assert world.typing_in == [world.listened.id]
        for _ in range(3):  # the model takes 24 s more: the indicator is re-triggered every 8 s
            await world.advance(8)
        assert len(world.typing_in) == 4
        call.finish("done thinking")
        await world.app.engine.idle()
        assert [m.content for m in world.sent()] == ["done thinking"]
        assert world.frontend.typing.active() == set()
        await world.advance(60)
        assert len(world.typing_in) == 4
    finally:
        await close_world(world)


async def test_typing_never_outlives_its_bound(world: DiscordWorld) -> None:
    await world.say(world.listened, world.alice, "anyone?")  # no worker ever picks it up
    key = world.key(world.listened)
    await world.advance(3)  # quiet window and indicator delay
    assert world.frontend.typing.active() == {key.id}
    await world.advance(world.frontend.typing.max_seconds)
    assert world.frontend.typing.active() == set()
    count = len(world.typing_in)
    assert count == math.ceil(world.frontend.typing.max_seconds / 8)  # one at the start
    await world.advance(60)
    assert len(world.typing_in) == count


async def test_typing_stops_when_another_process_posted_the_reply(
    world: DiscordWorld, store: SqliteStore, clock: FakeClock
) -> None:
    # Two processes on one shard both see the burst; the other one answers (slowly) and posts it.
    other_platform = RecordingFrontend("discord")
    slow = ScriptedReplier(hold=True)
    other = build_serving(store, slow, clock, engine_settings(engine_config()),
                          "w2", {"discord": other_platform}).engine  # fmt: skip
    await world.say(world.listened, world.alice, "who answers?")
    await world.advance(1.5)
    await other.run_due()
    call = await slow.next_call(0)
    await world.advance(1.0)
    assert world.typing_in == [world.listened.id]
    call.finish("from the other process")
    await other.idle()
    assert other_platform.texts() == ["from the other process"]
    await world.advance(8)
    assert world.frontend.typing.active() == set()
    assert world.typing_in == [world.listened.id]
    await world.step(30)
    assert world.sent() == []


def fences_balanced(text: str) -> bool:
    return sum(1 for line in text.splitlines() if line.lstrip().startswith("```")) % 2 == 0


async def test_a_long_reply_is_split_with_balanced_fences_and_stable_nonces(
    store: SqliteStore, clock: FakeClock
) -> None:
    replier = ScriptedReplier(hold=True)
    world = await open_world(store, clock, replier)
    try:
        code = "\n".join(f"    step_{n}()  # do thing number {n}" for n in range(120))
        long_text = "Here is the plan.\n\n```python\n" + code + "\n```\n\nThat's all. " * 3
        await world.say(world.listened, world.alice, "write the script")
        await world.advance(1.5)
        await world.app.engine.run_due()
        (await replier.next_call(0)).finish(long_text)
        await world.app.engine.idle()
        parts = world.sent()
        assert len(parts) >= 3
        assert all(len(p.content) <= MESSAGE_LIMIT for p in parts)
        assert all(fences_balanced(p.content) for p in parts)
        assert parts[1].content.startswith("```python\n")
        assert re.findall(r"step_\d+", "".join(p.content for p in parts)) == [
            f"step_{n}" for n in range(120)
        ]
        [row] = await store.replies(world.key(world.listened).id)
        reply_id, key = f"r{row.id}", world.key(world.listened)
        nonces = [p.nonce for p in parts]
        assert nonces == [nonce_for(reply_id, key.id, i, p.content) for i, p in enumerate(parts)]
        assert len(set(nonces)) == len(nonces) and all(len(str(n)) <= 25 for n in nonces)

        # Asked again (a crash between posting and recording): nothing new is posted.
        reply = Reply(reply_id, key, long_text, row.covers_to_version)
        assert await world.frontend.deliver(reply) == list(row.platform_message_ids)
        assert world.sent() == []
    finally:
        await close_world(world)


async def test_a_channel_the_bot_cannot_post_in_marks_the_reply_failed(
    world: DiscordWorld, store: SqliteStore
) -> None:
    await backend_deny_send(world)
    await world.say(world.listened, world.alice, "hello?")
    await world.step(1.5)
    [row] = await store.replies(world.key(world.listened).id)
    assert row.state == "failed" and "403" in (row.last_error or "")
    assert world.sent() == []


async def backend_deny_send(world: DiscordWorld) -> None:
    # dpytest writes member overwrites with a string type discord.py 2.x ignores; the @everyone
    # overwrite is matched by id, so deny sending to everyone (the bot has no other role).
    everyone = world.guild.default_role
    backend.update_text_channel(
        world.listened, everyone, discord.PermissionOverwrite(send_messages=False)
    )


async def test_a_reply_longer_than_the_part_cap_is_truncated_with_a_note(
    store: SqliteStore, clock: FakeClock
) -> None:
    replier = ScriptedReplier(hold=True)
    config = DiscordConfig(enabled=True, max_parts_per_reply=2)
    world = await open_world(store, clock, replier, config)
    try:
        await world.say(world.listened, world.alice, "write a novel")
        await world.advance(1.5)
        await world.app.engine.run_due()
        (await replier.next_call(0)).finish("\n\n".join(f"chapter {n} " * 60 for n in range(40)))
        await world.app.engine.idle()
        parts = world.sent()
        assert len(parts) == 2 and all(len(p.content) <= MESSAGE_LIMIT for p in parts)
        assert parts[0].content.startswith("chapter 0 ")
        assert parts[1].content.endswith("\n" + TRUNCATED_NOTE)
        [row] = await store.replies(world.key(world.listened).id)
        assert row.state == "sent" and len(row.platform_message_ids) == 2
    finally:
        await close_world(world)
