"""`/metrics` and `/healthz` served by a running app, scraped over HTTP after a burst."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from bot.core.events import ConversationKey, IncomingMessage
from bot.ops.metrics import Metrics
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock
from tests.apps import make_app

KEY = ConversationKey("test", "w1", "c1")


async def until(condition, within: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    """Bounded wait for real I/O (server start, an HTTP round trip), never for debounce."""
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def test_metrics_count_a_burst_and_healthz_answers(
    tmp_path: Path, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    store = SqliteStore(str(tmp_path / "metrics.db"))
    replier = ScriptedReplier()
    app = make_app(
        store, clock, replier, frontend,
        metrics={"enabled": True, "host": "127.0.0.1", "port": 0},
        access={"block_users": ["mallory"]},
    )  # fmt: skip
    running = asyncio.create_task(app.run())
    try:
        await until(lambda: app.metrics_server is not None)
        assert app.metrics_server is not None
        base = f"http://127.0.0.1:{app.metrics_server.port}"
        for n in range(3):
            await app.ingest(IncomingMessage(KEY, f"m{n}", "u1", "alice", f"part {n}"))
        await app.ingest(IncomingMessage(KEY, "m0", "u1", "alice", "part 0"))  # a replay
        await app.ingest(IncomingMessage(KEY, "x1", "mallory", "mallory", "let me in"))
        delivered: list[object] = []
        app.subscribe(lambda name, fields: delivered.append(name) if name == "delivered" else None)
        await clock.advance(2.0)
        await until(lambda: bool(delivered))
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/metrics") as response:
                assert response.status == 200
                assert response.headers["Content-Type"].startswith("text/plain")
                body = await response.text()
            async with http.get(f"{base}/healthz") as response:
                assert (response.status, await response.json()) == (200, {
                    "ok": True,
                    "store": {"ok": True, "state": "answering"},
                    "frontends": {"test": {"ok": True, "state": "running"}},
                })  # fmt: skip
    finally:
        app.request_stop()
        await running
    samples = dict(
        line.rsplit(" ", 1) for line in body.splitlines() if line and not line.startswith("#")
    )
    assert samples['burstbot_messages_total{status="accepted"}'] == "3.0"
    assert samples['burstbot_messages_total{status="duplicate"}'] == "1.0"
    assert samples['burstbot_messages_total{status="ignored"}'] == "1.0"
    assert samples['burstbot_refused_total{reason="blocked user",stage="access"}'] == "1.0"
    assert samples["burstbot_bursts_total"] == "1.0"
    assert samples["burstbot_replies_posted_total"] == "1.0"
    assert samples['burstbot_burst_size_messages_bucket{le="2.0"}'] == "0.0"
    assert samples['burstbot_burst_size_messages_bucket{le="3.0"}'] == "1.0"
    assert samples['burstbot_tokens_total{kind="output"}'] == "5.0"
    assert samples["burstbot_reply_latency_seconds_count"] == "1.0"
    assert samples["burstbot_supersedes_total"] == "0.0"
    where = 'platform="test",workspace="w1"'
    assert samples[f"burstbot_workspace_messages_total{{{where}}}"] == "3.0"
    assert samples[f"burstbot_workspace_replies_posted_total{{{where}}}"] == "1.0"
    assert samples[f'burstbot_workspace_tokens_total{{kind="output",{where}}}'] == "5.0"
    assert len(replier.calls) == 1


def test_each_workspace_is_counted_apart() -> None:
    metrics = Metrics()
    for conversation in ("slack/T1/D1/", "slack/T1/C2/171.1", "slack/T2/D1/"):
        metrics.observe("accepted", {"conversation": conversation, "version": 1})
    metrics.observe("generation", {"conversation": "slack/T2/D1/", "input_tokens": 40,
                                   "output_tokens": 7, "outcome": "committed"})  # fmt: skip
    metrics.observe("delivered", {"conversation": "slack/T2/D1/", "reply_id": 1, "parts": 1})
    text = metrics.exposition().decode()
    assert 'burstbot_workspace_messages_total{platform="slack",workspace="T1"} 2.0' in text
    assert 'burstbot_workspace_messages_total{platform="slack",workspace="T2"} 1.0' in text
    assert 'workspace_tokens_total{kind="input",platform="slack",workspace="T2"} 40.0' in text
    assert 'workspace_replies_posted_total{platform="slack",workspace="T2"} 1.0' in text
    assert 'workspace="T1"} 0.0' not in text  # no sample for a workspace that had none


def test_waits_for_capacity_are_counted_by_what_they_waited_for() -> None:
    metrics = Metrics()
    cpu, minute = "this process's CPU", "requests per minute"
    for cid, why in (("slack/T1/C1/", cpu), ("slack/T1/C2/", cpu), ("slack/T1/C3/", minute)):
        metrics.observe("capacity_wait", {"conversation": cid, "waiting_for": why, "until": 1.0})
    waited = {"conversation": "slack/T1/C1/", "waited": 3.0, "waiting_for": cpu}
    metrics.observe("admitted", waited)
    text = metrics.exposition().decode()
    assert 'burstbot_capacity_waits_total{waiting_for="this process\'s CPU"} 2.0' in text
    assert 'burstbot_capacity_waits_total{waiting_for="requests per minute"} 1.0' in text
    assert "burstbot_capacity_wait_seconds_count 1.0" in text
    assert "burstbot_capacity_wait_seconds_sum 3.0" in text


async def test_a_busy_port_is_a_config_error(
    tmp_path: Path, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    from bot.core.errors import ConfigError
    from bot.ops.metrics import Metrics, MetricsServer

    async def healthy() -> dict[str, object]:
        return {"ok": True}

    first = MetricsServer(Metrics(), healthy, "127.0.0.1", 0)
    await first.start()
    try:
        second = MetricsServer(Metrics(), healthy, "127.0.0.1", first.port)
        try:
            await second.start()
        except ConfigError as exc:
            assert f"127.0.0.1:{first.port}" in str(exc)
        else:
            await second.stop()
            raise AssertionError("two servers on one port")
    finally:
        await first.stop()


async def test_takeovers_and_wasted_tokens_are_counted(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    from bot.ops.metrics import Metrics
    from tests.conftest import make_engine

    metrics = Metrics()
    replier = ScriptedReplier(hold=True)
    engine = make_engine(store, clock, replier, frontend)
    engine.subscribe(metrics.observe)
    await engine.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "hello"))
    await clock.advance(2)
    await engine.run_due()
    first = await replier.next_call(0)
    first.stream(6)
    await engine.ingest(IncomingMessage(KEY, "m2", "u1", "alice", "again"))  # supersedes
    await engine.idle()
    await clock.advance(2)
    assert await store.acquire_lease(KEY.id, "crashed-worker", clock.now(), 30.0) is not None
    await clock.advance(31)  # the crashed worker's lease expires; the timer waited for it
    await engine.run_due()
    (await replier.next_call(1)).finish("done")
    await engine.idle()
    text = metrics.exposition().decode()
    assert "burstbot_supersedes_total 1.0" in text
    assert 'burstbot_tokens_total{kind="wasted"} 6.0' in text
    assert "burstbot_lease_takeovers_total 1.0" in text
    assert "burstbot_replies_posted_total 1.0" in text
