"""Workloads 1 and 2: what each system does with bursts, and with typing during generation.

Every system gets the same seeded schedule of messages on the real clock, one system after another.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from benchmarks.bots import (
    Bot,
    BurstbotBot,
    CompleteThenDiscardBot,
    NaiveBot,
    SleepDebounceBot,
)
from benchmarks.profiles import Profile
from benchmarks.tally import FIXED_WINDOW, PLATFORM, Tally, tally
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.settings import EngineSettings
from testkit import StreamingModel

SYSTEMS = ("naive", "sleep-debounce", "complete-then-discard", "burstbot")


@dataclass(frozen=True)
class Typed:
    """One message of a schedule: who, when (seconds after the run starts), which id."""

    at: float
    key: ConversationKey
    message_id: str


@dataclass(frozen=True)
class BurstRow:
    workload: str
    system: str
    units: int  # bursts (workload 1) or conversations (workload 2)
    tally: Tally
    wasted_per_store: int | None
    seconds: float


def engine_settings(profile: Profile) -> EngineSettings:
    """Product defaults (a fixed window), short debounce windows, and enough slots for every
    conversation."""
    return replace(
        FIXED_WINDOW,
        quiet_seconds=profile.quiet_seconds,
        max_wait_seconds=profile.max_wait_seconds,
        max_concurrent_generations=256,
    )


def make_bot(system: str, model: StreamingModel, profile: Profile, directory: str) -> Bot:
    if system == "naive":
        return NaiveBot(model)
    if system == "sleep-debounce":
        return SleepDebounceBot(model, profile.quiet_seconds)
    if system == "complete-then-discard":
        return CompleteThenDiscardBot(model, engine_settings(profile), directory)
    return BurstbotBot(model, engine_settings(profile), directory)


def burst_schedule(profile: Profile, rng: random.Random) -> tuple[list[Typed], int]:
    typed, bursts = [], 0
    for c in range(profile.burst_conversations):
        key = ConversationKey(PLATFORM, "w", f"burst{c}")
        at = rng.uniform(0, profile.start_spread_seconds)
        for b in range(profile.bursts_per_conversation):
            bursts += 1
            for j in range(rng.randint(*profile.burst_size)):
                if j:
                    at += rng.uniform(*profile.gap_seconds)
                typed.append(Typed(at, key, f"{key.channel}-{b}-{j}"))
            at += profile.pause_seconds
    return typed, bursts


def typing_schedule(profile: Profile, rng: random.Random) -> tuple[list[Typed], int]:
    typed = []
    for c in range(profile.typing_conversations):
        key = ConversationKey(PLATFORM, "w", f"typing{c}")
        at = rng.uniform(0, profile.start_spread_seconds)
        for j in range(rng.randint(*profile.typing_burst_size)):
            if j:
                at += rng.uniform(*profile.gap_seconds)
            typed.append(Typed(at, key, f"{key.channel}-{j}"))
        at += rng.uniform(*profile.follow_up_seconds)
        typed.append(Typed(at, key, f"{key.channel}-late"))
    return typed, profile.typing_conversations


async def play(bot: Bot, schedule: Sequence[Typed]) -> None:
    """Send each message at its time; each person's messages go out in order."""
    start = time.monotonic()

    async def person(messages: list[Typed]) -> None:
        for m in messages:
            await asyncio.sleep(max(0.0, start + m.at - time.monotonic()))
            text = f"{m.message_id} hello there"
            await bot.send(IncomingMessage(m.key, m.message_id, m.key.channel, "someone", text))

    people: dict[ConversationKey, list[Typed]] = {}
    for m in schedule:
        people.setdefault(m.key, []).append(m)
    await asyncio.gather(*(person(ms) for ms in people.values()))


async def wait_settled(bot: Bot, keys: Sequence[ConversationKey], within: float) -> None:
    """Poll until every conversation is answered and no stream runs (bounded)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if bot.model.active == 0 and await bot.settled(keys):
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{bot.name}: conversations did not settle within {within:.0f} s")


async def run_workload(
    workload: str,
    schedule: list[Typed],
    units: int,
    model_factory: Callable[[], StreamingModel],
    profile: Profile,
    directory: str,
) -> list[BurstRow]:
    keys = sorted({m.key for m in schedule}, key=lambda k: k.channel)
    rows = []
    for system in SYSTEMS:
        model = model_factory()
        bot = make_bot(system, model, profile, directory)
        await bot.start()
        started = time.monotonic()
        try:
            await play(bot, schedule)
            await wait_settled(bot, keys, profile.settle_timeout_seconds)
            seconds = time.monotonic() - started
            sent = [m.message_id for m in schedule]
            rows.append(
                BurstRow(
                    workload,
                    system,
                    units,
                    tally(sent, model, bot.platform),
                    await bot.wasted_per_store(),
                    seconds,
                )
            )
        finally:
            await bot.stop()
    return rows


async def run_bursts(profile: Profile, directory: str, seed: int) -> list[BurstRow]:
    schedule, bursts = burst_schedule(profile, random.Random(seed))
    return await run_workload(
        "bursts",
        schedule,
        bursts,
        lambda: StreamingModel(profile.burst_tokens, profile.burst_token_latency),
        profile,
        directory,
    )


async def run_typing(profile: Profile, directory: str, seed: int) -> list[BurstRow]:
    schedule, conversations = typing_schedule(profile, random.Random(seed + 1))
    return await run_workload(
        "typing",
        schedule,
        conversations,
        lambda: StreamingModel(profile.typing_tokens, profile.typing_token_latency),
        profile,
        directory,
    )
