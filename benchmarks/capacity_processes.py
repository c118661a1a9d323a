"""Two burstbot processes on PostgreSQL sharing one API key: `benchmarks.capacity`'s third row.

Two OS processes (`python -m benchmarks.capacity_processes CHILD-SPEC`, children of the
benchmark), each with its own engine, scheduler, store pool, replier and admission, on one
PostgreSQL schema; the fake Messages API with the organisation's limits runs in the parent, so
both spend one budget and learn it only from the API's answers and the shared row, as two hosts
would. Both run on the parent's scaled clock (its monotonic reading and wall time at the start,
passed down: the monotonic clock is the host's). Each child stores its half of the messages,
says it is ready, starts its scheduler when the parent says go (every window closed by then),
reports each conversation it delivered, and at stop its first-shown times. The parent reads the
first tokens from the fake API, as for the other rows.

The children speak JSON lines on stdout; the parent speaks `go` and `stop` on their stdin.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks.capacity import (
    QUIET_SECONDS,
    Outcome,
    ScaledClock,
    TimedFrontend,
    conversations,
    first_tokens,
    limited_api,
    outcome,
    serve,
    shut,
)
from benchmarks.postgres import scratch_schema
from bot.core.events import ConversationKey, IncomingMessage

PROCESSES = 2
LIMIT_SECONDS = 400.0  # scaled: a run not done by then is reported as it stands


def say(line: dict[str, Any]) -> None:
    print(json.dumps(line), flush=True)


async def stdin_lines() -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


async def child(spec: dict[str, Any]) -> None:
    """One burstbot process: its half of the conversations, until the parent says stop."""
    from storage.postgres import PostgresStore

    orders = await stdin_lines()
    clock = ScaledClock(spec["scale"], *spec["clock"])
    store = PostgresStore(spec["dsn"], pool_size=4, clock="caller", schema=spec["schema"])
    await store.open()
    frontend = TimedFrontend(clock)
    serving = serve(store, clock, spec["policy"], spec["base_url"], spec["owner"], frontend)
    for index, cid in spec["asks"]:
        key = ConversationKey.parse(cid)
        message = IncomingMessage(key, f"m-{cid}", f"u{index}", f"user{index}", f"hi {index}")
        await serving.engine.ingest(message)
    say({"ready": True})
    await orders.readline()  # go
    run = asyncio.create_task(serving.scheduler.run())
    stop = asyncio.create_task(orders.readline())
    told: set[str] = set()
    while not stop.done():
        for cid in sorted(frontend.answered - told):
            say({"answered": cid})
            told.add(cid)
        await asyncio.wait([stop], timeout=0.05)
    serving.scheduler.stop()
    await asyncio.gather(run, return_exceptions=True)
    await shut(serving)
    await store.close()
    say({"shown": frontend.first_shown, "answered": sorted(frontend.answered)})


class Child:
    """The parent's handle on one child: its process and what it reported."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.ready = asyncio.Event()
        self.final: dict[str, Any] = {}
        self.answered: set[str] = set()

    async def read(self) -> None:
        assert self.process.stdout is not None
        async for raw in self.process.stdout:
            line = json.loads(raw)
            if "ready" in line:
                self.ready.set()
            elif "shown" in line:
                self.final = line
            else:
                self.answered.add(line["answered"])

    async def tell(self, order: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{order}\n".encode())
        await self.process.stdin.drain()


async def two_processes(
    policy: str, dsn: str, workspaces: Sequence[tuple[str, int]], scale: float
) -> Outcome:
    clock = ScaledClock(scale)
    model, api = await limited_api(clock)
    keys = conversations(workspaces)
    async with scratch_schema(dsn, "capacity") as schema:
        children = []
        for n in range(PROCESSES):
            asks = [(i, key.id) for i, key in enumerate(keys) if i % PROCESSES == n]
            spec = {"scale": scale, "clock": clock.reference, "dsn": dsn, "schema": schema,
                    "policy": policy, "base_url": model.base_url, "owner": f"p{n}",
                    "asks": asks}  # fmt: skip
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "benchmarks.capacity_processes", json.dumps(spec),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            children.append(Child(process))
        readers = [asyncio.create_task(c.read()) for c in children]
        asking = clock.now()
        await asyncio.gather(*(c.ready.wait() for c in children))
        spread = clock.now() - asking
        await clock.sleep(QUIET_SECONDS + 0.1)  # every window closed: all due at once
        started, started_mono = clock.now(), clock.monotonic()
        for c in children:
            await c.tell("go")

        def answered() -> set[str]:
            return set().union(*(c.answered for c in children))

        while len(answered()) < len(keys) and clock.now() < started + LIMIT_SECONDS:
            await clock.sleep(1.0)
        for c in children:
            await c.tell("stop")
        await asyncio.gather(*readers)
        for c in children:
            await c.process.wait()
    await model.stop()
    shown: dict[str, float] = {}
    for c in children:
        for cid, at in c.final.get("shown", {}).items():
            shown[cid] = min(shown.get(cid, math.inf), at - started)
    everyone = set().union(*(set(c.final.get("answered", [])) for c in children))
    streamed = first_tokens(model, keys, clock, started_mono)
    notes = [
        f"two OS processes; starting them and asking took {spread:.1f} s, then every window closed"
    ]
    name = "two processes, PostgreSQL"
    return outcome(name, policy, workspaces, len(everyone), api, shown, streamed, notes)


if __name__ == "__main__":
    asyncio.run(child(json.loads(sys.argv[1])))
