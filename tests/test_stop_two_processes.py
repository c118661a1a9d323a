"""Stop clicked in two processes at once (G16): two `App`s with the real front ends on one
PostgreSQL database, the answer streaming in the first. The fake Slack delivers the same
`block_actions` to both (or two presses at once, one to each); the fake Discord's gateway delivers
the same interaction to both connections. Exactly one stop acts: one click row decided
`stopped`, one version step, one stopped answer in the one message; the other delivery is
answered with its ack alone, the other press is told it was already stopped.

The processes share the fake clock; the stop one of them decides is heard by the other at its
next poll (`poll_seconds`, stepped here), or at once when it is its own; a process that listens
for PostgreSQL's notifications (as `App.run` does) hears it at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest

from adapters.discord import DiscordFrontend
from bot.app import App
from bot.config import DiscordConfig
from bot.core.clicks import NOTICES
from storage.postgres import PostgresStore
from testkit import ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from testkit.engine import shut_down
from testkit.fake_discord import FakeDiscord, Json, frontend_for
from testkit.fake_slack import FakeSlackApi, dm
from tests import pg
from tests.clock_steps import step
from tests.heard import Heard
from tests.slack_harness import DM_KEY, Bot, api, running_bot, ts
from tests.test_discord_stop import (
    ALICE,
    CHANNEL,
    DEFERRED_UPDATE,
    GUILD,
    KEY,
    STOPPED,
    bots_messages,
    stop_button,
)
from tests.test_discord_streaming import INTERVAL, streaming_config
from tests.test_slack_stop import STOPPED as SLACK_STOPPED
from tests.test_slack_stop import deliver, streaming_draft
from tests.test_slack_streaming import answered, until

__all__ = ["api"]  # fixture

POLL_SECONDS = 1.0  # the engine's default: how soon a process sees another's stop


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    name = await pg.create_schema("burstbot_stop2")
    yield name
    await pg.drop_schema(name)


def shared_store(schema: str) -> PostgresStore:
    """One process's store on the shared database, on the caller's (fake) clock."""
    return PostgresStore(pg.dsn(), pool_size=3, clock="caller", schema=schema)


async def both_at_once(*deliveries: Callable[[], Any]) -> list[Any]:
    return list(await asyncio.gather(*(deliver() for deliver in deliveries)))


# Slack ----------------------------------------------------------------------------------------
@asynccontextmanager
async def two_slack_processes(api: FakeSlackApi, schema: str) -> AsyncIterator[tuple[Bot, Bot]]:
    clock = FakeClock()
    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(running_bot(
            api, clock=clock, replier=ScriptedReplier(hold=True), owner="w1",
            store=shared_store(schema)))  # fmt: skip
        second = await stack.enter_async_context(running_bot(
            api, clock=clock, replier=ScriptedReplier(hold=True), owner="w2",
            store=shared_store(schema)))  # fmt: skip
        yield first, second


async def stopped_in_one_message(first: Bot, api: FakeSlackApi) -> None:
    """The processes heard the stop (the first at once or at its next poll); the answer ended."""
    await step(first.clock, POLL_SECONDS)
    await answered(first)
    await until(lambda: [m.visible for m in api.posts()] == [SLACK_STOPPED])
    [message] = api.posts()
    assert message.buttons() == []
    assert [g.outcome for g in await first.store.generations(DM_KEY.id)] == ["stopped"]
    assert len(await first.store.replies(DM_KEY.id)) == 1
    await check_invariants(first.store, [DM_KEY.id])


async def test_slack_the_same_press_delivered_to_two_processes_stops_once(
    api: FakeSlackApi, schema: str
) -> None:
    async with two_slack_processes(api, schema) as (first, second):
        await deliver(first, api, "http", dm(ts(1), "what is the plan?"))
        call = await streaming_draft(first, api, "http", DM_KEY)
        [draft] = api.posts()
        payload = api.click(draft, "U1")
        statuses = await both_at_once(
            lambda: first.sender.interact(payload), lambda: second.sender.interact(payload)
        )
        assert statuses == [200, 200]
        [click] = await first.store.clicks(DM_KEY.id)  # one row: the click id is the press's
        assert click.outcome == "stopped"
        assert await first.store.current_version(DM_KEY.id) == 2  # the message, then one stop
        await stopped_in_one_message(first, api)
        assert call.cancelled
        assert api.ephemerals == []  # the other delivery got its ack alone
        assert second.replier.calls == []


async def test_slack_two_presses_at_once_in_two_processes_stop_once_and_tell_the_other(
    api: FakeSlackApi, schema: str
) -> None:
    async with two_slack_processes(api, schema) as (first, second):
        await deliver(first, api, "http", dm(ts(1), "what is the plan?"))
        call = await streaming_draft(first, api, "http", DM_KEY)
        [draft] = api.posts()
        one, other = api.click(draft, "U1"), api.click(draft, "U1")  # two presses: two ids
        statuses = await both_at_once(
            lambda: first.sender.interact(one), lambda: second.sender.interact(other)
        )
        assert statuses == [200, 200]
        outcomes = sorted(c.outcome or "" for c in await first.store.clicks(DM_KEY.id))
        assert outcomes == ["already_stopped", "stopped"]
        assert await first.store.current_version(DM_KEY.id) == 2
        await asyncio.wait_for(api.ephemeral_posted.wait(), 5)
        assert [e["text"] for e in api.ephemerals] == [NOTICES["already_stopped"]]
        await stopped_in_one_message(first, api)
        assert call.cancelled
        assert second.replier.calls == []


async def test_slack_a_press_on_the_process_not_generating_closes_the_stream_at_once(
    api: FakeSlackApi, schema: str
) -> None:
    """With the processes listening for hints as `App.run` makes them, the generating process
    hears the other's stop at once: no poll (the fake clock does not move) is needed."""
    async with two_slack_processes(api, schema) as (first, second):
        for process in (first, second):
            await process.store.listen(process.app.hint)
        heard = Heard()
        first.app.engine.subscribe(heard)
        await deliver(first, api, "http", dm(ts(1), "what is the plan?"))
        call = await streaming_draft(first, api, "http", DM_KEY)
        await heard.next("looked", since=0)  # its poll looked (the draft's step reached it)...
        [draft] = api.posts()
        assert await second.sender.interact(api.click(draft, "U1")) == 200
        await until(lambda: call.cancelled)  # ...and its next one is a second away: never here
        assert [c.outcome for c in await first.store.clicks(DM_KEY.id)] == ["stopped"]
        await answered(first)
        await until(lambda: [m.visible for m in api.posts()] == [SLACK_STOPPED])
        assert [g.outcome for g in await first.store.generations(DM_KEY.id)] == ["stopped"]
        assert second.replier.calls == []


# Discord --------------------------------------------------------------------------------------
@pytest.fixture
def fake(fake_discord: FakeDiscord) -> FakeDiscord:
    fake_discord.guilds.append(GUILD)
    fake_discord.add_channel(CHANNEL, "text", guild_id=GUILD)
    return fake_discord


@asynccontextmanager
async def discord_process(
    fake: FakeDiscord, schema: str, clock: FakeClock, owner: str
) -> AsyncIterator[tuple[App, DiscordFrontend, PostgresStore]]:
    """One process: its own gateway connection, front end, engine and pool on the database."""
    store = shared_store(schema)
    await store.open()
    front = frontend_for(fake, clock, DiscordConfig(enabled=True, listen_channels=[str(CHANNEL)]))
    app = App(streaming_config(), store, ScriptedReplier(hold=True), [front], clock=clock,
              owner=owner)  # fmt: skip
    try:
        await front.start(app)
        yield app, front, store
    finally:
        await shut_down(app.engine)
        await front.stop()
        await store.close()


async def test_discord_the_same_interaction_delivered_to_two_processes_stops_once(
    fake: FakeDiscord, schema: str
) -> None:
    clock = FakeClock()
    async with (
        discord_process(fake, schema, clock, "w1") as (first, _, store),
        discord_process(fake, schema, clock, "w2") as (second, _, _),
    ):
        await until(lambda: len(fake._identified) == 2)  # both connections get every event
        await fake.dispatch("MESSAGE_CREATE", fake.message(CHANNEL, ALICE, "what is the plan?",
                                                           guild_id=str(GUILD)))  # fmt: skip
        async with asyncio.timeout(5.0):
            while await store.conversation_state(KEY.id) is None:  # noqa: ASYNC110
                await asyncio.sleep(0.005)
        await clock.advance(1.5)
        await first.engine.run_due()
        replier = first.engine.replier
        assert isinstance(replier, ScriptedReplier)
        call = await replier.next_call(0)
        call.stream(2, "The plan is")
        await step(clock, INTERVAL)
        await until(lambda: len(fake.created) == 1)
        draft = fake.created[0]
        payload = fake.click(draft["id"], stop_button(draft)["custom_id"], ALICE)
        await fake.dispatch("INTERACTION_CREATE", payload)  # to both connections at once

        def answers() -> list[Json]:
            return [c for c in fake.callbacks if c["interaction_id"] == payload["id"]]

        await until(lambda: len(answers()) == 2)
        assert [c["type"] for c in answers()] == [DEFERRED_UPDATE, DEFERRED_UPDATE]  # no notice
        assert sorted(c["refused"] for c in answers()) == [False, True]  # Discord takes one
        [click] = await store.clicks(KEY.id)
        assert click.outcome == "stopped"
        assert await store.current_version(KEY.id) == 2  # the message, then one stop
        await step(clock, POLL_SECONDS)
        await step(clock, INTERVAL)
        await first.engine.idle()
        await until(lambda: bots_messages(fake)[0]["components"] == [])
        assert [m["content"] for m in bots_messages(fake)] == [STOPPED]
        assert call.cancelled
        assert [g.outcome for g in await store.generations(KEY.id)] == ["stopped"]
        assert len(await store.replies(KEY.id)) == 1
        second_replier = second.engine.replier
        assert isinstance(second_replier, ScriptedReplier) and second_replier.calls == []
        await check_invariants(store, [KEY.id])
