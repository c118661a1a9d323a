"""`python -m benchmarks.capacity [--scale S] [--postgres DSN]`: busy at the model.

100 conversations ask at once; every answer streams for 10 s after a 0.5 s first token; the fake
Messages API (testkit) applies an organisation's limits of 50 requests and 400,000 input tokens a
minute as the API does (429 with retry-after past them). Admission by the API's limits
(bot/core/admission.py) is measured beside the fixed policy it replaces (8 generations at once
per process, no admission) in the same run, in three scenarios:

- one process on SQLite, 100 conversations in one workspace;
- two processes on PostgreSQL sharing the key (50 conversations each);
- one process, one workspace sending 80 of the 100 (asked first) and another 20.

**Time-scaled**, said plainly: the engines, the store's protocol times and the fake API's budgets
and answers run on one clock `S` times faster than real time (`ScaledClock`; the fake's deltas
are paced in real time divided by `S`), so a minute of limits takes 60/S real seconds. HTTP,
SQLite and PostgreSQL work is real and counts `S` times over. "Two processes" are two OS
processes (benchmarks/capacity_processes.py), each with its own store (its own PostgreSQL pool),
replier, scheduler and admission, on the same scaled clock; they share only the database and the
API key. The admission policy bounds starts by the process's CPU too, as a running bot does (the
CPU a scaled second would take in real time).

"At once" is made exact: the 100 messages are stored first with the schedulers not yet running,
every quiet window is let close, and then the schedulers start, so all 100 bursts are due at the
same moment (arrivals stored one by one would otherwise spread the due times over the time
storing takes, times the scale).

Printed per scenario and policy, in scaled seconds from the moment all were due: answered (and
lost), requests and 429s; the last answer's first word as the fake API streamed it to burstbot
("1st token": what admission decides) and as the chat showed it (the first post of its draft on
the recording front end, "on chat": that adds the draft machinery's own latency, times the
scale); beside them the earliest time the limit allows (computed: the bucket's 50 at once, then
one each 1.2 s, plus the 0.5 s first token). The fairness scenario adds the small
workspace's last first token and the earliest its fair share allows (its 20 among the first 40
starts). SQLite files live in
/dev/shm where there is one: a disk's fsync per arrival would count `S` times over.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.postgres import DSN_ENV
from bot.config import parse_config
from bot.core.cpu_budget import CpuBudget
from bot.core.events import ConversationKey, IncomingMessage, Reply
from bot.core.settings import EngineSettings
from bot.wiring import Serving, build_serving, claude_replier
from storage.sql_store import SqlStore
from storage.sqlite import SqliteStore
from testkit.fake_anthropic import FakeAnthropic, Plan
from testkit.frontend import Post, RecordingFrontend
from testkit.rate_limits import ApiLimits

REQUESTS_PER_MINUTE = 50
INPUT_TOKENS_PER_MINUTE = 400_000
ANSWER_SECONDS = 10.0
FIRST_TOKEN_SECONDS = 0.5
WORDS = 40
QUIET_SECONDS = 1.5
KEY_ENV = "CAPACITY_BENCH_KEY"
FIXED_SLOTS = 8


class ScaledClock:
    """Time `scale` times faster than the real clock: `now` and `monotonic` run fast, sleeps are
    short."""

    def __init__(
        self, scale: float, start: float | None = None, origin: float | None = None
    ) -> None:
        """`start` (a `time.monotonic()` reading) and `origin` (the wall time then) given: the
        same clock as another process's (the monotonic clock is the host's, shared)."""
        self.scale = scale
        self._start = time.monotonic() if start is None else start
        self._origin = time.time() if origin is None else origin

    @property
    def reference(self) -> tuple[float, float]:
        """What another process needs to run on this same clock."""
        return self._start, self._origin

    def monotonic(self) -> float:
        return self._start + (time.monotonic() - self._start) * self.scale

    def now(self) -> float:
        return self._origin + (time.monotonic() - self._start) * self.scale

    def scaled(self, real_monotonic: float) -> float:
        """A reading of the real `time.monotonic()` on this clock's `monotonic`."""
        return self._start + (real_monotonic - self._start) * self.scale

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) / self.scale)

    async def sleep_until(self, when: float) -> None:
        await asyncio.sleep(max(0.0, when - self.now()) / self.scale)


class TimedFrontend(RecordingFrontend):
    """The recording front end, noting when each conversation first showed anything."""

    def __init__(self, clock: ScaledClock) -> None:
        super().__init__(drafts=True)
        self.timer = clock
        self.first_shown: dict[str, float] = {}
        self.answered: set[str] = set()

    def _post(self, post: Post) -> str:
        self.first_shown.setdefault(post.key.id, self.timer.now())
        return super()._post(post)

    async def deliver(self, reply: Reply) -> list[str]:
        ids = await super().deliver(reply)
        self.answered.add(reply.key.id)
        return ids


@dataclass
class Outcome:
    scenario: str
    policy: str
    asked: int
    answered: int
    requests: int
    refused: int
    last_word: float
    last_token: float
    earliest: float
    small_last_word: float = math.nan
    small_fair: float = math.nan
    small_rank: int = 0  # first tokens (everyone's) by the small workspace's last one ...
    small_share: int = 0  # ... against the starts its fair share fits in (its own, twice)
    notes: list[str] = field(default_factory=list)


def earliest_start(k: int) -> float:
    """When the k-th request (1-based) may start under the limit: the minute's bucket holds 50
    at once, then one each 60/50 s (input tokens never bind here: a prompt is ~100 tokens)."""
    return max(0.0, (k - REQUESTS_PER_MINUTE) * 60.0 / REQUESTS_PER_MINUTE)


def earliest_word(k: int) -> float:
    """The k-th first word, from the moment every window had closed."""
    return earliest_start(k) + FIRST_TOKEN_SECONDS


async def limited_api(clock: ScaledClock) -> tuple[FakeAnthropic, ApiLimits]:
    """The fake Messages API with the organisation's limits, answers streamed over 10 s."""
    scale = clock.scale
    api = ApiLimits(
        REQUESTS_PER_MINUTE, INPUT_TOKENS_PER_MINUTE, clock=clock.monotonic, wall=clock.now
    )
    delay = (ANSWER_SECONDS - FIRST_TOKEN_SECONDS) / (WORDS - 1) / scale
    text = " ".join(f"word{n}" for n in range(WORDS))
    plan = Plan(text=text, delay=delay, first_delay=FIRST_TOKEN_SECONDS / scale)
    return await FakeAnthropic(default_plan=plan, limits=api).start(), api


def conversations(workspaces: Sequence[tuple[str, int]]) -> list[ConversationKey]:
    return [
        ConversationKey("test", workspace, f"c{n}")
        for workspace, count in workspaces
        for n in range(count)
    ]


def serve(
    store: SqlStore[Any],
    clock: ScaledClock,
    policy: str,
    base_url: str,
    owner: str,
    frontend: TimedFrontend,
) -> Serving:
    """One process's serving core, by `policy`: "fixed" (8 slots, no admission) or "admission"
    (the API's limits and this process's CPU, as a running bot; the CPU a scaled second would
    take in real time, as the work of `scale` seconds is done in one)."""
    os.environ[KEY_ENV] = "sk-capacity-bench"
    llm = {"base_url": base_url, "api_key_env": KEY_ENV, "max_retries": 2}
    settings = EngineSettings(
        quiet_seconds=QUIET_SECONDS,
        adaptive=False,
        speculate=False,
        streaming=True,
        max_concurrent_generations=FIXED_SLOTS if policy == "fixed" else 1_000,
        poll_seconds=1.0,
        system_prompt="You are a helpful assistant.",
    )
    scale = clock.scale
    cpu = None if policy == "fixed" else CpuBudget(lambda: time.process_time() / scale)
    replier = claude_replier(parse_config({"llm": llm}))
    serving = build_serving(store, replier, clock, settings, owner, {"test": frontend}, cpu=cpu)
    if policy == "fixed":
        serving.engine.admission = None  # the old policy: slots only
    return serving


def first_tokens(
    model: FakeAnthropic, keys: Sequence[ConversationKey], clock: ScaledClock, started_mono: float
) -> dict[str, float]:
    """Each conversation's first token as the fake API streamed it, from `started_mono`."""
    streamed: dict[str, float] = {}
    for record in model.streams:
        if record.delta_times:
            asked = model.requests[record.request_index].last_user_text
            cid = keys[int(asked.rsplit(" ", 1)[-1])].id
            at = clock.scaled(record.delta_times[0]) - started_mono
            streamed[cid] = min(streamed.get(cid, math.inf), at)
    return streamed


def outcome(
    name: str,
    policy: str,
    workspaces: Sequence[tuple[str, int]],
    answered: int,
    api: ApiLimits,
    shown: Mapping[str, float],
    streamed: Mapping[str, float],
    notes: list[str],
) -> Outcome:
    keys = sum(count for _, count in workspaces)
    result = Outcome(
        name,
        policy,
        keys,
        answered,
        len(api.answered),
        api.refused,
        max(shown.values(), default=math.nan),
        max(streamed.values(), default=math.nan),
        earliest_word(keys),
        notes=notes,
    )
    if len(workspaces) > 1:
        small, count = workspaces[-1]
        result.small_last_word = max(
            (at for cid, at in streamed.items() if ConversationKey.parse(cid).workspace == small),
            default=math.nan,
        )
        large = sum(c for _, c in workspaces[:-1])
        result.small_share = 2 * min(count, large)
        result.small_fair = earliest_word(result.small_share)
        result.small_rank = sum(at <= result.small_last_word for at in streamed.values())
    return result


async def shut(serving: Serving) -> None:
    serving.engine.stop_taking_work()
    await serving.engine.finish(0.0)
    await serving.engine.release()
    await serving.engine.replier.aclose()  # type: ignore[attr-defined]


async def scenario(
    name: str,
    policy: str,
    stores: Sequence[SqlStore[Any]],
    workspaces: Sequence[tuple[str, int]],
    scale: float,
) -> Outcome:
    clock = ScaledClock(scale)
    model, api = await limited_api(clock)
    frontend = TimedFrontend(clock)
    servings = [
        serve(store, clock, policy, model.base_url, f"p{n}", frontend)
        for n, store in enumerate(stores)
    ]
    keys = conversations(workspaces)
    asking = clock.now()
    await asyncio.gather(
        *(
            servings[n % len(servings)].engine.ingest(
                IncomingMessage(key, f"m-{key.id}", f"u{n}", f"user{n}", f"hi {n}")
            )
            for n, key in enumerate(keys)
        )
    )
    spread = clock.now() - asking
    await clock.sleep(QUIET_SECONDS + 0.1)  # every window closed: all due at once
    started, started_mono = clock.now(), clock.monotonic()
    runs = [asyncio.create_task(serving.scheduler.run()) for serving in servings]
    limit = started + 400.0
    while len(frontend.answered) < len(keys) and clock.now() < limit:
        await clock.sleep(1.0)
    for serving in servings:
        serving.scheduler.stop()
    await asyncio.gather(*runs, return_exceptions=True)
    for serving in servings:
        await shut(serving)
    await model.stop()
    shown = {cid: at - started for cid, at in frontend.first_shown.items()}
    streamed = first_tokens(model, keys, clock, started_mono)
    notes = [f"asking took {spread:.1f} s, then every window closed"]
    answered = len(frontend.answered)
    return outcome(name, policy, workspaces, answered, api, shown, streamed, notes)


async def sqlite_stores(folder: str, name: str) -> list[SqlStore[Any]]:
    store = SqliteStore(os.path.join(folder, f"{name}.db"))  # in memory-backed files if any
    await store.open()
    return [store]


async def run(scale: float, dsn: str | None, files: str | None) -> list[Outcome]:
    outcomes = []
    with tempfile.TemporaryDirectory(dir=files) as folder:
        for policy in ("fixed", "admission"):
            stores = await sqlite_stores(folder, f"one-{policy}")
            outcomes.append(
                await scenario("one process, SQLite", policy, stores, [("w1", 100)], scale)
            )
            for store in stores:
                await store.close()
        for policy in ("fixed", "admission"):
            stores = await sqlite_stores(folder, f"fair-{policy}")
            split = [("big", 80), ("small", 20)]
            outcomes.append(await scenario("80/20 workspaces", policy, stores, split, scale))
            for store in stores:
                await store.close()
    if dsn is not None:
        from benchmarks.capacity_processes import two_processes

        for policy in ("fixed", "admission"):
            outcomes.append(await two_processes(policy, dsn, [("w1", 100)], scale))
    return outcomes


def table(outcomes: list[Outcome], scale: float) -> str:
    lines = [
        f"time-scaled x{scale:g}; (scaled) seconds from the moment all 100 were due",
        f"{'scenario':26} {'policy':9} {'answered':>9} {'requests':>8} {'429s':>4} "
        f"{'1st token':>9} {'ratio':>5} {'on chat':>7} {'ratio':>5} {'earliest':>8} "
        f"{'small ws':>8} {'its share':>9} {'by then':>7}",
    ]
    for o in outcomes:
        small = "" if math.isnan(o.small_last_word) else f"{o.small_last_word:8.1f}"
        fair = "" if math.isnan(o.small_fair) else f"{o.small_fair:9.1f}"
        rank = f"{o.small_rank}/{o.small_share}" if o.small_share else ""
        lines.append(
            f"{o.scenario:26} {o.policy:9} {o.answered:>4}/{o.asked:<4} {o.requests:>8} "
            f"{o.refused:>4} {o.last_token:>9.1f} {o.last_token / o.earliest:>5.2f} "
            f"{o.last_word:>7.1f} {o.last_word / o.earliest:>5.2f} {o.earliest:>8.1f} "
            f"{small:>8} {fair:>9} {rank:>7}  {'; '.join(o.notes)}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=10.0, help="time runs this much faster")
    parser.add_argument("--postgres", default=os.environ.get(DSN_ENV), help="DSN (two processes)")
    args = parser.parse_args()
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None  # fsyncs would count S times over
    outcomes = asyncio.run(run(args.scale, args.postgres or None, shm))
    print(table(outcomes, args.scale))


if __name__ == "__main__":
    main()
