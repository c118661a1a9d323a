"""👍/👎 votes in the engine (bot/core/votes.py): which answers carry the buttons (`[feedback]`,
per channel), and a press stored and decided once before the front end answers. On the fake
clock, a real SQLite store and a recording front end."""

from __future__ import annotations

from bot.cli.explain import explain_lines
from bot.core.clicks import Click
from bot.core.engine import Engine
from bot.core.errors import RetryableReplierError
from bot.core.events import ConversationKey
from bot.core.settings import ChannelSettings
from bot.core.votes import Vote, VoteValue, vote_target
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock
from tests.conftest import KEY, make_engine, message
from tests.heard import Heard
from tests.test_engine import tick
from tests.test_stop import drafting, stop_click
from tests.test_streaming import answered

OTHER = ConversationKey("test", "w1", "c2")


def press(reply_id: str, value: VoteValue, at: float, voter: str = "u1", n: str = "") -> Vote:
    click_id = f"{reply_id}-{voter}-{value}-{at}{n}"
    click = Click(click_id, KEY, "vote", vote_target(reply_id, value), voter, voter)
    return Vote(click, reply_id, value, at)


async def answer_of(engine: Engine, clock: FakeClock, store: SqliteStore, key: ConversationKey):  # type: ignore[no-untyped-def]
    await engine.ingest(message(f"{key.channel}-1", key=key))
    await tick(engine, clock, 1.5)
    [row] = await store.replies(key.id)
    return row


async def test_an_answer_carries_the_buttons_and_a_channel_may_turn_them_off(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    quiet = ChannelSettings("test", "c2", {"feedback": False})
    engine = make_engine(store, clock, ScriptedReplier(), frontend, channels=(quiet,))
    assert (await answer_of(engine, clock, store, KEY)).feedback is True
    assert (await answer_of(engine, clock, store, OTHER)).feedback is False


async def test_no_buttons_anywhere_when_feedback_is_off(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    loud = ChannelSettings("test", "c2", {"feedback": True})
    replier = ScriptedReplier()
    engine = make_engine(store, clock, replier, frontend, feedback=False, channels=(loud,))
    assert (await answer_of(engine, clock, store, KEY)).feedback is False
    assert (await answer_of(engine, clock, store, OTHER)).feedback is True


async def test_an_apology_and_a_stopped_answer_carry_no_buttons(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    replier.failures = [RetryableReplierError("overloaded")]
    engine = make_engine(store, clock, replier, frontend, model_max_attempts=1)
    apology = await answer_of(engine, clock, store, KEY)
    assert apology.kind == "apology" and apology.feedback is False

    stopped_store = SqliteStore(":memory:")
    await stopped_store.open()
    try:
        _, stopping, _ = await drafting(stopped_store, clock, "Half")
        await stopping.click(await stop_click(stopped_store), admin=False)
        await answered(stopping, clock)
        [row] = await stopped_store.replies(KEY.id)
        assert row.text.endswith("_(stopped by alice)_") and row.feedback is False
    finally:
        await stopped_store.close()


async def test_a_vote_is_decided_before_the_answer_and_heard_once(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    engine = make_engine(store, clock, ScriptedReplier(), frontend)
    heard = Heard()
    engine.subscribe(heard)
    row = await answer_of(engine, clock, store, KEY)
    reply = f"r{row.id}"
    first = await engine.vote(press(reply, "up", 10.0))
    again = await engine.vote(press(reply, "up", 10.0))
    changed = await engine.vote(press(reply, "down", 11.0))
    late = await engine.vote(press(reply, "up", 10.5, n="-redelivered"))
    assert [a.outcome for a in (first, again, changed, late)] == [
        "voted",
        "duplicate",
        "voted",
        "outdated",
    ]
    assert first.notice is None and late.notice is None
    assert [v.value for v in await store.votes(KEY.id)] == ["down"]
    assert heard.count("voted") == 4
    assert (await engine.vote(press("r999", "up", 12.0))).notice == "That answer cannot be rated."


async def test_explain_shows_the_buttons_each_press_and_the_votes_standing(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    engine = make_engine(store, clock, ScriptedReplier(), frontend)
    row = await answer_of(engine, clock, store, KEY)
    reply = f"r{row.id}"
    await engine.vote(press(reply, "up", 10.0, voter="u1"))
    await engine.vote(press(reply, "down", 11.0, voter="u1"))
    await engine.vote(press(reply, "up", 10.5, voter="u1", n="-late"))
    await engine.vote(press(reply, "up", 10.0, voter="u2"))
    lines = await explain_lines(store, KEY.id, clock.now())
    assert lines is not None
    assert any(f"reply {reply} [👍/👎] committed" in line for line in lines), lines
    votes = [line[line.index("clicked") :] for line in lines if "clicked   vote" in line]
    assert sorted(votes) == sorted([
        f"clicked   vote 👍 on {reply} by u1: counted",
        f"clicked   vote 👎 on {reply} by u1: counted",
        f"clicked   vote 👍 on {reply} by u1: older than the vote standing, nothing changed",
        f"clicked   vote 👍 on {reply} by u2: counted",
    ])  # fmt: skip
    assert lines[-1] == f"votes: {reply} 👍 1 👎 1"
