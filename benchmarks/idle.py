"""Workload 11: what a `burstbot run` with nothing to do costs in CPU, beside a bare Bolt app.

A waiting process should cost next to nothing: its polls, lease renewals and timers. A busy loop
(a due timer woken for again and again, say) shows here as a core or so. The test suite asserts the
behaviour on a fake clock (the scheduler sleeps to its next wake-up); the figure itself depends on
the machine, so it is measured here and reported, never asserted.

`burstbot run` (Slack HTTP mode, a SQLite file, the flood's fake Slack and Anthropic APIs) gets
one message, and is measured twice for `idle_seconds` each: the CPU time of its process tree (user
and system, from `/proc`) over that wall time, in cores.

- waiting on the model: from a second after the quiet window closed, while the fake model streams
  its answer slowly (a word every half spell, so the stream outlasts the spell);
- idle: once the burst is answered and its indicator is off, with nothing left to do.

The flood's bare Bolt app, after acknowledging one event, is measured the same way in the same
run: the baseline of a Python web app that only waits.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import aiohttp

from benchmarks.flood import (
    _env,
    _settle,
    _started,
    burstbot,
    child,
    cpu_seconds,
    events,
    flood,
    free_port,
    write_config,
)
from benchmarks.profiles import Profile

SETTLE_SECONDS = 1.0  # after the burst's last effect, before the measured spell begins
MODEL_WORDS = 6  # streamed a word every half spell: the answer takes three spells


@dataclass(frozen=True)
class IdleRow:
    system: str
    seconds: float  # wall time measured
    cores: float | None  # CPU seconds per wall second (None: no /proc)


async def idle_cores(pid: int, seconds: float) -> tuple[float, float | None]:
    """The wall time measured and the cores `pid`'s process tree used meanwhile."""
    before, began = cpu_seconds(pid), time.monotonic()
    await asyncio.sleep(seconds)
    after, wall = cpu_seconds(pid), time.monotonic() - began
    if before is None or after is None:
        return wall, None
    return wall, (after - before) / wall


async def one_event(url: str, tag: str) -> None:
    _, _, failed = await flood(url, events(tag, 1, 1, 1))
    if failed:
        raise RuntimeError(f"the event to {url} was not acknowledged")


async def run_idle(profile: Profile, directory: str) -> list[IdleRow]:
    rows = []
    peers = ["-m", "benchmarks.flood_peers"]
    word_every = profile.idle_seconds / 2
    fakes_args = [*peers, "fakes", "--model-delay", str(word_every)]
    async with (
        child(*fakes_args, "--model-words", str(MODEL_WORDS), env=_env()) as fakes,
        child(*peers, "bare", "--api", fakes["slack"], env=_env()) as bare,
        aiohttp.ClientSession() as session,
    ):
        await one_event(f"http://127.0.0.1:{bare['port']}/slack/events", "idleB")
        await asyncio.sleep(SETTLE_SECONDS)
        rows.append(
            IdleRow(
                "bare Bolt (baseline)", *await idle_cores(int(bare["pid"]), profile.idle_seconds)
            )
        )
        port = free_port()
        config = write_config(directory, "idle", fakes, port, profile.flood_quiet_seconds)
        async with burstbot(config, port, 1) as pid:
            await _started(session, fakes["control"], 1)
            await one_event(f"http://127.0.0.1:{port}/slack/events", "idle")
            await asyncio.sleep(profile.flood_quiet_seconds + SETTLE_SECONDS)
            waiting = await idle_cores(pid, profile.idle_seconds)
            rows.append(IdleRow("burstbot, waiting on the model", *waiting))
            counts = await _settle(session, fakes["control"], 1, profile.settle_timeout_seconds)
            if counts["posts"] < 1:
                raise RuntimeError("burstbot did not answer the burst before idling")
            await asyncio.sleep(SETTLE_SECONDS)
            rows.append(IdleRow("burstbot, idle", *await idle_cores(pid, profile.idle_seconds)))
    return rows
