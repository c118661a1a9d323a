"""The live chaos run: real `burstbot run` processes behind the fake Slack, Discord and Claude.

Every worker is the real command line with a config file: Slack in HTTP mode through Bolt (its
`AsyncWebClient` pointed at the fake Web API by `slack.api_base_url`), Discord through discord.py
(its REST base and gateway pointed at the fake Discord by the launcher below, the way the
project's CLI tests do: the config has no Discord URL), Claude through the Anthropic SDK
(`llm.base_url`), streaming as configured (on by default). All workers share one database and
serve both front ends.

The parent process runs the fakes (`tests/live_chaos_platforms.py`) and:

- the people: bursts of DMs in every conversation. A Slack message lands in the DM's history and
  its signed event goes to a random live worker's endpoint, as a load balancer would, retried
  (`X-Slack-Retry-Num`) until one acknowledges; some go to two workers at once. A Discord message
  goes to every worker on the shard through the gateway, some replayed. Some people pause just
  long enough for generation to start (the next message supersedes it), some type on past their
  burst's deadline;
- the killer: `kill -9` or SIGTERM of a worker, mostly one caught generating, then a restart.

After the people stop it waits until the store has answered everything and nothing is in flight,
stops the workers with SIGTERM, and hands the fakes' records to `tests/live_chaos_check.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bot.core.events import ConversationKey
from storage import open_store
from storage.sql_store import SqlStore
from testkit.fake_slack import TEAM, EventSender, dm
from tests.live_chaos_platforms import (
    ChaoticDiscord,
    ChaoticModel,
    ChaoticSlack,
    FaultRoller,
    Faults,
    Ledger,
    ModelFaults,
)

ROOT = Path(__file__).resolve().parent.parent
SIGNING_SECRET = "live-chaos-signing-secret"
ALICE = {"id": "200000000000000001", "username": "alice", "discriminator": "0",
         "global_name": "Alice", "avatar": None}  # fmt: skip
DISCORD_DM_BASE = 400_000_000_000_100_000


@dataclass(frozen=True)
class Size:
    workers: int
    conversations: int  # per platform
    bursts: int  # over both platforms
    drive_seconds: float
    kill_every: float
    settle_within: float  # after the people stop: longer means a conversation is stuck


SIZES = {
    "ci": Size(
        workers=3,
        conversations=5,
        bursts=44,
        drive_seconds=22.0,
        kill_every=4.0,
        settle_within=25.0,
    ),
    "full": Size(
        workers=3,
        conversations=30,
        bursts=500,
        drive_seconds=120.0,
        kill_every=5.0,
        settle_within=90.0,
    ),
}
QUIET_SECONDS = 0.4
MAX_WAIT_SECONDS = 1.5
LEASE_TTL_SECONDS = 2.0
STREAM_INTERVAL_SECONDS = 0.1
DISCORD_NONCE_WINDOW = 10.0  # Discord's few minutes, scaled like the lease TTL (30 s -> 2 s)
FAILURE_MESSAGE = "sorry apology"
P_TWO_WORKERS = 0.15  # a Slack event delivered to two workers at once
P_REPLAY = 0.1  # a Discord event sent again (a RESUME replay)
P_LATE_INPUT = 0.12  # a burst typed on past its deadline
P_SIGTERM = 0.35  # of the killer's signals; the rest are kill -9
EVENT_TIMEOUT = 3.0  # Slack waits this long for an ack before it retries
IDLE_TAIL_SECONDS = 2.0
VERBOSE = bool(os.environ.get("BURSTBOT_CHAOS_WORKER_LOGS"))


@dataclass(frozen=True)
class Conversation:
    platform: str  # "slack" or "discord"
    index: int

    @property
    def channel(self) -> str:
        if self.platform == "slack":
            return f"D{self.index + 1:04d}"
        return str(DISCORD_DM_BASE + self.index)

    @property
    def key(self) -> ConversationKey:
        workspace = TEAM if self.platform == "slack" else "dm"
        return ConversationKey(self.platform, workspace, self.channel)

    def marker(self, n: int) -> str:
        return f"{self.platform[0]}{self.index}m{n}"


@dataclass
class Worker:
    index: int
    generation: int
    process: asyncio.subprocess.Process
    slack_port: int

    @property
    def owner(self) -> str:
        return f"w{self.index}.{self.generation}"


@dataclass
class Run:
    """One run's processes, fakes and what it did; `counts` is filled as it goes."""

    size: Size
    db_url: str
    directory: Path
    rng: random.Random
    store: SqlStore
    slack: ChaoticSlack
    discord: ChaoticDiscord
    model: ChaoticModel
    ledger: Ledger
    streaming: bool
    conversations: list[Conversation]
    workers: dict[int, Worker] = field(default_factory=dict)
    sent: dict[Conversation, list[str]] = field(default_factory=dict)  # markers, in order
    driving: bool = True

    # workers ----------------------------------------------------------------------------------
    def config_text(self, owner: str, slack_port: int) -> str:
        return f"""
[storage]
url = "{self.db_url}"
pool_size = 4

[debounce]
adaptive = false
quiet_seconds = {QUIET_SECONDS}
max_wait_seconds = {MAX_WAIT_SECONDS}

[lease]
ttl_seconds = {LEASE_TTL_SECONDS}

[engine]
poll_seconds = 0.1
busy_retry_seconds = 0.1
delivery_max_attempts = 12
delivery_backoff_seconds = 0.1
indicator_delay_seconds = 30
owner = "{owner}"

[llm]
provider = "anthropic"
base_url = "{self.model.server.base_url}"
max_retries = 1
max_tokens = 4096
timeout_seconds = 4
max_attempts = 4
retry_backoff_seconds = 0.2
failure_message = "{FAILURE_MESSAGE}"

[streaming]
enabled = {"true" if self.streaming else "false"}
interval_seconds = {STREAM_INTERVAL_SECONDS}

[limits]
# The run checks delivery, not budgets: a budget notice would stand in for an answer.
user_daily_tokens = 0
channel_daily_tokens = 0

[console]
enabled = false

[logging]
level = "{"INFO" if VERBOSE else "WARNING"}"

[slack]
enabled = true
mode = "http"
api_base_url = "{self.slack.url}"
http_port = {slack_port}
thinking_indicator = "off"

[discord]
enabled = true
nonce_window_seconds = {DISCORD_NONCE_WINDOW / 2}
"""

    async def start_worker(self, index: int, generation: int) -> Worker:
        owner = f"w{index}.{generation}"
        port = free_port()
        config = self.directory / f"{owner}.toml"
        config.write_text(self.config_text(owner, port), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "ANTHROPIC_"))}
        env.update(PYTHONPATH=str(ROOT), SLACK_BOT_TOKEN=self.slack.token,
                   SLACK_SIGNING_SECRET=SIGNING_SECRET, DISCORD_TOKEN=self.discord.token,
                   ANTHROPIC_API_KEY="sk-live-chaos")  # fmt: skip
        log = open(self.directory / f"{owner}.log", "wb")  # noqa: ASYNC230, SIM115 (the child's)
        process = await asyncio.create_subprocess_exec(
            *self.discord.run_command(config), cwd=self.directory, env=env, stdout=log, stderr=log
        )
        log.close()
        worker = Worker(index, generation, process, port)
        await self.until_serving(worker)
        self.workers[index] = worker
        return worker

    async def until_serving(self, worker: Worker) -> None:
        """Its Slack endpoint accepts connections and it is on the Discord gateway (bounded:
        a worker that is slow to start is still started)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and worker.process.returncode is None:
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", worker.slack_port)
                writer.close()
                if self.discord.connections >= len(self.workers) + 1:
                    return
            await asyncio.sleep(0.1)

    async def stop_worker(self, worker: Worker, how: signal.Signals) -> None:
        worker.process.send_signal(how)
        try:
            await asyncio.wait_for(worker.process.wait(), 30)
        except TimeoutError:
            self.ledger.counts["sigterm_too_slow"] += 1
            worker.process.kill()
            await worker.process.wait()
        self.workers.pop(worker.index, None)

    # the people -------------------------------------------------------------------------------
    async def say(self, http: aiohttp.ClientSession, conversation: Conversation) -> None:
        markers = self.sent.setdefault(conversation, [])
        marker = conversation.marker(len(markers) + 1)
        markers.append(marker)
        if conversation.platform == "slack":
            ts = self.slack.say(conversation.channel, marker)
            await self.deliver_slack_event(dm(ts, marker, channel=conversation.channel))
            return
        message = self.discord.message(int(conversation.channel), ALICE, marker)
        await self.discord.dispatch("MESSAGE_CREATE", message)
        if self.rng.random() < P_REPLAY:
            self.ledger.counts["discord_replays"] += 1
            await self.discord.dispatch("MESSAGE_CREATE", message)

    async def deliver_slack_event(self, event: dict[str, Any]) -> None:
        """Like Slack: to some live worker, again (with the retry number) until acknowledged."""
        event_id = f"Ev{self.rng.randrange(16**10):010x}"
        if self.rng.random() < P_TWO_WORKERS and len(self.workers) > 1:
            self.ledger.counts["events_to_two_workers"] += 1
            first, second = self.rng.sample(list(self.workers.values()), 2)
            acked = await asyncio.gather(
                self.send_event(first, event, event_id, None),
                self.send_event(second, event, event_id, 1),
            )
            if any(acked):
                return
        retry = 0
        while True:
            live = list(self.workers.values())
            if live and await self.send_event(
                self.rng.choice(live), event, event_id, retry or None
            ):
                return
            retry += 1
            self.ledger.counts["event_retries"] += 1
            await asyncio.sleep(0.2)

    async def send_event(
        self, worker: Worker, event: dict[str, Any], event_id: str, retry: int | None
    ) -> bool:
        sender = EventSender(f"http://127.0.0.1:{worker.slack_port}/slack/events", SIGNING_SECRET)
        try:
            async with asyncio.timeout(EVENT_TIMEOUT):
                return await sender.send(event, retry_num=retry, event_id=event_id) == 200
        except (TimeoutError, aiohttp.ClientError):
            return False

    async def converse(
        self, http: aiohttp.ClientSession, conversation: Conversation, bursts: int
    ) -> None:
        rng = self.rng
        gap = self.size.drive_seconds / max(bursts, 1)
        await asyncio.sleep(rng.uniform(0, gap))
        for _ in range(bursts):
            if rng.random() < P_LATE_INPUT:
                self.ledger.counts["typed_past_deadline"] += 1
                first = time.monotonic()
                while time.monotonic() < first + MAX_WAIT_SECONDS + rng.uniform(0.5, 1.0):
                    await self.say(http, conversation)
                    await asyncio.sleep(rng.uniform(0.15, 0.3))
            else:
                for _ in range(rng.choice([1, 1, 2, 3, 3, 4])):
                    await self.say(http, conversation)
                    # mostly within the quiet window; now and then a pause that lets generation
                    # start, so the next message supersedes it
                    late = rng.random() < 0.15
                    await asyncio.sleep(rng.uniform(0.5, 0.9) if late else rng.uniform(0.02, 0.2))
            await asyncio.sleep(rng.uniform(0.5 * gap, 1.5 * gap) + QUIET_SECONDS)

    # the killer -------------------------------------------------------------------------------
    async def generating_workers(self) -> list[Worker]:
        owners = set()
        for conversation in self.conversations:
            state = await self.store.conversation_state(conversation.key.id)
            if state is not None and state.lease_owner is not None:
                owners.add(state.lease_owner.split(":", 1)[0])
        return [w for w in self.workers.values() if w.owner in owners]

    async def killer(self) -> None:
        """Every few seconds a stop, mostly of a worker caught generating: the first two are a
        kill -9 and a SIGTERM (in either order), then each a SIGTERM now and then."""
        first_two = [signal.SIGKILL, signal.SIGTERM]
        self.rng.shuffle(first_two)
        while self.driving:
            await asyncio.sleep(self.rng.uniform(0.5, 1.5) * self.size.kill_every)
            if not self.driving:
                return
            victims: list[Worker] = []
            for _ in range(20):  # mostly one caught generating
                victims = await self.generating_workers()
                if victims:
                    break
                await asyncio.sleep(0.1)
            victim = self.rng.choice(victims or list(self.workers.values()))
            if first_two:
                how = first_two.pop()
            else:
                how = signal.SIGTERM if self.rng.random() < P_SIGTERM else signal.SIGKILL
            self.ledger.counts["sigterms" if how == signal.SIGTERM else "kills"] += 1
            self.ledger.counts["stopped_while_generating"] += bool(victims)
            await self.stop_worker(victim, how)
            await asyncio.sleep(self.rng.uniform(0.3, 1.0))
            await self.start_worker(victim.index, victim.generation + 1)

    # the end ----------------------------------------------------------------------------------
    async def settled(self) -> bool:
        for conversation in self.conversations:
            state = await self.store.conversation_state(conversation.key.id)
            if state is None:
                return False  # a message not stored yet (a Discord one is caught up later)
            if state.answered_version < state.version or state.timer is not None:
                return False
            if any(r.state == "pending" for r in await self.store.replies(conversation.key.id)):
                return False
        return True

    async def settle(self) -> None:
        deadline = time.monotonic() + self.size.settle_within
        while time.monotonic() < deadline and not await self.settled():  # noqa: ASYNC110
            await asyncio.sleep(0.5)
        if time.monotonic() >= deadline:
            self.ledger.counts["not_settled"] += 1


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def run_live_chaos(
    size_name: str, db_url: str, directory: Path, seed: int | None = None, streaming: bool = True
) -> dict[str, Any]:
    """The whole exercise; returns the checker's counts (`tests/live_chaos_check.py`)."""
    from tests.live_chaos_check import check

    size = SIZES[size_name]
    seed = random.randrange(2**32) if seed is None else seed
    rng = random.Random(seed)
    ledger = Ledger()
    roller = FaultRoller(random.Random(rng.random()), Faults(), LEASE_TTL_SECONDS, ledger)
    model = ChaoticModel(random.Random(rng.random()), ModelFaults(), ledger)
    slack = ChaoticSlack(roller, model.still_streaming)
    discord = ChaoticDiscord(roller, model.still_streaming, DISCORD_NONCE_WINDOW)
    conversations = [Conversation(p, i) for p in ("slack", "discord")
                     for i in range(size.conversations)]  # fmt: skip
    for conversation in conversations:
        if conversation.platform == "discord":
            discord.add_channel(int(conversation.channel), "dm", recipient=ALICE)
    store = open_store(db_url, pool_size=2)
    await model.server.start()
    await slack.start()
    await discord.__aenter__()
    run = Run(size, db_url, directory, rng, store, slack, discord, model, ledger, streaming,
              conversations)  # fmt: skip
    try:
        await asyncio.gather(*(run.start_worker(i, 0) for i in range(size.workers)))
        await store.open()
        per_conversation = [size.bursts // len(conversations)] * len(conversations)
        for i in range(size.bursts % len(conversations)):
            per_conversation[i] += 1
        started = time.monotonic()
        async with aiohttp.ClientSession() as http:
            killer = asyncio.create_task(run.killer())
            await asyncio.gather(
                *(
                    run.converse(http, c, n)
                    for c, n in zip(conversations, per_conversation, strict=True)
                )
            )
            run.driving = False
            await killer
        await run.settle()
        await asyncio.sleep(IDLE_TAIL_SECONDS)
        for worker in list(run.workers.values()):
            worker.process.send_signal(signal.SIGTERM)
        for worker in list(run.workers.values()):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(worker.process.wait(), 30)
        counts = await check(run)
        counts["seconds"] = round(time.monotonic() - started, 1)
        counts["seed"] = seed
        return counts
    finally:
        for worker in run.workers.values():
            if worker.process.returncode is None:
                worker.process.kill()
                await worker.process.wait()
        await store.close()
        await discord.__aexit__(None, None, None)
        await slack.stop()
        await model.server.stop()
