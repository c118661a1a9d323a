"""Retention in a running app (fake clock) and `burstbot forget` from the command line."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path

import pytest

from bot.config import parse_config
from bot.core.clicks import Click
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.votes import Vote, vote_target
from bot.ops.retention import forget
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from tests.apps import make_app, step
from tests.on_disk import holding
from tests.test_cli import burstbot

KEY = ConversationKey("test", "w1", "c1")
DAY = 86_400.0


def said(n: int, author: str = "u1", key: ConversationKey = KEY) -> IncomingMessage:
    return IncomingMessage(key, f"m{n}", author, author, f"text {n}")


async def test_the_running_app_sweeps_old_text_on_its_clock_and_logs_it(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = make_app(
        store, clock, ScriptedReplier(), frontend,
        retention={"max_age_days": 1.5, "sweep_seconds": DAY}, catch_up={"max_age_hours": 24},
    )  # fmt: skip
    assert app.retention is not None
    await app.ingest(said(1))
    await step(app, clock)
    assert frontend.texts() == ["reply to: text 1"]
    retention = app.retention

    async def swept(count: int) -> None:  # bounded wait for the store's I/O, not for time
        async with asyncio.timeout(5):
            while retention.sweeps < count:  # noqa: ASYNC110
                await asyncio.sleep(0.005)

    with caplog.at_level(logging.INFO, "burstbot.retention"):
        sweeper = asyncio.create_task(retention.run())
        await swept(1)  # the first sweep, at start
        await clock.advance(DAY)  # the second, a day later on the engine's clock
        await swept(2)
        assert len(await store.messages(KEY.id)) == 1  # a day old: kept
        await app.ingest(said(2))  # pending when the next sweep runs: kept
        await clock.advance(DAY)  # the third: the first burst is two days old now
        await swept(3)
        sweeper.cancel()
        await asyncio.gather(sweeper, return_exceptions=True)
    assert [m.text for m in await store.messages(KEY.id)] == ["text 2"]
    assert await store.replies(KEY.id) == [] and await store.generations() == []
    assert "older than 1.5 days: 1 messages, 1 replies, 1 generations" in caplog.text
    await step(app, clock)
    assert frontend.texts() == ["reply to: text 1", "reply to: text 2"]
    await check_invariants(store, [KEY.id])


async def test_by_default_text_is_kept_and_only_file_bytes_expire(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    app = make_app(store, clock, ScriptedReplier(), frontend)
    await app.ingest(said(1))
    await step(app, clock)
    await clock.advance(400 * DAY)
    assert app.retention is not None
    assert await app.retention.sweep() == {"files": 0, "blobs": 0}  # files: 30 days by default
    assert len(await store.messages(KEY.id)) == 1
    off = make_app(store, clock, ScriptedReplier(), frontend, retention={"file_max_age_days": 0})
    assert off.retention is not None and await off.retention.sweep() is None


def test_retention_shorter_than_catch_up_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"retention\.max_age_days must be longer than catch_up"):
        parse_config({"retention": {"max_age_days": 0.5}})
    parse_config({"retention": {"max_age_days": 0.5}, "catch_up": {"enabled": False}})


async def prepared(path: Path) -> None:
    store = SqliteStore(str(path))
    await store.open()
    try:
        clock, frontend = FakeClock(), RecordingFrontend()
        app = make_app(store, clock, ScriptedReplier(), frontend)
        await app.ingest(said(1, "alice"))
        await app.ingest(said(2, "bob"))
        await step(app, clock)
    finally:
        await store.close()


def stored_text(folder: Path) -> tuple[list[str], list[str]]:
    with sqlite3.connect(folder / "burstbot.db") as db:
        messages = [r[0] for r in db.execute("SELECT text FROM messages ORDER BY seq")]
        replies = [r[0] for r in db.execute("SELECT text FROM replies ORDER BY id")]
    return messages, replies


async def test_forget_user_during_a_generation_posts_nothing_that_quotes_them(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    """The answer under way when a person is erased is dropped; the one posted answers the rest
    of the burst from a prompt without the erased text."""
    replier = ScriptedReplier(hold=True)
    app = make_app(store, clock, replier, frontend)
    await app.ingest(said(1, "alice"))
    await app.ingest(said(2, "bob"))
    await clock.advance(2.0)
    await app.engine.run_due()
    first = await replier.next_call(0)
    assert first.texts == ["text 1", "text 2"]
    await store.forget_user("alice", None, clock.now())
    first.finish("alice wrote text 1")
    await app.engine.idle()
    await app.engine.run_due()
    second = await replier.next_call(1)
    assert second.texts == ["text 2"]
    second.finish("an answer for bob")
    await app.engine.idle()
    await app.engine.outbox.deliver_due()
    await app.engine.idle()
    assert frontend.texts() == ["an answer for bob"]
    assert [r.text for r in await store.replies(KEY.id)] == ["an answer for bob"]
    await check_invariants(store, [KEY.id])


def test_forget_from_the_command_line(tmp_path: Path) -> None:
    asyncio.run(prepared(tmp_path / "burstbot.db"))
    user = burstbot(["forget", "--user", "test:bob"], tmp_path)  # the burst's last author
    assert user.returncode == 0, user.stderr
    line = (
        "forget user test:bob: erased 1 messages, 0 held, 1 generations, 0 actions, 0 cards, "
        "0 votes, 0 clicks, 0 files"
    )
    assert user.stdout.strip() == line
    assert line in user.stderr  # logged too (a warning: the default level shows it)
    assert stored_text(tmp_path) == (["text 1", ""], ["reply to: text 1 | text 2"])
    conversation = burstbot(["forget", "--conversation", KEY.id], tmp_path)
    assert conversation.stdout.strip() == (
        f"forget conversation {KEY.id}: erased 1 messages, 1 replies, 0 held, 0 generations, "
        "0 actions, 0 votes, 0 clicks, 0 files, 0 unsent replies kept"
    )
    assert stored_text(tmp_path) == (["", ""], [""])
    neither = burstbot(["forget"], tmp_path)
    assert neither.returncode == 2


def marked(n: int, author: str, marker: str, key: ConversationKey = KEY) -> IncomingMessage:
    return IncomingMessage(key, f"m{n}", author, author, f"{author} writes {marker}")


def named(n: int, author: str, name: str) -> IncomingMessage:
    """The person's name is the marker: `forget --user` erases it, and the reply (the bot's own,
    which quotes the text) does not repeat it."""
    return IncomingMessage(KEY, f"m{n}", author, name, "a text the reply quotes")


OTHER = ConversationKey("test", "w1", "c2")


async def voted(store: SqliteStore, key: ConversationKey, voter: str, name: str, now: float) -> str:
    """A 👍 by `voter`, shown as `name`, on the conversation's answer."""
    [reply] = await store.replies(key.id)
    target = f"r{reply.id}"
    click = Click(f"{voter}-press", key, "vote", vote_target(target, "up"), voter, name)
    return await store.vote(Vote(click, target, "up", now), now)


async def test_each_erase_leaves_none_of_its_text_on_disk_while_the_store_is_open(
    tmp_path: Path, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    """Read from the database file, its write-ahead log and its shared memory while the store
    is open: a clean stop would fold the log back and hide what a crash leaves."""
    path = tmp_path / "burstbot.db"
    store = SqliteStore(str(path))
    await store.open()
    try:
        app = make_app(store, clock, ScriptedReplier(), frontend)
        await app.ingest(named(1, "alice", "alice-marker-40d1"))
        await app.ingest(marked(2, "bob", "bob-marker-8a37"))
        await app.ingest(marked(3, "carol", "carol-marker-c5e0", OTHER))
        await step(app, clock)
        for key, voter, name in (
            (KEY, "dave", "dave-marker-91b2"),  # forgotten as a person
            (KEY, "erin", "erin-marker-3f6c"),  # with the conversation
            (OTHER, "frank", "frank-marker-d04e"),  # by the sweep
        ):
            assert await voted(store, key, voter, name, clock.now()) == "voted"
        assert holding(path, "alice-marker-40d1") != []  # stored, and the bytes are readable
        assert holding(path, "dave-marker-91b2") != []
        await forget(store, clock.now(), "test:alice", None)
        assert holding(path, "alice-marker-40d1") == []
        await forget(store, clock.now(), "test:dave", None)
        assert holding(path, "dave-marker-91b2") == []  # the vote's and the click's name
        assert holding(path, "bob-marker-8a37") != []  # bob's text, and the reply quoting it
        assert holding(path, "erin-marker-3f6c") != []
        await forget(store, clock.now(), None, KEY.id)
        assert holding(path, "bob-marker-8a37") == []
        assert holding(path, "erin-marker-3f6c") == []
        assert holding(path, "carol-marker-c5e0") != []  # another conversation's text is kept
        assert holding(path, "frank-marker-d04e") != []
        pruned = await store.prune(clock.now() + 1)  # everything answered, erased rows too
        assert (pruned["messages"], pruned["replies"], pruned["votes"]) == (3, 2, 1)
        assert holding(path, "carol-marker-c5e0") == []  # a retention sweep's deletes too
        assert holding(path, "frank-marker-d04e") == []
    finally:
        await store.close()


async def test_forget_on_the_command_line_leaves_no_text_on_disk_while_the_bot_runs(
    tmp_path: Path, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    """The running bot keeps its connection open, so the command's own exit never folds the
    write-ahead log back: the erase itself has to."""
    path = tmp_path / "burstbot.db"
    store = SqliteStore(str(path))
    await store.open()
    try:
        app = make_app(store, clock, ScriptedReplier(), frontend)
        await app.ingest(marked(1, "alice", "alice-marker-40d1"))
        await app.ingest(marked(2, "carol", "carol-marker-c5e0", OTHER))
        await step(app, clock)
        erased = await asyncio.to_thread(burstbot, ["forget", "--conversation", KEY.id], tmp_path)
        assert erased.returncode == 0, erased.stderr
        assert holding(path, "alice-marker-40d1") == []
        assert holding(path, "carol-marker-c5e0") != []
    finally:
        await store.close()


async def test_a_checkpoint_held_back_by_a_reader_is_named_and_done_at_the_next_sweep(
    tmp_path: Path, clock: FakeClock, frontend: RecordingFrontend, caplog: pytest.LogCaptureFixture
) -> None:
    """Another connection reading an older snapshot keeps the erased text in the log: the
    erase says so, and the next sweep (which deletes nothing) truncates the log once it ends."""
    path = tmp_path / "burstbot.db"
    store = SqliteStore(str(path), busy_timeout_ms=50)
    await store.open()
    reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        app = make_app(store, clock, ScriptedReplier(), frontend)
        await app.ingest(marked(1, "alice", "alice-marker-40d1"))
        await step(app, clock)
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM messages").fetchone() == (1,)  # a snapshot
        with caplog.at_level(logging.INFO, "burstbot.storage"):
            await store.forget_conversation(KEY.id)
            assert holding(path, "alice-marker-40d1") == [path.name + "-wal"]
            reader.execute("COMMIT")
            assert await store.prune_files(0.0) == {"files": 0, "blobs": 0}
        assert holding(path, "alice-marker-40d1") == []
    finally:
        reader.close()
        await store.close()
    assert [r.getMessage() for r in caplog.records if r.name == "burstbot.storage"] == [
        f"storage: erased text may still be readable in {path}-wal: its checkpoint could not "
        "truncate it (another connection is still reading an older snapshot); the next erase "
        "or retention sweep tries again",
        f"storage: {path}-wal checkpointed: the erased text is off the disk",
    ]
