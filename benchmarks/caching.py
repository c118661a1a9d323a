"""Workload 9: what prompt caching saves on long conversations.

Conversations of `turns` turns go through the real Claude replier (the Anthropic SDK) to the fake
Messages API, which accounts for caching as the API does (`PromptCache`: a hit only on an exact
prefix ending at a `cache_control` breakpoint or up to 20 blocks before one, nothing cached below
1,024 tokens, entries living five minutes from their last use). Between turns a simulated clock
moves on 20 s to 3 min (one conversation in four pauses 7 minutes mid-way: its cache expires). The
billed input cost of each turn, in input-token prices (writes 1.25×, reads 0.1×), is set beside
the same turn's cost with caching off: every input token at full price (the baseline).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import anthropic

from benchmarks.profiles import Profile
from bot.core.replier import BurstMessage, GenerationProgress, Prompt, Turn
from bot.llm.claude import ClaudeReplier
from testkit.fake_anthropic import FakeAnthropic, Plan, PromptCache, RecordedRequest

WRITE_PRICE, READ_PRICE = 1.25, 0.1
SYSTEM = (
    "You are a helpful assistant in a team chat. Answer the latest messages of the conversation "
    "briefly and precisely; say so when you do not know."
)


@dataclass(frozen=True)
class CachingRow:
    turns: str  # "1-4" or "5-20"
    requests: int
    uncached_cost: float  # input tokens at full price (caching off)
    billed_cost: float  # with caching: uncached + 1.25 × written + 0.1 × read
    read_tokens: int
    written_tokens: int

    @property
    def share(self) -> float:
        return self.billed_cost / self.uncached_cost if self.uncached_cost else 0.0


class SimulatedTime:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def run_caching(profile: Profile, seed: int) -> list[CachingRow]:
    rng = random.Random(seed)
    clock = SimulatedTime()
    words = rng.choices(["deploy", "the", "service", "logs", "config", "error", "because", "we"],
                        k=4000)  # fmt: skip

    def answer(request: RecordedRequest) -> str:
        return " ".join(rng.choices(words, k=rng.randint(80, 220)))

    model = FakeAnthropic(reply=answer, default_plan=Plan(), cache=PromptCache(clock=clock))
    await model.start()
    client = anthropic.AsyncAnthropic(api_key="bench-key", base_url=model.base_url, max_retries=0)
    replier = ClaudeReplier(client, "claude-sonnet-5-5", 1024, 60.0)
    per_turn: list[tuple[int, GenerationProgress]] = []
    try:
        for conversation in range(profile.caching_conversations):
            history: list[Turn] = []
            for turn in range(1, profile.caching_turns + 1):
                asked = " ".join(rng.choices(words, k=rng.randint(15, 80)))
                burst = (BurstMessage("alice", asked),)
                usage = GenerationProgress()
                text = await replier.generate(Prompt(SYSTEM, tuple(history), burst), usage)
                per_turn.append((turn, usage))
                history += [Turn("user", burst[0].line()), Turn("assistant", text)]
                pause = 420.0 if conversation % 4 == 3 and turn == 10 else rng.uniform(20, 180)
                clock.now += pause
            clock.now += 3600.0  # the next conversation starts with a cold cache
    finally:
        await replier.aclose()
        await model.stop()
    return [_row("1-4", [u for t, u in per_turn if t < 5]),
            _row(f"5-{profile.caching_turns}", [u for t, u in per_turn if t >= 5])]  # fmt: skip


def _row(turns: str, usages: list[GenerationProgress]) -> CachingRow:
    read = sum(u.cache_read_tokens for u in usages)
    written = sum(u.cache_write_tokens for u in usages)
    plain = sum(u.input_tokens for u in usages)
    return CachingRow(
        turns=turns,
        requests=len(usages),
        uncached_cost=float(plain + read + written),
        billed_cost=plain + WRITE_PRICE * written + READ_PRICE * read,
        read_tokens=read,
        written_tokens=written,
    )
