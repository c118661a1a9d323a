"""Cost guards: each limit refuses without a model call, notices once per window, loses nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.cli.explain import explain_lines
from bot.config import MAX_MESSAGE_CHARS
from bot.core.events import ConversationKey, IncomingMessage
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from tests.apps import make_app, post_outbox, step

KEY = ConversationKey("test", "w1", "c1")
OTHER = ConversationKey("test", "w1", "c2")
NOTICES = {
    "rate_notice": "slow down",
    "size_notice": "too long",
    "budget_notice": "budget spent",
}
counter = iter(range(1_000_000))


def msg(author: str = "U1", text: str = "hi", key: ConversationKey = KEY) -> IncomingMessage:
    return IncomingMessage(key, f"m{next(counter)}", author, author, text)


async def test_rate_limit_refuses_before_storage_and_notices_once_per_window(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    limits = {"user_messages_per_window": 2, "window_seconds": 60, **NOTICES}
    app = make_app(store, clock, replier, frontend, limits=limits)
    clock.jump(-(clock.now() % 60))  # start of a window
    statuses = [(await app.ingest(msg(text=f"t{n}"))).status for n in range(4)]
    assert statuses == ["accepted", "accepted", "ignored", "ignored"]
    assert (await app.ingest(msg("U2", key=OTHER))).status == "accepted"  # per user
    await post_outbox(app)
    assert frontend.texts(KEY) == ["slow down"]  # one notice for two refusals
    await step(app, clock)
    assert sorted(c.texts for c in replier.calls) == [["hi"], ["t0", "t1"]]
    assert (await store.conversation_state(KEY.id)).version == 2  # type: ignore[union-attr]
    await clock.advance(60)  # a new window
    assert (await app.ingest(msg(text="later"))).status == "accepted"
    await check_invariants(store, [KEY.id, OTHER.id], quiescent=False)


async def test_a_repeat_delivery_is_never_counted_and_a_refused_ones_repeat_stays_refused(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Two processes on one database each get one delivery of every message (Slack's
    `app_mention`/`message` twins, a retry, a second connection on one shard)."""
    stores = [SqliteStore(str(tmp_path / "shared.db")) for _ in range(2)]
    for store in stores:
        await store.open()
    fronts = [RecordingFrontend(), RecordingFrontend()]
    limits = {"user_messages_per_window": 2, "max_message_chars": 20, "window_seconds": 60}
    limits.update(NOTICES)
    a, b = (make_app(stores[n], clock, ScriptedReplier(), fronts[n], limits=limits) for n in (0, 1))
    clock.jump(-(clock.now() % 60))  # start of a window
    m1, m2, m3 = msg(text="one"), msg(text="two"), msg(text="three")
    statuses = [
        (await app.ingest(m)).status for app, m in [(a, m1), (b, m1), (b, m2), (a, m2), (a, m3)]
    ]
    assert statuses == ["accepted", "duplicate", "accepted", "duplicate", "ignored"]
    assert (await b.ingest(m3)).status == "duplicate"  # refused where it first came: not stored
    await post_outbox(a)  # either process may post it: here, a's sweep runs
    assert fronts[0].texts(KEY) == ["slow down"] and fronts[1].texts(KEY) == []
    stored = await stores[0].messages(KEY.id)
    assert [m.text for m in stored] == ["one", "two"]
    await clock.advance(60)  # a new window; two deliveries of one message at once
    m4 = msg(text="four")
    both = await asyncio.gather(a.ingest(m4), b.ingest(m4))
    assert sorted(r.status for r in both) == ["accepted", "duplicate"]
    assert (await a.ingest(msg(text="five"))).status == "accepted"  # m4 counted once
    await post_outbox(a)
    assert fronts[0].texts(KEY) == ["slow down"] and fronts[1].texts(KEY) == []
    too_long = msg(text="x" * 21)
    assert (await a.ingest(too_long)).status == "ignored"
    await clock.advance(60)  # its notice window is over: a repeat must still not notice again
    assert (await b.ingest(too_long)).status == "duplicate"
    await post_outbox(a)
    assert fronts[0].texts(KEY) == ["slow down", "too long"] and fronts[1].texts(KEY) == []
    for store in stores:
        await store.close()


async def test_message_size_cap_refuses_with_a_notice(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    app = make_app(store, clock, replier, frontend, limits={"max_message_chars": 10, **NOTICES})
    assert (await app.ingest(msg(text="x" * 11))).status == "ignored"
    assert (await app.ingest(msg(text="x" * 10))).status == "accepted"
    await step(app, clock)
    assert [c.texts for c in replier.calls] == [["x" * 10]]
    assert frontend.texts(KEY)[0] == "too long"


async def test_burst_caps_answer_with_the_notice_and_no_model_call(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    limits = {"max_burst_messages": 2, "max_burst_chars": 12, "window_seconds": 60, **NOTICES}
    app = make_app(store, clock, replier, frontend, limits=limits)
    for text in ("a", "b", "c"):  # three messages: over the message cap
        await app.ingest(msg(text=text))
    await step(app, clock)
    assert replier.calls == []
    assert frontend.texts() == ["too long"]
    [notice] = await store.replies(KEY.id)
    assert (notice.kind, notice.covers_to_version, notice.state) == ("apology", 3, "sent")
    await app.ingest(msg(text="1234567"))
    await app.ingest(msg(text="1234567"))  # 14 characters: over the character cap
    await step(app, clock)
    assert replier.calls == [] and frontend.texts() == ["too long"]  # silent: noticed already
    records = await store.generations(KEY.id)
    assert [(g.outcome, g.error) for g in records] == [
        ("skipped", "burst_too_many_messages"),
        ("skipped", "burst_too_long"),
    ]
    state = await store.conversation_state(KEY.id)
    assert state is not None and state.answered_version == state.version == 5
    await app.ingest(msg(text="ok"))
    await step(app, clock)
    assert [c.texts for c in replier.calls] == [["ok"]]
    await check_invariants(store, [KEY.id])


async def test_user_budget_stops_that_user_until_the_next_day(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()  # charges len("U1: hi") + 5 = 11 tokens a burst
    app = make_app(store, clock, replier, frontend, limits={"user_daily_tokens": 10, **NOTICES})
    clock.jump(-(clock.now() % 86_400) + 3600)  # 01:00 UTC
    await app.ingest(msg())
    await step(app, clock)
    await app.ingest(msg())
    await app.ingest(msg("U2", key=OTHER))
    await step(app, clock)
    assert len(replier.calls) == 2  # U1's first burst, then U2's; U1's second was refused
    assert frontend.texts(KEY) == ["reply to: hi", "budget spent"]
    await app.ingest(msg())
    await step(app, clock)
    assert len(replier.calls) == 2 and frontend.texts(KEY)[-1] == "budget spent"  # silent
    assert len(frontend.texts(KEY)) == 2
    await clock.advance(86_400)
    await app.ingest(msg())
    await step(app, clock)
    assert len(replier.calls) == 3
    await check_invariants(store, [KEY.id, OTHER.id])


async def test_global_budget_stops_everyone(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    app = make_app(store, clock, replier, frontend, limits={"global_daily_tokens": 10, **NOTICES})
    await app.ingest(msg())
    await step(app, clock)
    await app.ingest(msg("U2", key=OTHER))
    await step(app, clock)
    assert len(replier.calls) == 1
    assert frontend.texts(OTHER) == ["budget spent"]
    await check_invariants(store, [KEY.id, OTHER.id])


async def test_channel_budget_stops_the_channel_and_its_threads_not_other_channels(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()  # 11 tokens a burst
    limits = {"channel_daily_tokens": 10, **NOTICES}
    app = make_app(store, clock, replier, frontend, limits=limits)
    thread = ConversationKey("test", "w1", "c1", "t1")  # same channel, another conversation
    await app.ingest(msg())
    await step(app, clock)
    await app.ingest(msg("U2", key=thread))
    await app.ingest(msg("U2", key=OTHER))
    await step(app, clock)
    assert len(replier.calls) == 2  # c1's first burst and c2's; the thread in c1 was refused
    assert frontend.texts(thread) == ["budget spent"]
    assert frontend.texts(OTHER) == ["reply to: hi"]
    await check_invariants(store, [KEY.id, thread.id, OTHER.id])


async def test_workspace_budget_stops_the_workspace_not_another_one(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()  # 11 tokens a burst
    app = make_app(store, clock, replier, frontend,
                   limits={"workspace_daily_tokens": 10, **NOTICES})  # fmt: skip
    elsewhere = ConversationKey("test", "w2", "c1")
    await app.ingest(msg())
    await step(app, clock)
    await app.ingest(msg("U2", key=OTHER))  # another channel of the same workspace
    await app.ingest(msg("U2", key=elsewhere))
    await step(app, clock)
    assert len(replier.calls) == 2
    assert frontend.texts(OTHER) == ["budget spent"]
    assert frontend.texts(elsewhere) == ["reply to: hi"]
    await check_invariants(store, [KEY.id, OTHER.id, elsewhere.id])


def test_the_defaults_cap_each_user_and_channel_per_day() -> None:
    """Anyone who can message the bot spends the API key: the defaults bound it."""
    from bot.config import CHANNEL_DAILY_TOKENS, USER_DAILY_TOKENS, LimitsConfig

    limits = LimitsConfig()
    assert limits.user_daily_tokens == USER_DAILY_TOKENS > 0
    assert limits.channel_daily_tokens == CHANNEL_DAILY_TOKENS > USER_DAILY_TOKENS
    assert limits.global_daily_tokens == 0  # off unless set: it would stop everyone at once


async def test_admins_are_exempt_from_per_user_limits(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    limits = {"user_messages_per_window": 1, "max_message_chars": 3, "max_burst_messages": 1}
    app = make_app(store, clock, replier, frontend, limits=limits, access={"admin_ids": ["boss"]})
    for _ in range(3):
        assert (await app.ingest(msg("boss", text="a long message"))).status == "accepted"
    await step(app, clock)
    assert [len(c.texts) for c in replier.calls] == [3]


async def test_wasted_tokens_of_a_superseded_stream_count_against_the_budget(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier(hold=True)
    app = make_app(store, clock, replier, frontend, limits={"global_daily_tokens": 100})
    await app.ingest(msg(text="first"))
    await clock.advance(2)
    await app.engine.run_due()
    call = await replier.next_call(0)
    call.stream(150)
    await app.ingest(msg(text="second"))  # supersedes: 150 tokens paid for nothing
    await app.engine.idle()
    await clock.advance(2)
    await app.engine.run_due()
    await app.engine.idle()
    assert len(replier.calls) == 1  # the budget is spent: no second call
    [notice] = await store.replies(KEY.id)
    assert notice.kind == "apology" and notice.covers_to_version == 2


async def test_messages_are_capped_by_default(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    """A megabyte pasted into a chat never reaches the model unless the operator allows it."""
    replier = ScriptedReplier()
    app = make_app(store, clock, replier, frontend)
    assert app.guards is not None and app.config.limits.max_message_chars == MAX_MESSAGE_CHARS
    assert (await app.ingest(msg(text="x" * 1_000_000))).status == "ignored"
    assert (await app.ingest(msg(text="x" * MAX_MESSAGE_CHARS))).status == "accepted"
    await step(app, clock)
    assert [len(c.texts[0]) for c in replier.calls] == [MAX_MESSAGE_CHARS]
    every_limit_off = {"max_message_chars": 0, "user_daily_tokens": 0, "channel_daily_tokens": 0}
    off = make_app(store, clock, ScriptedReplier(), frontend, limits=every_limit_off)
    assert off.guards is None


async def test_a_notice_is_an_outbox_row_posted_once_even_after_a_crash_before_its_post(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The process that refused a message dies before posting its notice: the notice is already
    a reply row, so the next process posts it, once; the platform's retry of the refused message
    adds nothing, and the notice covers no message."""
    path = str(tmp_path / "shared.db")
    limits = {"max_message_chars": 10, **NOTICES}
    crashed_store, survivor_store = SqliteStore(path), SqliteStore(path)
    await crashed_store.open()
    crashed_front = RecordingFrontend()
    crashed = make_app(crashed_store, clock, ScriptedReplier(), crashed_front, limits=limits)
    too_long = msg(text="x" * 11)
    assert (await crashed.ingest(too_long)).status == "ignored"
    await crashed_store.close()  # killed: its sweep never ran
    assert crashed_front.posts == []
    await survivor_store.open()
    front = RecordingFrontend()
    survivor = make_app(survivor_store, clock, ScriptedReplier(), front, limits=limits)
    await post_outbox(survivor)
    assert (await survivor.ingest(too_long)).status == "duplicate"  # the platform retries it
    await post_outbox(survivor)
    assert [p.text for p in front.posts] == ["too long"]
    [notice] = await survivor_store.replies(KEY.id)
    assert (notice.kind, notice.state, notice.reply_to_message_id) == (
        "notice", "sent", too_long.message_id
    )  # fmt: skip
    assert await survivor_store.pending_messages(KEY.id, 0, 10) == []  # nothing refused stored
    lines = await explain_lines(survivor_store, KEY.id, clock.now()) or []
    assert any(f"[notice] committed, covers nothing (answers {too_long.message_id})" in line
               for line in lines)  # fmt: skip
    assert (await survivor.ingest(msg(text="short"))).status == "accepted"
    await step(survivor, clock)
    assert [p.text for p in front.posts][:1] == ["too long"] and len(front.posts) == 2
    await check_invariants(survivor_store, [KEY.id], frontend=front)
    await survivor_store.close()
