"""`python -m benchmarks.stop_latency`: a Stop click acknowledged → the model stream closed, beside
a newer message acknowledged → the model stream closed (the supersede path), in one run.

The real `Engine` + `Scheduler` + store (a SQLite file, and PostgreSQL in a schema of its own when
a server is given) on the system clock, with a streaming front end that drafts
(`RecordingFrontend`) and an in-process model that writes a word every `--word-seconds` for far
longer than a sample lasts (a conversation's later call answers at once). Each conversation gets
one message; once its answer streams and the draft is on the platform, either a Stop click on that
draft goes in through `Engine.click` (what the Slack and Discord adapters call; they acknowledge
the platform as soon as it returns), or a second message goes in through `Engine.ingest` (what
they call for a message; they acknowledge after it). The clock starts when that call returns and
stops when the model's stream task is cancelled (its `CancelledError` is the stream closing). Stop
and supersede samples alternate, so both see the same load. Real time, not a test: nothing here is
asserted beyond each click having acted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from benchmarks.ingest import percentile
from benchmarks.postgres import DSN_ENV, scratch_schema
from benchmarks.tally import FIXED_WINDOW
from bot.core.clicks import Click
from bot.core.clock import SystemClock
from bot.core.engine import Engine
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.replier import GenerationProgress, Prompt
from bot.wiring import build_serving
from storage.sql_store import SqlStore
from testkit import RecordingFrontend
from testkit.engine import shut_down

PLATFORM = "bench"
GOAL_MS = 50.0
Path = Literal["stop", "supersede"]
PATHS: tuple[Path, ...] = ("stop", "supersede")
LABELS: dict[Path, str] = {
    "stop": "Stop click acknowledged (`Engine.click` returned)",
    "supersede": "newer message acknowledged (`Engine.ingest` returned): the supersede path",
}


@dataclass
class Stream:
    """A conversation's first model call as the model saw it: its first word out, its close."""

    first_word: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    closed_at: float = 0.0
    called: bool = False


class EndlessModel:
    """A `Replier` that streams a word every `word_seconds` for `words` words; the conversation's
    tag is the first word of the burst's first message. Notes when a first call is cancelled; a
    later call (the burst after a supersede) answers at once: no stream outlives its sample."""

    def __init__(self, word_seconds: float, words: int) -> None:
        self.word_seconds, self.words = word_seconds, words
        self.first_calls: dict[str, Stream] = {}

    def first_call(self, tag: str) -> Stream:
        return self.first_calls.setdefault(tag, Stream())

    async def generate(self, prompt: Prompt, usage: GenerationProgress) -> str:
        stream = self.first_call(prompt.burst[0].text.split()[0])
        if stream.called:  # the newer burst after a supersede: not measured, answered at once
            usage.output_tokens += 1
            return "done"
        stream.called = True
        try:
            for n in range(self.words):
                usage.streamed.append(f"word{n} ")
                usage.output_tokens += 1
                stream.first_word.set()
                await asyncio.sleep(self.word_seconds)
        except asyncio.CancelledError:
            stream.closed_at = time.monotonic()
            stream.closed.set()
            raise
        return "".join(f"word{n} " for n in range(self.words))


@dataclass(frozen=True)
class Measured:
    store: str
    samples: dict[Path, list[float]]  # ms from the acknowledged call to the stream closed
    not_acted: int  # stop clicks that did not stop (none expected)
    load_start: tuple[float, float, float]
    load_end: tuple[float, float, float]
    seconds: float


@asynccontextmanager
async def serving(
    store: SqlStore[Any], word_seconds: float
) -> AsyncIterator[tuple[Engine, EndlessModel]]:
    """The engine and scheduler as `burstbot run` wires them, on the given store."""
    model = EndlessModel(word_seconds, words=100_000)
    settings = replace(
        FIXED_WINDOW,
        streaming=True,
        quiet_seconds=0.05,
        max_wait_seconds=60.0,
        max_concurrent_generations=256,
    )
    frontend = RecordingFrontend(PLATFORM, drafts=True, clock=SystemClock())
    parts = build_serving(store, model, SystemClock(), settings, "bench", {PLATFORM: frontend})
    await store.open()
    loop = asyncio.create_task(parts.scheduler.run())
    try:
        yield parts.engine, model
    finally:
        parts.scheduler.stop()
        await loop
        await shut_down(parts.engine)
        await store.close()


async def one_sample(
    engine: Engine, model: EndlessModel, store: SqlStore[Any], i: int, path: Path
) -> tuple[float, bool]:
    """One conversation: its answer streams onto a draft, then a stop or a newer message; the ms
    from that call's return to the model's stream closing, and whether the call acted."""
    tag = f"{path}{i}"
    key = ConversationKey(PLATFORM, "w", tag)
    await engine.ingest(IncomingMessage(key, f"{tag}-1", "u1", "alice", f"{tag} tell me a story"))
    async with asyncio.timeout(30):
        stream = model.first_call(tag)
        await stream.first_word.wait()
        # the draft's row is written by the engine's draft task once the platform answered
        while (draft := await store.draft(key.id)) is None or not draft.message_id:  # noqa: ASYNC110
            await asyncio.sleep(0.002)
        if path == "stop":
            click = Click(f"click-{tag}", key, "stop", draft.key, "u1", "alice")
            acted = (await engine.click(click, admin=False)).acted
        else:
            newer = IncomingMessage(key, f"{tag}-2", "u1", "alice", f"{tag} and shorter")
            acted = (await engine.ingest(newer)).status == "accepted"
        acknowledged = time.monotonic()
        await stream.closed.wait()
    return 1000 * (stream.closed_at - acknowledged), acted


async def measure(
    name: str, store: SqlStore[Any], samples: int, concurrency: int, word_seconds: float
) -> Measured:
    load_start, started = os.getloadavg(), time.monotonic()
    results: dict[Path, list[float]] = {path: [] for path in PATHS}
    not_acted = 0
    gate = asyncio.Semaphore(concurrency)
    async with serving(store, word_seconds) as (engine, model):

        async def sample(i: int) -> None:
            nonlocal not_acted
            path = PATHS[i % len(PATHS)]
            async with gate:
                ms, acted = await one_sample(engine, model, store, i, path)
            results[path].append(ms)
            not_acted += not acted

        await asyncio.gather(*(sample(i) for i in range(2 * samples)))
        keys = [ConversationKey(PLATFORM, "w", f"{PATHS[i % 2]}{i}") for i in range(2 * samples)]
        await settle(engine, keys)
    return Measured(
        name, results, not_acted, load_start, os.getloadavg(), time.monotonic() - started
    )


async def settle(engine: Engine, keys: Sequence[ConversationKey], within: float = 120.0) -> None:
    """Let every conversation's answer (stopped, or the newer burst's) finish before shutting
    down (bounded)."""
    deadline = time.monotonic() + within
    for key in keys:
        while time.monotonic() < deadline and not await engine.is_settled(key):  # noqa: ASYNC110
            await asyncio.sleep(0.01)


def loads(values: tuple[float, float, float]) -> str:
    return ", ".join(f"{x:.2f}" for x in values)


def table(runs: Sequence[Measured]) -> list[str]:
    lines = [
        "| store | path | samples | acknowledged -> model stream closed ms, "
        "p50 / p90 / p99 / max |",
        "|---|---|---|---|",
    ]
    for run in runs:
        for path in PATHS:
            ms = run.samples[path]
            cells = " / ".join(f"{percentile(ms, q):.1f}" for q in (0.5, 0.9, 0.99)) + (
                f" / {max(ms):.1f}" if ms else " / -"
            )
            lines.append(f"| {run.store} | {LABELS[path]} | {len(ms)} | {cells} |")
    return lines


def goal_lines(runs: Sequence[Measured]) -> list[str]:
    lines = []
    for run in runs:
        p99 = percentile(run.samples["stop"], 0.99)
        met = "met" if run.samples["stop"] and p99 <= GOAL_MS and not run.not_acted else "not met"
        lines.append(
            f"{run.store}: click acknowledged -> stream closed p99 <= {GOAL_MS:.0f} ms: {met} "
            f"(p99 {p99:.1f} ms; clicks that did not stop: {run.not_acted})"
        )
    return lines


async def run(args: argparse.Namespace) -> int:
    from storage.postgres import PostgresStore
    from storage.sqlite import SqliteStore

    print(f"load average at the start: {loads(os.getloadavg())}", flush=True)
    runs = []
    with tempfile.TemporaryDirectory(prefix="burstbot-stop-", dir=args.db_dir) as directory:
        runs.append(
            await measure(
                "SQLite",
                SqliteStore(os.path.join(directory, "stop.db")),
                args.samples,
                args.concurrency,
                args.word_seconds,
            )
        )
    if args.postgres_dsn:
        async with scratch_schema(args.postgres_dsn, "burstbot_bench_stop") as schema:
            runs.append(
                await measure(
                    "PostgreSQL",
                    PostgresStore(args.postgres_dsn, schema=schema),
                    args.samples,
                    args.concurrency,
                    args.word_seconds,
                )
            )
    print(
        f"\n{args.samples} samples per path and store, {args.concurrency} conversations at a "
        f"time, stop and supersede alternating; the model writes a word every "
        f"{args.word_seconds * 1000:.0f} ms; quiet window 0.05 s"
    )
    print(*table(runs), sep="\n")
    print()
    for measured in runs:
        print(
            f"{measured.store}: {measured.seconds:.1f} s, load average "
            f"{loads(measured.load_start)} at its start, {loads(measured.load_end)} at its end"
        )
    print(*goal_lines(runs), sep="\n")
    print(f"load average at the end: {loads(os.getloadavg())}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stop_latency", description=__doc__)
    parser.add_argument("--samples", type=int, default=200, help="per path and store (default 200)")
    parser.add_argument(
        "--concurrency", type=int, default=10, help="conversations in flight at once (default 10)"
    )
    parser.add_argument(
        "--word-seconds", type=float, default=0.02, help="the model's time per word (default 0.02)"
    )
    parser.add_argument("--db-dir", help="where the SQLite file goes (default: the temp dir)")
    parser.add_argument(
        "--postgres-dsn",
        default=os.environ.get(DSN_ENV),
        help=f"also run on this PostgreSQL server, in a schema of its own (default: ${DSN_ENV})",
    )
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
