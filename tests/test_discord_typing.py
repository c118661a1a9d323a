"""Typing-aware quiet window on Discord: real discord.py against the fake Discord, fake clock.

Someone sends a message, types the next one for a few seconds, then sends it: with the typing
intent, their TYPING_START keeps the burst open past the quiet window (never past the deadline),
so one reply covers both messages.
"""

from __future__ import annotations

from typing import Any

import pytest

from adapters.discord import DiscordFrontend
from adapters.discord.client import gateway_intents
from bot.app import App
from bot.config import parse_config
from bot.core.events import ConversationKey
from storage.sqlite import SqliteStore
from testkit import ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from testkit.engine import shut_down
from testkit.fake_discord import FakeDiscord, frontend_for
from tests.test_discord_wire import ALICE, DM_ID, eventually

BOB = {"id": "200000000000000002", "username": "bob", "discriminator": "0",
       "global_name": "Bob", "avatar": None}  # fmt: skip
DM_KEY = ConversationKey("discord", "dm", str(DM_ID))
STEP = 0.25


def config(**debounce: Any) -> Any:
    return parse_config({
        "llm": {"provider": "offline"}, "console": {"enabled": False},
        "debounce": {"quiet_seconds": 1.0, "max_wait_seconds": 8.0, "adaptive": False,
                     "speculate": False, **debounce},  # run_for steps the fixed window
    })  # fmt: skip


@pytest.fixture
def fake(fake_discord: FakeDiscord) -> FakeDiscord:
    return fake_discord


async def started(
    fake: FakeDiscord, store: SqliteStore, clock: FakeClock, typing_aware: bool = True
) -> tuple[App, DiscordFrontend]:
    front = frontend_for(fake, clock, intents=gateway_intents(typing=typing_aware))
    app = App(config(typing_aware=typing_aware), store, ScriptedReplier(), [front], clock=clock)
    await front.start(app)
    return app, front


async def stored_version(store: SqliteStore, version: int) -> None:
    async def reached() -> bool:
        state = await store.conversation_state(DM_KEY.id)
        return state is not None and state.version == version

    await eventually(reached)


async def due_at(store: SqliteStore) -> float | None:
    state = await store.conversation_state(DM_KEY.id)
    return None if state is None or state.timer is None else state.timer.due_at


async def run_for(app: App, clock: FakeClock, seconds: float) -> None:
    """Let `seconds` pass on the fake clock in small steps, serving whatever falls due."""
    for _ in range(round(seconds / STEP)):
        await clock.advance(STEP)
        await app.engine.run_due()
        await app.engine.idle()


async def typing_between_two_messages(
    fake: FakeDiscord, store: SqliteStore, clock: FakeClock, typing_aware: bool
) -> list[str]:
    """Alice says one thing, types for 4 s (1 s quiet window), says the rest; the replies."""
    app, front = await started(fake, store, clock, typing_aware)
    try:
        start = clock.now()
        await fake.dispatch("MESSAGE_CREATE", fake.message(DM_ID, ALICE, "so about the deploy"))
        await stored_version(store, 1)
        await run_for(app, clock, 0.25)
        sent = await fake.typing_start(DM_ID, ALICE)
        assert sent == typing_aware  # the fake sends typing only to a bot with the intent
        if sent:
            await eventually(lambda: _timer_after(store, start + 1.0))
        await run_for(app, clock, 3.75)  # four seconds after the first message
        await fake.dispatch("MESSAGE_CREATE", fake.message(DM_ID, ALICE, "is it done yet?"))
        await stored_version(store, 2)
        await run_for(app, clock, 1.5)
        await check_invariants(store, [DM_KEY.id])
        return [m["request"]["content"] for m in fake.created]
    finally:
        await shut_down(app.engine)
        await front.stop()


async def _timer_after(store: SqliteStore, moment: float) -> bool:
    due = await due_at(store)
    return due is not None and due > moment


async def test_typing_between_two_messages_gets_one_reply_covering_both(
    fake: FakeDiscord, store: SqliteStore, clock: FakeClock
) -> None:
    replies = await typing_between_two_messages(fake, store, clock, typing_aware=True)
    assert replies == ["reply to: so about the deploy | is it done yet?"]


async def test_without_typing_awareness_the_quiet_window_answers_the_first_message_alone(
    fake: FakeDiscord, store: SqliteStore, clock: FakeClock
) -> None:
    """The same conversation with `typing_aware = false`: no typing intent, two replies."""
    replies = await typing_between_two_messages(fake, store, clock, typing_aware=False)
    assert replies == ["reply to: so about the deploy", "reply to: is it done yet?"]


async def test_typing_never_holds_a_burst_past_its_deadline(
    fake: FakeDiscord, store: SqliteStore, clock: FakeClock
) -> None:
    """Typing that never ends: the reply comes at the deadline (8 s after the first message)."""
    app, front = await started(fake, store, clock)
    try:
        start = clock.now()
        await fake.dispatch("MESSAGE_CREATE", fake.message(DM_ID, ALICE, "thinking out loud"))
        await stored_version(store, 1)
        for _ in range(8):
            await fake.typing_start(DM_ID, ALICE)
            await eventually(lambda: _timer_after(store, start + 1.0))
            assert await due_at(store) == start + 8.0  # capped by the deadline
            await run_for(app, clock, 1.0)
        await fake.wait_for(lambda: len(fake.created) == 1)
        assert clock.now() - start == 8.0
    finally:
        await shut_down(app.engine)
        await front.stop()


async def test_a_typing_notice_stores_nothing_without_pending_input_from_its_author(
    fake: FakeDiscord, store: SqliteStore, clock: FakeClock
) -> None:
    app, front = await started(fake, store, clock)
    seen: list[str] = []
    app.subscribe(lambda name, _fields: seen.append(name))
    try:
        assert await fake.typing_start(DM_ID, ALICE)  # no conversation yet
        await fake.dispatch("MESSAGE_CREATE", fake.message(DM_ID, ALICE, "hello"))
        await stored_version(store, 1)
        assert (await store.conversation_state(DM_KEY.id)) is not None
        before = await due_at(store)
        assert await fake.typing_start(DM_ID, BOB)  # not an author of the pending burst
        await fake.dispatch("MESSAGE_CREATE", fake.message(DM_ID, ALICE, "marker"))
        await stored_version(store, 2)  # events arrive in order: both typings were handled
        assert "typing" not in seen
        assert before is not None and await due_at(store) == clock.now() + 1.0
        await run_for(app, clock, 1.0)
        await fake.wait_for(lambda: len(fake.created) == 1)
        assert await fake.typing_start(DM_ID, ALICE)  # answered: nothing pending any more
        await fake.dispatch("MESSAGE_CREATE", fake.message(DM_ID, BOB, "late marker"))
        await stored_version(store, 3)
        assert "typing" not in seen
    finally:
        await shut_down(app.engine)
        await front.stop()
