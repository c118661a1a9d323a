"""The chaos run: worker processes on one database, random bursts, SIGKILLs, injected failures.

The parent process runs the fake platform (an aiohttp server that dedupes posts by nonce, the way
Discord does, records every raw attempt, and fails some posts before or after storing them), the
driver (random bursts over many conversations, sent to a random live worker, retried until
acknowledged, some delivered twice to two workers at once), and the killer (SIGKILL of a worker
that holds a lease, i.e. is generating, then a restart). After quiescence the checker reads what the
platform received and what the store holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from bot.core.store import Store
from storage import open_store


@dataclass(frozen=True)
class Size:
    workers: int
    conversations: int
    bursts: int
    drive_seconds: float
    kill_every: float


SIZES = {
    "ci": Size(workers=3, conversations=24, bursts=100, drive_seconds=12.0, kill_every=3.0),
    "full": Size(workers=4, conversations=200, bursts=1200, drive_seconds=70.0, kill_every=4.0),
}

ENGINE = {
    "quiet_seconds": 0.3,
    "max_wait_seconds": 1.0,
    "lease_ttl_seconds": 1.0,
    "max_concurrent_generations": 16,
    "poll_seconds": 0.1,
    "busy_retry_seconds": 0.1,
    "delivery_max_attempts": 12,
    "delivery_backoff_seconds": 0.05,
    "model_max_attempts": 3,
    "model_backoff_seconds": 0.1,
    "failure_message": "sorry (apology)",
}
REPLIER = {
    "generation_timeout": 1.0,
    "token_delay": 0.02,
    "p_rate_limit": 0.04,
    "p_overload": 0.04,
    "p_hang": 0.02,
}
P_POST_FAIL_BEFORE = 0.08  # 503 and nothing stored
P_POST_FAIL_AFTER = 0.04  # stored, but the answer is lost: the retry must not post twice
P_DUPLICATE_DELIVERY = 0.1
VERBOSE = bool(os.environ.get("BURSTBOT_CHAOS_WORKER_LOGS"))  # worker logs to stderr
JITTER = 0.5  # process scheduling on a busy CI machine; added once to every bound


class FakePlatform:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.posts: dict[str, dict[str, Any]] = {}  # nonce -> first accepted post
        self.attempts: list[dict[str, Any]] = []
        self.failures = 0

    async def post(self, request: web.Request) -> web.Response:
        body = await request.json()
        body["received_at"] = time.time()
        self.attempts.append(body)
        roll = self.rng.random()
        if roll < P_POST_FAIL_BEFORE:
            self.failures += 1
            return web.Response(status=503)
        nonce = body["nonce"]
        if nonce not in self.posts:
            self.posts[nonce] = body | {"id": f"p{len(self.posts) + 1}"}
        if roll < P_POST_FAIL_BEFORE + P_POST_FAIL_AFTER:
            self.failures += 1
            return web.Response(status=503)
        return web.json_response({"id": self.posts[nonce]["id"]})


def configured_owner(lease_owner: str) -> str:
    """The worker's configured name: a process appends `:host:pid:random` to it."""
    return lease_owner.split(":", 1)[0]


@dataclass
class Worker:
    index: int
    generation: int
    process: asyncio.subprocess.Process
    port: int

    @property
    def owner(self) -> str:
        return f"worker{self.index}.{self.generation}"


@dataclass
class Run:
    size: Size
    db_url: str
    platform_url: str
    rng: random.Random
    workers: dict[int, Worker] = field(default_factory=dict)
    kills: list[tuple[float, str, dict[str, float]]] = field(default_factory=list)
    acked: dict[str, str] = field(default_factory=dict)  # message id -> conversation channel
    duplicate_deliveries: int = 0
    killing: bool = True
    driving: bool = True
    lags: list[tuple[float, float]] = field(default_factory=list)  # (when, how late)

    async def start_worker(self, index: int, generation: int) -> Worker:
        owner = f"worker{index}.{generation}"
        settings = {
            "owner": owner,
            "db_url": self.db_url,
            "platform_url": self.platform_url,
            "engine": ENGINE,
            **REPLIER,
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.chaos_worker",
            json.dumps(settings),
            stdout=asyncio.subprocess.PIPE,
            stderr=None if VERBOSE else asyncio.subprocess.DEVNULL,
            cwd=os.path.dirname(os.path.dirname(__file__)),
        )
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        if not line.startswith(b"READY "):
            raise RuntimeError(f"{owner} did not start: {line!r}")
        worker = Worker(index, generation, process, int(line.split()[1]))
        self.workers[index] = worker
        return worker

    async def send(self, session: aiohttp.ClientSession, channel: str, n: int) -> None:
        """Deliver until some worker acknowledges (a killed worker means: try another)."""
        body = {
            "channel": channel,
            "id": f"{channel}-m{n}",
            "author": "u1",
            "text": f"{channel}-m{n}",
        }
        for _ in range(400):
            worker = self.rng.choice(list(self.workers.values()))
            try:
                async with session.post(f"http://127.0.0.1:{worker.port}/ingest", json=body) as r:
                    if r.status == 200:
                        self.acked[body["id"]] = channel
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.05)
        raise RuntimeError(f"no worker acknowledged {body['id']}")

    async def drive_conversation(
        self, session: aiohttp.ClientSession, channel: str, bursts: int
    ) -> None:
        rng, n = self.rng, 0
        await asyncio.sleep(rng.uniform(0, self.size.drive_seconds / max(bursts, 1)))
        for _ in range(bursts):
            for _ in range(rng.choice([1, 1, 2, 3, 3, 4, 5])):
                n += 1
                if rng.random() < P_DUPLICATE_DELIVERY:
                    self.duplicate_deliveries += 1
                    await asyncio.gather(
                        self.send(session, channel, n), self.send(session, channel, n)
                    )
                else:
                    await self.send(session, channel, n)
                # mostly faster than the quiet window; sometimes a pause that lets generation
                # start, so the next message supersedes it
                pause = rng.uniform(0.3, 0.7) if rng.random() < 0.15 else rng.uniform(0.01, 0.2)
                await asyncio.sleep(pause)
            gap = self.size.drive_seconds / max(bursts, 1)
            await asyncio.sleep(rng.uniform(0.3 * gap, 1.7 * gap))

    async def killer(self, store: Store, channels: list[str]) -> None:
        """SIGKILL a worker that holds a lease (it is generating), then restart it."""
        while self.killing:
            await asyncio.sleep(self.rng.uniform(0.5, 1.5) * self.size.kill_every)
            victims: list[Worker] = []
            while self.killing and not victims:  # wait for a worker caught generating
                holders: dict[str, list[str]] = {}
                for channel in channels:
                    state = await store.conversation_state(f"chaos/w/{channel}/")
                    if state is not None and state.lease_owner is not None:
                        owner = configured_owner(state.lease_owner)
                        holders.setdefault(owner, []).append(state.conversation_id)
                victims = [w for w in self.workers.values() if w.owner in holders]
                if not victims:
                    await asyncio.sleep(0.1)
            if not self.killing:
                return
            victim = self.rng.choice(victims)
            victim.process.send_signal(signal.SIGKILL)
            killed_at = time.time()
            await victim.process.wait()
            leases: dict[str, float] = {}  # conversation -> lease expiry left by the victim
            for cid in holders[victim.owner]:
                state = await store.conversation_state(cid)
                held_by = configured_owner(state.lease_owner or "") if state else None
                if state and held_by == victim.owner and state.lease_expires_at:
                    leases[cid] = state.lease_expires_at
            self.kills.append((killed_at, victim.owner, leases))
            del self.workers[victim.index]
            await asyncio.sleep(self.rng.uniform(0.2, 1.0))
            await self.start_worker(victim.index, victim.generation + 1)


async def watch_lag(run: Run) -> None:
    """How late this process's own timers fire: a gauge of how starved for CPU the machine is."""
    while run.driving:
        started = time.monotonic()
        await asyncio.sleep(0.05)
        run.lags.append((time.time(), time.monotonic() - started - 0.05))


async def quiesce(store: Store, channels: list[str], platform: FakePlatform, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        settled = True
        for channel in channels:
            cid = f"chaos/w/{channel}/"
            state = await store.conversation_state(cid)
            if state is None:
                continue
            rows = await store.replies(cid)
            if (
                state.answered_version < state.version
                or state.timer is not None
                or any(r.state == "pending" for r in rows)
            ):
                settled = False
                break
        if settled:
            return
        await asyncio.sleep(0.5)


async def run_chaos(size_name: str, db_url: str, seed: int | None = None) -> dict[str, Any]:
    """Run the whole exercise and return the checker's counts (see `tests/chaos_check.py`)."""
    from tests.chaos_check import check

    size = SIZES[size_name]
    rng = random.Random(seed)
    platform = FakePlatform(random.Random(rng.random()))
    app = web.Application()
    app.router.add_post("/post", platform.post)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    run = Run(size, db_url, f"http://127.0.0.1:{runner.addresses[0][1]}", rng)
    store = open_store(db_url, pool_size=2)
    channels = [f"c{i}" for i in range(size.conversations)]
    try:
        for index in range(size.workers):
            await run.start_worker(index, 0)
        await store.open()
        per_conversation = [size.bursts // size.conversations] * size.conversations
        for i in range(size.bursts % size.conversations):
            per_conversation[i] += 1
        started = time.time()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as session:
            killer = asyncio.create_task(run.killer(store, channels))
            lag_watch = asyncio.create_task(watch_lag(run))
            await asyncio.gather(
                *(
                    run.drive_conversation(session, c, b)
                    for c, b in zip(channels, per_conversation, strict=True)
                )
            )
            run.killing = False
            await killer
        await quiesce(store, channels, platform, within=60.0)
        run.driving = False
        await lag_watch
        drive_seconds = time.time() - started
        for worker in list(run.workers.values()):
            worker.process.send_signal(signal.SIGTERM)
        for worker in list(run.workers.values()):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(worker.process.wait(), 15)
        counts = await check(store, channels, run, platform, ENGINE, REPLIER, JITTER)
        counts["seconds"] = round(drive_seconds, 1)
        return counts
    finally:
        for worker in run.workers.values():
            if worker.process.returncode is None:
                worker.process.kill()
                await worker.process.wait()
        await store.close()
        await runner.cleanup()
