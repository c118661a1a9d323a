"""The chaos run: worker processes on one database, random bursts, SIGKILLs, injected failures.

The parent process runs:

- the fake platform (an aiohttp server, `FakePlatform`): it records every raw post and dedupes
  only where the real platforms do. Each conversation is either Discord-like or Slack-like
  (`mode_of`: even-numbered channels Discord, odd ones Slack, so every run has both): Discord
  returns the earlier message for a nonce it stored less than `DISCORD_NONCE_WINDOW` ago (a
  stand-in for its few minutes, scaled like the lease TTL and shorter than a CI run), Slack
  stores every post, and the worker's adapter must read back what a reply already shows
  (`GET /posts?reply=`, only posts the platform has stored) before it posts again. Long replies
  go out in several parts, each its own post. Posts fail before being stored (503), are
  rate-limited (429 with Retry-After), are stored and then their answer is lost (503), or are
  slow: shown up to 0.3 × the lease TTL after they arrive, answered after 0.8–2 × the TTL;
- the driver: random bursts over many conversations, sent to a random live worker, retried until
  acknowledged, some delivered twice to two workers at once, some typed on past their deadline
  while a worker generates the answer. Now and then it pauses for a quiet spell, in which only
  two people type on past their deadline: the workers wait on the model and the platform, and
  the sampler reads their CPU time (/proc) for the summary (reported, not judged);
- the killer (SIGKILL of a worker that holds a lease, i.e. is generating, then a restart);
- the store's bad moments: on SQLite the parent holds the write lock for up to a second, longer
  than the workers' busy timeout (they get "database is locked"); on PostgreSQL it holds an
  ACCESS EXCLUSIVE lock on the conversations table, or terminates one worker's connections.

After quiescence (and an idle spell) the checker reads what the platform received and what the
store holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sqlite3
import sys
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from storage import open_store
from storage.sql_store import SqlStore
from testkit.serving import serve_locally


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
# the platform, per post
P_POST_FAIL_BEFORE = 0.06  # 503 and nothing stored
P_POST_RATE_LIMITED = 0.04  # 429 with Retry-After, nothing stored
P_POST_FAIL_AFTER = 0.04  # stored, but the answer is lost: the retry must not post twice
P_POST_SLOW = 0.06  # shown after SLOW_SHOW, answered after SLOW_POST (x the lease TTL: > a claim)
RETRY_AFTER = (1, 2)  # whole seconds, as the platforms send them
SLOW_POST = (0.8, 2.0)
# A slow post shows this long (x TTL) after it arrived. The timing assumption (docs/model):
# shorter than a deliverer killed mid-post leaves its claim (at least 2/3 of the TTL).
SLOW_SHOW = (0.0, 0.3)
STREAMING_INTERVAL = 0.1  # edits while streaming: a few per generation (it lasts 0.1–0.5 s)
DISCORD_NONCE_WINDOW = 5.0  # "a few minutes", scaled like the lease TTL (30 s -> 1 s); < a CI run
PART_CHARS = 32  # a reply longer than this goes out in parts (about three quoted messages each)
# the driver
P_DUPLICATE_DELIVERY = 0.1
P_LATE_INPUT = 0.12  # a burst typed on past its deadline, while its answer is being generated
SPELL_EVERY = (3.0, 5.0)  # seconds of driving between quiet spells
SPELL_SECONDS = 2.0  # long enough for a typist's deadline to pass and its answer to be generated
SPELL_TYPISTS = 2
IDLE_TAIL_SECONDS = 1.5  # the last spell: after quiescence, nothing in flight at all
CPU_SAMPLE_SECONDS = 0.25
TAKEOVER_POLL_SECONDS = 0.05  # how often a killed worker's leases are looked at until taken over
TAKEOVER_WATCH_SECONDS = 15.0  # and for how long at most
# the store
STORE_BUSY_EVERY = (2.0, 5.0)
STORE_BUSY_SECONDS = (0.3, 1.0)
WORKER_SQLITE_BUSY_TIMEOUT_MS = 500  # so the longer locks end in "database is locked"
VERBOSE = bool(os.environ.get("BURSTBOT_CHAOS_WORKER_LOGS"))  # worker logs to stderr
JITTER = 0.5  # process scheduling on a busy CI machine; added once to every bound

DISCORD, SLACK = "discord", "slack"


def mode_of(channel: str) -> str:
    """Which platform a conversation behaves like: even-numbered channels Discord, odd Slack."""
    return DISCORD if int(channel.lstrip("c")) % 2 == 0 else SLACK


def split_text(text: str, limit: int = PART_CHARS) -> list[str]:
    """Split at spaces into parts of at most `limit` characters (a longer word stays whole)."""
    parts: list[str] = []
    current = ""
    for word in text.split(" "):
        if current and len(current) + 1 + len(word) > limit:
            parts.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    parts.append(current)
    return parts


class FakePlatform:
    """Records every raw post; dedupes only like Discord (nonce, within a window) or not at all.

    `attempts`: every request, whatever became of it, with `status`, `answered_at` and, when it
    was slowed or rate-limited, `slow_seconds` / `retry_after`. `posts`: every post stored, in
    order, duplicates included (a Discord nonce seen within the window stores nothing new).
    A post shows (in `GET /posts` and to the checker) from the moment it is stored; a slow post
    is stored a little after it arrived and answered much later.
    """

    def __init__(self, rng: random.Random, ttl: float) -> None:
        self.rng = rng
        self.ttl = ttl
        self.attempts: list[dict[str, Any]] = []
        self.posts: list[dict[str, Any]] = []
        self._nonces: dict[str, dict[str, Any]] = {}  # Discord: nonce -> post it stored
        self.failures = 0
        self.rate_limited = 0
        self.slow = 0
        self.deduped = 0
        self.edits = 0

    async def post(self, request: web.Request) -> web.Response:
        body = await request.json()
        body["received_at"] = time.time()
        self.attempts.append(body)
        try:
            return await self._answer(body)
        finally:
            body["answered_at"] = time.time()

    async def _answer(self, body: dict[str, Any]) -> web.Response:
        roll = self.rng.random()
        if roll < P_POST_FAIL_BEFORE:
            self.failures += 1
            body["status"] = 503
            return web.Response(status=503)
        roll -= P_POST_FAIL_BEFORE
        if roll < P_POST_RATE_LIMITED:
            self.rate_limited += 1
            body["status"], body["retry_after"] = 429, self.rng.randint(*RETRY_AFTER)
            return web.Response(status=429, headers={"Retry-After": str(body["retry_after"])})
        roll -= P_POST_RATE_LIMITED
        if roll < P_POST_SLOW:
            self.slow += 1
            body["slow_seconds"] = self.rng.uniform(*SLOW_POST) * self.ttl
            shows_after = self.rng.uniform(*SLOW_SHOW) * self.ttl
            await asyncio.sleep(shows_after)
            post = self._store(body)
            await asyncio.sleep(body["slow_seconds"] - shows_after)
            body["status"] = 200
            return web.json_response({"id": post["id"]})
        post = self._store(body)
        if roll < P_POST_SLOW + P_POST_FAIL_AFTER:
            self.failures += 1
            body["status"] = 503
            return web.Response(status=503)
        body["status"] = 200
        return web.json_response({"id": post["id"]})

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        now = time.time()
        earlier = self._nonces.get(body["nonce"])
        if earlier is not None and now - earlier["stored_at"] < DISCORD_NONCE_WINDOW:
            self.deduped += 1
            return earlier
        post = body | {"id": f"p{len(self.posts) + 1}", "stored_at": now}
        self.posts.append(post)
        if mode_of(body["channel"]) == DISCORD:
            self._nonces[body["nonce"]] = post
        return post

    async def shown(self, request: web.Request) -> web.Response:
        """What a conversation shows of one reply: part -> the first stored post of that part
        (a streamed draft is found by its key, or by the reply that finished it)."""
        reply = request.query["reply"]
        parts: dict[str, str] = {}
        for post in self.posts:
            if reply in (post["reply"], post.get("finished_by")):
                parts.setdefault(str(post["part"]), post["id"])
        return web.json_response({"parts": parts})

    async def edit(self, request: web.Request) -> web.Response:
        """Edit a stored post (a streamed draft growing, or finished by its reply: `reply` and
        `parts` then say which reply it now is the first part of). Fails like a post may."""
        body = await request.json()
        self.edits += 1
        roll = self.rng.random()
        if roll < P_POST_FAIL_BEFORE:
            return web.Response(status=503)
        if roll < P_POST_FAIL_BEFORE + P_POST_RATE_LIMITED:
            self.rate_limited += 1
            return web.Response(status=429, headers={"Retry-After": "1"})
        post = next((p for p in self.posts if p["id"] == body["id"]), None)
        if post is None:
            return web.Response(status=404)
        post["text"] = body["text"]
        if body.get("reply"):
            post.update(finished_by=body["reply"], parts=body["parts"], final_at=time.time())
        return web.json_response({"id": post["id"]})


def configured_owner(lease_owner: str) -> str:
    """The worker's configured name: a process appends `:host:pid:random` to it."""
    return lease_owner.split(":", 1)[0]


@dataclass
class Worker:
    index: int
    generation: int
    process: asyncio.subprocess.Process
    port: int
    started_at: float

    @property
    def owner(self) -> str:
        return f"worker{self.index}.{self.generation}"


@dataclass
class Run:
    size: Size
    db_url: str
    platform_url: str
    rng: random.Random
    store: SqlStore
    workers: dict[int, Worker] = field(default_factory=dict)
    kills: list[tuple[float, str, dict[str, float]]] = field(default_factory=list)
    taken_over: dict[tuple[float, str], float] = field(default_factory=dict)  # see watch_takeover
    acked: dict[str, str] = field(default_factory=dict)  # message id -> conversation channel
    duplicate_deliveries: int = 0
    ingest_refused: int = 0  # a live worker answered an ingest with an error (the store failed)
    late_input: int = 0  # messages sent past their burst's deadline while it was being generated
    failed_starts: int = 0  # workers that exited at start (the store busy) and were started again
    drive_done: asyncio.Event = field(
        default_factory=asyncio.Event
    )  # no more bursts, kills, faults
    watching: bool = True  # the loop-lag gauge, until quiescence
    lags: list[tuple[float, float]] = field(default_factory=list)  # (when, how late)
    sending: asyncio.Event = field(default_factory=asyncio.Event)  # cleared for a quiet spell
    spells: list[tuple[float, float]] = field(default_factory=list)  # quiet spells (start, end)
    store_busy: list[tuple[float, float, str]] = field(default_factory=list)  # (start, end, how)
    cpu: list[tuple[str, float, float, float]] = field(default_factory=list)
    worker_starts: dict[str, float] = field(default_factory=dict)  # owner -> when it started
    sent: Counter[str] = field(default_factory=Counter)  # channel -> messages sent so far
    streaming: bool = False  # workers stream answers into drafts they edit (`STREAMING_INTERVAL`)

    def __post_init__(self) -> None:
        self.sending.set()

    def worker_db_url(self, owner: str) -> str:
        """On PostgreSQL a worker's connections carry its name, so one worker's can be cut."""
        if not self.db_url.startswith("postgres"):
            return self.db_url
        separator = "&" if "?" in self.db_url else "?"
        return f"{self.db_url}{separator}application_name={application_name(self.db_url, owner)}"

    async def start_worker(self, index: int, generation: int) -> Worker:
        """Start a worker; one that exits before serving (its store was locked at start) is
        started again, as a service manager would."""
        for _ in range(10):
            worker = await self._start_worker(index, generation)
            if worker is not None:
                return worker
            self.failed_starts += 1
            await asyncio.sleep(0.2)
        raise RuntimeError(f"worker{index}.{generation} did not start")

    async def _start_worker(self, index: int, generation: int) -> Worker | None:
        owner = f"worker{index}.{generation}"
        settings = {
            "owner": owner,
            "db_url": self.worker_db_url(owner),
            "sqlite_busy_timeout_ms": WORKER_SQLITE_BUSY_TIMEOUT_MS,
            "platform_url": self.platform_url,
            "engine": ENGINE,
            "streaming": self.streaming,
            "streaming_interval": STREAMING_INTERVAL,
            **REPLIER,
        }
        started_at = time.time()
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
            await process.wait()
            return None
        worker = Worker(index, generation, process, int(line.split()[1]), started_at)
        self.worker_starts[owner] = started_at
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
                    self.ingest_refused += 1
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.05)
        raise RuntimeError(f"no worker acknowledged {body['id']}")

    @property
    def driving(self) -> bool:
        return not self.drive_done.is_set()

    async def still_driving(self, seconds: float) -> bool:
        """Wait `seconds`, or less if the drive ends first; is it still on?"""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.drive_done.wait(), seconds)
        return self.driving

    async def send_once_or_twice(self, session: aiohttp.ClientSession, channel: str) -> None:
        await self.sending.wait()
        self.sent[channel] += 1
        n = self.sent[channel]
        if self.rng.random() < P_DUPLICATE_DELIVERY:
            self.duplicate_deliveries += 1
            await asyncio.gather(self.send(session, channel, n), self.send(session, channel, n))
        else:
            await self.send(session, channel, n)

    async def generating(self, channel: str) -> bool:
        state = await self.store.conversation_state(f"chaos/w/{channel}/")
        return state is not None and state.lease_owner is not None

    async def type_past_the_deadline(
        self,
        session: aiohttp.ClientSession,
        channel: str,
        seconds: float,
        gaps: tuple[float, float],
        in_spells: bool = False,
    ) -> None:
        """A person who never stops typing: the answer is generated at the deadline, and what
        arrives meanwhile is left for the next burst (G4), not a reason to cancel (G3). Only
        the spells' own typists type on through a quiet spell."""
        first = time.time()
        while time.time() < first + seconds:
            if not in_spells:
                await self.sending.wait()
            if time.time() > first + ENGINE["max_wait_seconds"] and await self.generating(channel):
                self.late_input += 1
            self.sent[channel] += 1
            await self.send(session, channel, self.sent[channel])
            await asyncio.sleep(self.rng.uniform(*gaps))

    async def drive_conversation(
        self, session: aiohttp.ClientSession, channel: str, bursts: int
    ) -> None:
        rng = self.rng
        await asyncio.sleep(rng.uniform(0, self.size.drive_seconds / max(bursts, 1)))
        for _ in range(bursts):
            if rng.random() < P_LATE_INPUT:
                seconds = ENGINE["max_wait_seconds"] + rng.uniform(0.4, 0.9)
                await self.type_past_the_deadline(session, channel, seconds, (0.08, 0.2))
            else:
                for _ in range(rng.choice([1, 1, 2, 3, 3, 4, 5])):
                    await self.send_once_or_twice(session, channel)
                    # mostly faster than the quiet window; sometimes a pause that lets
                    # generation start, so the next message supersedes it
                    pause = rng.uniform(0.3, 0.7) if rng.random() < 0.15 else rng.uniform(0.01, 0.2)
                    await asyncio.sleep(pause)
            gap = self.size.drive_seconds / max(bursts, 1)
            await asyncio.sleep(rng.uniform(0.3 * gap, 1.7 * gap))

    async def quiet_spells(self, session: aiohttp.ClientSession, channels: list[str]) -> None:
        """Now and then stop sending, but for a few people typing on past their deadline: the
        workers only wait on the model, the platform and their timers (see `sample_cpu`)."""
        while await self.still_driving(self.rng.uniform(*SPELL_EVERY)):
            self.sending.clear()
            start = time.time()
            await asyncio.gather(
                asyncio.sleep(SPELL_SECONDS),
                *(
                    self.type_past_the_deadline(
                        session, channel, SPELL_SECONDS - 0.2, (0.05, 0.1), in_spells=True
                    )
                    for channel in self.rng.sample(channels, SPELL_TYPISTS)
                ),
            )
            self.spells.append((start, time.time()))
            self.sending.set()

    async def sample_cpu(self) -> None:
        """Every worker's CPU time (user + system) per sample interval, from /proc."""
        last: dict[str, tuple[float, float]] = {}
        while True:
            for worker in list(self.workers.values()):
                used = cpu_seconds(worker.process.pid)
                now = time.time()
                if used is None:
                    continue
                before = last.get(worker.owner)
                if before is not None:
                    self.cpu.append((worker.owner, before[0], now, used - before[1]))
                last[worker.owner] = (now, used)
            await asyncio.sleep(CPU_SAMPLE_SECONDS)

    async def killer(self, channels: list[str]) -> None:
        """SIGKILL a worker that holds a lease (it is generating), then restart it."""
        store = self.store
        watchers: list[asyncio.Task[None]] = []
        while await self.still_driving(self.rng.uniform(0.5, 1.5) * self.size.kill_every):
            victims: list[Worker] = []
            while self.driving and not victims:  # wait for a worker caught generating
                holders: dict[str, list[str]] = {}
                for channel in channels:
                    state = await store.conversation_state(f"chaos/w/{channel}/")
                    if state is not None and state.lease_owner is not None:
                        owner = configured_owner(state.lease_owner)
                        holders.setdefault(owner, []).append(state.conversation_id)
                victims = [w for w in self.workers.values() if w.owner in holders]
                if not victims:
                    await asyncio.sleep(0.1)
            if not self.driving:
                break
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
            watch = self.watch_takeover(killed_at, victim.owner, leases)
            watchers.append(asyncio.create_task(watch))
            del self.workers[victim.index]
            await asyncio.sleep(self.rng.uniform(0.2, 1.0))
            await self.start_worker(victim.index, victim.generation + 1)
        await asyncio.gather(*watchers)

    async def watch_takeover(self, killed_at: float, victim: str, leases: dict[str, float]) -> None:
        """Note when another worker is first seen holding each lease the victim left (kill,
        conversation -> when). That is the takeover even when the new holder is killed in turn:
        a generation's record is written when it ends, so a killed one leaves none."""
        waiting = set(leases)
        while waiting and time.time() < killed_at + TAKEOVER_WATCH_SECONDS:
            for cid in sorted(waiting):
                state = await self.store.conversation_state(cid)
                owner = state.lease_owner if state is not None else None
                if owner is not None and configured_owner(owner) != victim:
                    self.taken_over[(killed_at, cid)] = time.time()  # after the read: no earlier
                    waiting.discard(cid)
            await asyncio.sleep(TAKEOVER_POLL_SECONDS)

    async def make_store_busy(self) -> None:
        """Now and then the database refuses or stalls everyone for up to a second."""
        while await self.still_driving(self.rng.uniform(*STORE_BUSY_EVERY)):
            try:
                self.store_busy.append(await self.store_busy_once())
            except Exception as exc:  # the fault itself failed (a lock not granted in time)
                print(f"chaos: store fault skipped: {exc!r}", file=sys.stderr)

    async def store_busy_once(self) -> tuple[float, float, str]:
        seconds = self.rng.uniform(*STORE_BUSY_SECONDS)
        if self.db_url.startswith("sqlite"):
            path = self.db_url.removeprefix("sqlite:///")
            start, end = await asyncio.to_thread(hold_sqlite_write_lock, path, seconds)
            return start, end, "sqlite write lock"
        if self.rng.random() < 0.5:
            start, end = await hold_postgres_table_lock(self.db_url, seconds)
            return start, end, "access exclusive lock"
        victim = self.rng.choice(list(self.workers.values()))
        at = await terminate_postgres_backends(
            self.db_url, application_name(self.db_url, victim.owner)
        )
        return at, at, f"connections of {victim.owner} terminated"


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process from /proc/<pid>/stat; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def application_name(db_url: str, owner: str) -> str:
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(db_url).query)
    schema = query.get("search_path", ["burstbot"])[0]
    return f"{schema}-{owner}"


def hold_sqlite_write_lock(path: str, seconds: float) -> tuple[float, float]:
    """Hold the database's write lock (`BEGIN EXCLUSIVE`; readers go on in WAL) for `seconds`."""
    connection = sqlite3.connect(path, timeout=5.0, isolation_level=None)
    try:
        connection.execute("BEGIN EXCLUSIVE")
        start = time.time()
        time.sleep(seconds)
        end = time.time()
        connection.execute("ROLLBACK")
        return start, end
    finally:
        connection.close()


async def hold_postgres_table_lock(db_url: str, seconds: float) -> tuple[float, float]:
    """ACCESS EXCLUSIVE on this run's conversations table: every step on it waits."""
    import asyncpg

    connection = await asyncpg.connect(db_url)
    try:
        async with connection.transaction():
            await connection.execute("SET LOCAL lock_timeout = '5s'")
            await connection.execute("LOCK TABLE conversations IN ACCESS EXCLUSIVE MODE")
            start = time.time()
            await asyncio.sleep(seconds)
            end = time.time()
        return start, end
    finally:
        await connection.close()


async def terminate_postgres_backends(db_url: str, name: str) -> float:
    """Cut every connection of one worker (its pool and its listener), as a failover would."""
    import asyncpg

    connection = await asyncpg.connect(db_url)
    try:
        await connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            name,
        )
        return time.time()
    finally:
        await connection.close()


async def watch_lag(run: Run) -> None:
    """How late this process's own timers fire: a gauge of how starved for CPU the machine is."""
    while run.watching:
        started = time.monotonic()
        await asyncio.sleep(0.05)
        run.lags.append((time.time(), time.monotonic() - started - 0.05))


async def quiesce(store: SqlStore, channels: list[str], within: float) -> None:
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


async def run_chaos(
    size_name: str, db_url: str, seed: int | None = None, streaming: bool = False
) -> dict[str, Any]:
    """Run the whole exercise and return the checker's counts (see `tests/chaos_check.py`)."""
    from tests.chaos_check import check

    size = SIZES[size_name]
    seed = random.randrange(2**32) if seed is None else seed
    rng = random.Random(seed)
    platform = FakePlatform(random.Random(rng.random()), ENGINE["lease_ttl_seconds"])
    app = web.Application()
    app.router.add_post("/post", platform.post)
    app.router.add_get("/posts", platform.shown)
    app.router.add_post("/edit", platform.edit)
    runner, port = await serve_locally(app, access_log=None)
    store = open_store(db_url, pool_size=2)
    run = Run(size, db_url, f"http://127.0.0.1:{port}", rng, store)
    run.streaming = streaming
    channels = [f"c{i}" for i in range(size.conversations)]
    background: list[asyncio.Task[None]] = []
    try:
        for index in range(size.workers):
            await run.start_worker(index, 0)
        await store.open()
        per_conversation = [size.bursts // size.conversations] * size.conversations
        for i in range(size.bursts % size.conversations):
            per_conversation[i] += 1
        started = time.time()
        background.append(asyncio.create_task(run.sample_cpu()))
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as session:
            killer = asyncio.create_task(run.killer(channels))
            busy = asyncio.create_task(run.make_store_busy())
            spells = asyncio.create_task(run.quiet_spells(session, channels))
            lag_watch = asyncio.create_task(watch_lag(run))
            await asyncio.gather(
                *(
                    run.drive_conversation(session, c, b)
                    for c, b in zip(channels, per_conversation, strict=True)
                )
            )
            run.drive_done.set()
            await asyncio.gather(killer, busy, spells)
        await quiesce(store, channels, within=60.0)
        run.watching = False
        await lag_watch
        idle_from = time.time()
        await asyncio.sleep(IDLE_TAIL_SECONDS)
        run.spells.append((idle_from, time.time()))
        drive_seconds = time.time() - started
        for worker in list(run.workers.values()):
            worker.process.send_signal(signal.SIGTERM)
        for worker in list(run.workers.values()):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(worker.process.wait(), 15)
        counts = await check(store, channels, run, platform, ENGINE, REPLIER, JITTER)
        counts["seconds"] = round(drive_seconds, 1)
        counts["seed"] = seed  # the driver's and the platform's choices; timing is the machine's
        return counts
    finally:
        for task in background:
            task.cancel()
        for worker in run.workers.values():
            if worker.process.returncode is None:
                worker.process.kill()
                await worker.process.wait()
        await store.close()
        await runner.cleanup()
