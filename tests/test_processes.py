"""This process's row (bot/core/processes.py): written at once, stamped seen every refresh on the
store's clock, pruned for the long gone, deleted on leaving; a store that fails is logged once
(and once when it is back) and never stops the refreshes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot import __version__
from bot.core.errors import StoreError
from bot.core.processes import PRUNE_AFTER_SECONDS, REFRESH_SECONDS, Presence
from storage.sqlite import SqliteStore
from testkit.clock import FakeClock
from tests.web_harness import eventually

START = 1_000_000.0


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(str(tmp_path / "processes.db"))
    await store.open()
    yield store
    await store.close()


async def test_the_row_is_written_refreshed_and_deleted_on_leaving(store: SqliteStore) -> None:
    clock = FakeClock(START)
    presence = Presence(store, clock, "host-a:1:ab", __version__)
    assert await presence.see()
    task = asyncio.create_task(presence.run())
    try:
        await refresh(clock, presence)
        (row,) = await store.processes(clock.now())
        assert (row.owner, row.version, row.pid) == ("host-a:1:ab", __version__, presence.pid)
        assert (row.started_at, row.seen_at) == (START, START + REFRESH_SECONDS)
    finally:
        task.cancel()
    await presence.leave()
    assert await store.processes(clock.now()) == []


async def test_a_refresh_prunes_the_rows_not_seen_for_a_day(store: SqliteStore) -> None:
    await store.see_process("died:9:ff", "elsewhere", 9, "0.0.9", START)
    await store.see_process("quiet:8:ee", "elsewhere", 8, "0.0.9", START + 10)
    clock = FakeClock(START + PRUNE_AFTER_SECONDS + 5)
    assert await Presence(store, clock, "host-a:1:ab", __version__).see()
    listed = [p.owner for p in await store.processes(clock.now())]
    assert listed == ["host-a:1:ab", "quiet:8:ee"]


async def test_a_failing_store_is_logged_once_and_the_refreshes_go_on(
    store: SqliteStore, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(START)
    presence = Presence(store, clock, "host-a:1:ab", __version__)

    async def store_down(*args: object) -> None:
        raise StoreError("database is locked")

    monkeypatch.setattr(store, "see_process", store_down)
    with caplog.at_level(logging.WARNING, logger="burstbot.processes"):
        assert not await presence.see()
        task = asyncio.create_task(presence.run())
        for _ in range(3):
            await refresh(clock, presence)
        assert presence.refreshes == 4 and not task.done()
        assert await store.processes(clock.now()) == []
        monkeypatch.undo()  # the database is back
        await refresh(clock, presence)
        task.cancel()
    messages = [r.getMessage() for r in caplog.records if r.name == "burstbot.processes"]
    assert messages == [
        "processes: could not mark this process alive (database is locked); retrying",
        "processes: this process is marked alive again",
    ]
    assert [p.seen_at for p in await store.processes(clock.now())] == [clock.now()]


async def refresh(clock: FakeClock, presence: Presence) -> None:
    """Once `run` sleeps, move the clock to its next refresh and wait for that refresh to end."""
    done = presence.refreshes

    async def asleep() -> bool:
        return bool(clock.waiting())

    async def refreshed() -> bool:
        return presence.refreshes > done

    await eventually(asleep)
    await clock.advance(REFRESH_SECONDS)
    await eventually(refreshed)
