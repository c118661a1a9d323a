"""Votes where operators read them: `burstbot usage` (per model, channel or voter) and the
Prometheus metrics (the votes standing, read from the store at scrape time, and the presses)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from bot.core.clicks import Click
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.store import Committed, FinalCheck, NewReply, Timing
from bot.core.votes import Vote, VoteValue, vote_target
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock
from tests.apps import make_app
from tests.test_cli import burstbot
from tests.test_metrics import until

T = Timing(quiet_seconds=2.0, max_wait_seconds=10.0)
NOW = 1_800_000_000.0
GENERAL = ConversationKey("slack", "T1", "C1")
RANDOM = ConversationKey("slack", "T1", "C2", "1700000000.000100")


async def answered(store: SqliteStore, key: ConversationKey, model: str) -> str:
    await store.ingest(IncomingMessage(key, f"{key.id}-m", "U9", "zed", "hi"), NOW, T)
    lease = await store.acquire_lease(key.id, "o1", NOW + 3, 30.0)
    assert lease is not None
    reply = NewReply("the answer", feedback=True, model=model)
    done = await store.commit(key.id, FinalCheck(lease.token, 1, True), NOW + 4, T, reply)
    assert isinstance(done, Committed) and done.reply is not None
    return f"r{done.reply.id}"


def vote(key: ConversationKey, reply: str, voter: str, value: VoteValue, at: float) -> Vote:
    click = Click(f"{reply}-{voter}-{at}", key, "vote", vote_target(reply, value), voter, voter)
    return Vote(click, reply, value, at)


async def test_usage_shows_the_votes_standing_per_model_channel_and_voter(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "burstbot.db"))
    await store.open()
    try:
        first = await answered(store, GENERAL, "claude-sonnet-5-5")
        second = await answered(store, RANDOM, "claude-haiku-4-5")
        for key, reply, voter, value, at in [
            (GENERAL, first, "U1", "up", NOW + 10),
            (GENERAL, first, "U1", "down", NOW + 11),  # changed their mind: counts as 👎
            (GENERAL, first, "U2", "up", NOW + 12),
            (RANDOM, second, "U1", "up", NOW + 13),
            (RANDOM, second, "U3", "up", NOW - 86_400 * 400),  # long ago
        ]:
            assert await store.vote(vote(key, reply, voter, value, at), NOW) == "voted"
    finally:
        await store.close()
    by_model = burstbot(["usage"], tmp_path)
    assert by_model.returncode == 0, by_model.stderr
    lines = by_model.stdout.splitlines()
    start = lines.index("votes on answers (one per person per answer), by model:")
    assert lines[start + 1 : start + 3] == [
        "  claude-haiku-4-5: 👍 2  👎 0  (100% 👍)",
        "  claude-sonnet-5-5: 👍 1  👎 1  (50% 👍)",
    ]
    by_channel = burstbot(["usage", "--by", "channel", "--since", "2027-01-01"], tmp_path)
    lines = by_channel.stdout.splitlines()
    start = lines.index("votes on answers (one per person per answer), by channel:")
    assert lines[start + 1 : start + 3] == [
        "  slack/T1/C1: 👍 1  👎 1  (50% 👍)",
        "  slack/T1/C2: 👍 1  👎 0  (100% 👍)",  # the vote from long ago is before --since
    ]
    by_voter = burstbot(["usage", "--by", "user", "--workspace", "T1"], tmp_path)
    assert "  slack:U1: 👍 1  👎 1  (50% 👍)" in by_voter.stdout.splitlines()
    elsewhere = burstbot(["usage", "--workspace", "T9"], tmp_path)
    assert "votes on answers" not in elsewhere.stdout


async def test_metrics_show_the_votes_standing_and_the_presses(
    tmp_path: Path, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    store = SqliteStore(str(tmp_path / "metrics.db"))
    app = make_app(store, clock, ScriptedReplier(), frontend,
                   metrics={"enabled": True, "host": "127.0.0.1", "port": 0})  # fmt: skip
    key = ConversationKey("test", "w1", "c1")
    running = asyncio.create_task(app.run())

    async def scrape() -> dict[str, str]:
        assert app.metrics_server is not None
        url = f"http://127.0.0.1:{app.metrics_server.port}/metrics"
        async with aiohttp.ClientSession() as http, http.get(url) as response:
            body = await response.text()
        return dict(
            line.rsplit(" ", 1) for line in body.splitlines() if line and not line.startswith("#")
        )

    try:
        await until(lambda: app.metrics_server is not None)
        delivered: list[object] = []
        app.subscribe(lambda name, fields: delivered.append(name) if name == "delivered" else None)
        await app.ingest(IncomingMessage(key, "m1", "u1", "alice", "hi"))
        await clock.advance(2.0)
        await until(lambda: bool(delivered))
        [row] = await store.replies(key.id)
        reply = f"r{row.id}"
        assert (await app.vote(vote(key, reply, "u1", "up", 10.0))).outcome == "voted"
        assert (await app.vote(vote(key, reply, "u1", "up", 10.0))).outcome == "duplicate"
        assert (await app.vote(vote(key, reply, "u2", "up", 10.0))).outcome == "voted"
        samples = await scrape()
        assert samples['burstbot_votes{model="(no model)",vote="up"}'] == "2.0"
        assert samples['burstbot_vote_presses_total{outcome="voted"}'] == "2.0"
        assert samples['burstbot_vote_presses_total{outcome="duplicate"}'] == "1.0"
        await app.vote(vote(key, reply, "u1", "down", 11.0))
        await app.vote(vote(key, reply, "u2", "down", 11.0))
        samples = await scrape()
        assert samples['burstbot_votes{model="(no model)",vote="down"}'] == "2.0"
        assert samples['burstbot_votes{model="(no model)",vote="up"}'] == "0.0"  # replaced
    finally:
        app.request_stop()
        await running
