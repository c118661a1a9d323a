"""A process's life as `App.run` leads it: who it is (its owner name), how it stops, and what a
dead front end does to it."""

from __future__ import annotations

import asyncio
import gc
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from adapters.slack import SlackFrontend
from bot.app import App
from bot.cli.main import serve
from bot.config import parse_config
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier, check_invariants
from testkit.clock import FakeClock, settle
from testkit.engine import shut_down
from testkit.fake_slack import EventSender, FakeSlackApi, dm
from tests.conftest import KEY, message
from tests.slack_harness import DM_KEY, SECRET, TOKEN, api, slack_config, ts

__all__ = ["api"]  # fixture


def shared_config() -> dict[str, object]:
    return {
        "llm": {"provider": "offline"},
        "debounce": {"quiet_seconds": 1.5, "max_wait_seconds": 8.0},
        "console": {"enabled": False},
        "engine": {"owner": "bot-eu"},
    }


async def test_two_processes_with_one_configured_owner_keep_each_others_leases(
    store: SqliteStore, clock: FakeClock
) -> None:
    """Both processes read the same config; one's shutdown must not release the other's lease."""
    config = parse_config(shared_config())
    replier = ScriptedReplier(hold=True)
    a = App(config, store, ScriptedReplier(), [RecordingFrontend()], clock=clock)
    platform = RecordingFrontend()
    b = App(config, store, replier, [platform], clock=clock)
    assert a.engine.owner != b.engine.owner
    assert re.fullmatch(r"bot-eu:[^:]+:\d+:[0-9a-f]{6}", a.engine.owner)
    await b.ingest(message(1))
    await clock.advance(1.5)
    await b.engine.run_due()
    call = await replier.next_call(0)
    await shut_down(a.engine)
    state = await store.conversation_state(KEY.id)
    assert state is not None and state.lease_owner == b.engine.owner
    call.finish()
    await b.engine.idle()
    assert platform.texts() == ["reply to: text 1"]
    await shut_down(b.engine)


# shutdown: stop intake, finish (or hand over) the replies in flight, then stop -----------------
PARAGRAPHS = [f"paragraph {n}: " + " ".join(["word"] * 500) for n in range(2)]  # two posts


@asynccontextmanager
async def serving(
    api: FakeSlackApi, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[tuple[App, asyncio.Task[None], EventSender]]:
    """`App.run` with the real Slack front end (HTTP mode) on a database file."""
    config = slack_config(api, thinking_indicator="off")
    frontend = SlackFrontend(config.slack, TOKEN, signing_secret=SECRET)
    store = SqliteStore(str(tmp_path / "bot.db"))
    app = App(config, store, ScriptedReplier(), [frontend], clock=clock, owner="w1")
    running = asyncio.create_task(app.run())
    try:
        await eventually(lambda: frontend.http_port is not None)
        url = f"http://127.0.0.1:{frontend.http_port}{config.slack.http_path}"
        yield app, running, EventSender(url, SECRET)
    finally:
        app.request_stop()
        await asyncio.wait_for(asyncio.gather(running, return_exceptions=True), 10)


async def stored(tmp_path: Path) -> SqliteStore:
    store = SqliteStore(str(tmp_path / "bot.db"))
    await store.open()
    return store


async def test_a_reply_being_posted_at_the_stop_is_posted_in_full_and_marked_sent(
    api: FakeSlackApi, tmp_path: Path, clock: FakeClock
) -> None:
    """SIGTERM arrives while the first of two parts is on its way: both parts go out, the row is
    marked sent, and only then do the front ends stop. New events meanwhile get a 503, which
    Slack retries (elsewhere, or after the restart)."""
    posting = api.hold("chat.postMessage")
    async with serving(api, tmp_path, clock) as (app, running, sender):
        assert await sender.send(dm(ts(1), "\n\n".join(PARAGRAPHS))) == 200
        await clock.advance(1.5)
        await asyncio.wait_for(api.held["chat.postMessage"].wait(), 5)
        app.request_stop()
        await settle()
        assert await sender.send(dm(ts(2), "too late")) == 503
        assert not running.done()
        posting.set()
        await asyncio.wait_for(running, 10)
    assert len(api.posts("D1")) == 2
    store = await stored(tmp_path)
    [row] = await store.replies(DM_KEY.id)
    assert row.state == "sent" and len(row.platform_message_ids) == 2
    assert [m.text for m in await store.messages(DM_KEY.id)] == ["\n\n".join(PARAGRAPHS)]
    await check_invariants(store, [DM_KEY.id])
    await store.close()


async def test_a_reply_that_cannot_finish_in_the_grace_period_is_left_to_another_process(
    api: FakeSlackApi, tmp_path: Path, clock: FakeClock
) -> None:
    """The post hangs past the grace period: the delivery is cancelled and its claim released
    as the process stops, so another process can take the row at once."""
    api.hold("chat.postMessage")  # never answers
    async with serving(api, tmp_path, clock) as (app, running, sender):
        assert await sender.send(dm(ts(1), "hello")) == 200
        await clock.advance(1.5)
        await asyncio.wait_for(api.held["chat.postMessage"].wait(), 5)
        app.request_stop()
        await settle()
        assert not running.done()  # waiting for the post, within the grace period
        stopped_at = clock.now()
        async with asyncio.timeout(10):
            while not running.done():  # the grace period passes on the engine's clock
                await clock.advance(0.5)
                await asyncio.sleep(0.005)
        assert clock.now() - stopped_at >= app.shutdown_grace
    # the app has stopped (awaited above): the store is read after the event, not after a pause
    store = await stored(tmp_path)
    [row] = await store.replies(DM_KEY.id)
    assert row.state == "pending"
    state = await store.conversation_state(DM_KEY.id)
    assert state is not None and state.lease_owner is None
    [taken] = await store.claim_replies("other", clock.now(), 30.0, ["slack"], 16)
    assert taken.id == row.id
    await store.close()


async def eventually(check: Callable[[], bool], within: float = 5.0) -> None:
    """Bounded wait for real I/O (a listening socket) to be ready."""
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


class BrokenStopFrontend(RecordingFrontend):
    """A front end whose stop fails (its platform client raises while closing)."""

    async def stop(self) -> None:
        raise RuntimeError("connector closed twice")


async def test_a_front_end_that_fails_to_stop_is_logged_and_the_shutdown_goes_on(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    config = parse_config({"llm": {"provider": "offline"}, "console": {"enabled": False}})
    store = SqliteStore(str(tmp_path / "bot.db"))
    frontend = BrokenStopFrontend()
    app = App(config, store, ScriptedReplier(), [frontend], clock=clock, owner="w1")
    running = asyncio.create_task(app.run())
    await eventually(lambda: frontend.host is not None)
    app.request_stop()
    await asyncio.wait_for(asyncio.gather(running, return_exceptions=True), 10)
    [line] = [r.getMessage() for r in caplog.records if "did not stop" in r.getMessage()]
    assert "connector closed twice" in line
    assert store._db is None  # the store was still closed


async def test_what_startup_built_leaves_the_collectors_way_once_the_app_serves(
    store: SqliteStore, clock: FakeClock
) -> None:
    """`burstbot run` (bot/cli/main.py): once every front end serves, the objects alive then go
    to the collector's permanent generation, so a full collection no longer walks them (each one
    stopped the loop for 115-175 ms in the Slack flood, and every ack waited)."""
    config = parse_config(shared_config())
    app = App(config, store, ScriptedReplier(), [RecordingFrontend()], clock=clock)
    gc.unfreeze()
    serving = asyncio.create_task(serve(app))
    try:
        await asyncio.wait_for(app.serving.wait(), 5)
        await eventually(lambda: gc.get_freeze_count() > 0)
    finally:
        app.request_stop()
        await asyncio.wait_for(serving, 10)
        gc.unfreeze()  # the rest of the suite's objects stay collectable
