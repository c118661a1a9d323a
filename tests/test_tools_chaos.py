"""Tool chaos: three bot processes on one SQLite file, tools on, a slow ticket server over
Streamable HTTP, people typing into several channels (supersedes), random `kill -9`s and restarts.

Afterwards the ticket server's own count per idempotency key is at most 1 (G14), and every burst
was answered once (G1, G2 from the store). The model asks for a ticket for every burst, titled
after the burst's first message, so every generation of one burst asks for the same call."""

from __future__ import annotations

import asyncio
import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from bot.core.clock import SystemClock
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.store import Timing
from storage.sqlite import SqliteStore
from testkit import check_invariants
from testkit.fake_anthropic import FakeAnthropic, Plan, RecordedRequest, ToolUse
from tests.tool_harness import http_process
from tests.tool_server import calls_per_key

CHANNELS = ("c1", "c2", "c3", "c4")
TIMING = Timing(quiet_seconds=0.5, max_wait_seconds=4.0)
ROOT = Path(__file__).resolve().parent.parent


def ticket_or_answer(request: RecordedRequest) -> Plan:
    """A ticket for the burst (titled by its first message) until a result came back."""
    last = request.messages[-1]["content"]
    results = [b for b in last if b.get("type") == "tool_result"] if isinstance(last, list) else []
    if results:
        return Plan(text=f"Done: {results[-1]['content']}", words_per_delta=3, delay=0.02)
    blocks = last if isinstance(last, list) else [{"type": "text", "text": last}]
    texts = [b["text"] for b in blocks if b.get("type") == "text"]
    first = texts[0].splitlines()[0] if texts else "?"
    return Plan(text="Opening it.", tool_uses=[ToolUse("create_ticket", {"title": first[:60]})])


async def start_worker(settings: dict[str, Any], name: str) -> asyncio.subprocess.Process:
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.tool_worker", json.dumps({**settings, "owner": name}),
        stdout=asyncio.subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    assert worker.stdout is not None
    async with asyncio.timeout(60):
        assert (await worker.stdout.readline()).strip() == b"READY"
    return worker


@pytest.mark.slow
@pytest.mark.xdist_group("chaos")
async def test_three_processes_with_crashes_never_make_a_call_twice(tmp_path: Path) -> None:
    rng = random.Random(39)
    ledger, hold, db = tmp_path / "ledger.txt", tmp_path / "hold", tmp_path / "bot.db"
    server = await FakeAnthropic().start()
    server.on_request = lambda request: server.queue(ticket_or_answer(request))
    store = SqliteStore(str(db))
    await store.open()
    keys = [ConversationKey("test", "w1", channel) for channel in CHANNELS]
    kills = 0
    try:
        async with http_process(ledger, hold, slow=1.5) as port:
            mcp_url = f"http://127.0.0.1:{port}/mcp"
            settings = {"db": str(db), "api_url": server.base_url, "serve_only": True,
                        "mcp_url": mcp_url, "channels": list(CHANNELS)}  # fmt: skip
            names = ["w1", "w2", "w3"]
            started = await asyncio.gather(*(start_worker(settings, name) for name in names))
            workers = dict(zip(names, started, strict=True))
            # a killed worker comes back while people keep typing, as under a supervisor
            restarts: dict[str, asyncio.Task[asyncio.subprocess.Process]] = {}
            clock = SystemClock()
            for n in range(40):
                key = rng.choice(keys)
                said = IncomingMessage(key, f"m{n}", "u1", "alice", f"ticket {n} for {key.channel}")
                await store.ingest(said, clock.now(), TIMING)
                await asyncio.sleep(rng.uniform(0.05, 0.6))
                if rng.random() < 0.12:
                    victim = rng.choice(names)
                    if victim in restarts:  # still starting: it is killed once it serves
                        workers[victim] = await restarts.pop(victim)
                    workers[victim].kill()  # SIGKILL, mid-call or not
                    await workers[victim].wait()
                    kills += 1
                    restarts[victim] = asyncio.create_task(start_worker(settings, victim))
            for name, restart in restarts.items():
                workers[name] = await restart
            async with asyncio.timeout(180):
                while True:
                    states = [await store.conversation_state(k.id) for k in keys]
                    replies = [r for k in keys for r in await store.replies(k.id)]
                    answered = all(s is None or s.answered_version == s.version for s in states)
                    if answered and all(r.state != "pending" for r in replies):
                        break
                    await asyncio.sleep(0.5)
            for worker in workers.values():
                worker.terminate()
            for worker in workers.values():
                await worker.wait()
        counts = calls_per_key(ledger)
        print(f"\n{kills} kills, {len(counts)} tickets, {len(server.requests)} model requests")
        assert counts and max(counts.values()) == 1
        assert kills > 0
        await check_invariants(store, [k.id for k in keys if await store.conversation_state(k.id)])
    finally:
        await store.close()
        await server.stop()
