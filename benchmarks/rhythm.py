"""Felt latency (`--only rhythm`): real chat timing through the real engine, on a fake clock.

Message timelines (generated with several punctuation habits: see `timelines.py` for the model
and its parameters; and each corpus read with `--timing PATH...`) are replayed through the real
`Engine` and `SqliteStore` (in memory) on a `FakeClock`: the driver jumps the clock from one
event to the next (an arrival, a timer falling due, the fake model's next token), so hours of chat
take seconds. The fake model
takes `ttft` seconds to its first token (default 0.8 s), then streams `tokens` tokens `pace`
seconds apart. Each file (or generated person) is one conversation; a reply answers its burst.

The adaptive window's fitted parameters are never measured on the data they were fitted on: each
corpus is replayed with the parameters fitted (`window_fit.py`) on each other corpus, and the
generated timelines with those fitted on all the corpora (the shipped defaults without any).

What is measured, per policy:
- felt wait: from the last message a posted reply covers to its first visible word (streamed: the
  first token of the generation whose reply was posted, or the close of its window when that
  comes later: a speculation shows nothing before the close), p50, p90 and p99, and the share of
  answers that waited more than 3 s;
- replies per person-episode (a person's messages in one conversation less than 30 s apart), and
  the share of multi-message episodes answered by more than one reply;
- visible supersedes per 100 messages: a generation cancelled by newer input after its first
  word was visible (a draft shown, then replaced by a longer answer; so never a speculation
  cancelled before its close);
- model requests per message, and the output tokens of cancelled generations as a share of all.

Policies are data: settings for the engine plus, for speculation, what the engine cannot do yet.
When `EngineSettings` has a `speculate` setting the policy sets it and the engine speculates for
real; otherwise speculation is modeled here: the model's first token comes `ttft` after the
burst's last message + `speculate_after` (never before the window closes), and a message that
arrives between that start and the close counts one cancelled request and its tokens so far.
The report says which policies ran on the real engine alone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.tally import FIXED_WINDOW, PLATFORM, answer_of
from benchmarks.timelines import Said, episodes
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.quiet_window import WindowModel
from bot.core.replier import GenerationProgress, Prompt
from bot.core.settings import EngineSettings
from bot.wiring import build_serving
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend
from testkit.clock import FakeClock
from testkit.engine import shut_down

START = 1_000_000.0


@dataclass(frozen=True)
class Policy:
    name: str
    settings: dict[str, Any]
    speculate_after: float | None = None  # None: no speculation


FIXED = "fixed 1.5 s"
ADAPTIVE = "adaptive + speculation"


POLICY_KINDS = ("fixed", "fixed+speculation", "adaptive")
"""The policies `--policies` can choose (the fixed 1.5 s window, the goals' yardstick, always
runs)."""


def policies(
    speculate_after: float,
    fits: Sequence[tuple[str, WindowModel]],
    kinds: Sequence[str] = POLICY_KINDS,
) -> list[Policy]:
    """The fixed window, with speculation if `kinds` has it, and the adaptive one with each fit
    (`fits`: where its parameters were fitted, and them) if `kinds` has it."""
    fixed = {"adaptive": False, "quiet_seconds": 1.5}
    return [
        Policy(FIXED, fixed),
        *([Policy(f"{FIXED} + speculation", fixed, speculate_after)]
          if "fixed+speculation" in kinds else []),
        *(
            Policy(
                f"{ADAPTIVE}, fitted on {where}",
                {"adaptive": True, "window_model": model},
                speculate_after,
            )
            for where, model in (fits if "adaptive" in kinds else ())
        ),
    ]  # fmt: skip


def speculates_for_real() -> bool:
    return "speculate" in {f.name for f in dataclasses.fields(EngineSettings)}


@dataclass
class Call:
    covers: tuple[int, ...]
    started_at: float
    first_token_at: float | None = None
    cancelled_at: float | None = None
    tokens: int = 0


class PacedModel:
    """A `Replier` on the fake clock: `ttft` to the first token, then one token per `pace`."""

    def __init__(self, clock: FakeClock, ttft: float, pace: float, tokens: int) -> None:
        self.clock, self.ttft, self.pace, self.tokens = clock, ttft, pace, tokens
        self.calls: list[Call] = []
        self.first_token_from: dict[int, float] = {}  # modeled speculation: message → start

    async def generate(self, prompt: Prompt, usage: GenerationProgress) -> str:
        covers = tuple(int(m.text.split(" ", 1)[0][1:]) for m in prompt.burst)
        now = self.clock.now()
        call = Call(covers, now)
        self.calls.append(call)
        number = len(self.calls)  # the reply names its call: calls of other bursts overlap
        early = self.first_token_from.get(covers[-1])
        first = now + self.ttft if early is None else max(now, early + self.ttft)
        usage.input_tokens += len(covers)
        try:  # two sleeps, not one per token: the driver moves the clock per event
            await self.clock.sleep_until(first)
            call.first_token_at = self.clock.now()
            await self.clock.sleep_until(first + (self.tokens - 1) * self.pace)
            call.tokens = self.tokens
        except asyncio.CancelledError:
            call.cancelled_at = now = self.clock.now()
            if call.first_token_at is not None:
                call.tokens = min(self.tokens, int((now - first) / self.pace + 1e-9) + 1)
            raise
        finally:
            usage.output_tokens += call.tokens
        return f"[g{number}] covers {' '.join(map(str, covers))}"


class Counted:
    """Counts the store's calls in flight on aiosqlite's thread, so the driver knows when every
    task of the engine is waiting on the fake clock (or on nothing) before it moves time."""

    def __init__(self) -> None:
        self.in_flight = 0

    def wrap(self, connection: Any) -> None:
        inner = connection._execute

        async def execute(fn: Any, *args: Any, **kwargs: Any) -> Any:
            self.in_flight += 1
            try:
                return await inner(fn, *args, **kwargs)
            finally:
                self.in_flight -= 1

        connection._execute = execute


async def quiesce(counted: Counted) -> None:
    loop = asyncio.get_running_loop()
    calm = 0
    while calm < 3:
        await asyncio.sleep(0)
        if counted.in_flight:
            calm = 0
            await asyncio.sleep(0)
        elif not loop._ready:  # type: ignore[attr-defined]
            calm += 1
        else:
            calm = 0


@dataclass(frozen=True)
class Supersede:
    """What cancelled a visible generation: the message that arrived while its words showed."""

    same_author: bool  # the author of the burst's last message wrote again (else someone else)
    gap: float  # seconds from the burst's last message to the one that cancelled it


@dataclass
class PolicyResult:
    policy: str
    real: bool
    messages: int
    felt: list[float] = field(default_factory=list)
    replies: int = 0
    episodes: int = 0
    multi_episodes: int = 0
    multi_answered: int = 0
    visible_supersedes: int = 0
    requests: int = 0
    output_tokens: int = 0
    wasted_tokens: int = 0
    seconds: float = 0.0
    superseded_by: list[Supersede] = field(default_factory=list)

    def pct(self, q: float) -> float:
        if not self.felt:
            return float("nan")
        ordered = sorted(self.felt)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def waited_over_3_s(self) -> float:
        return sum(f > 3.0 for f in self.felt) / max(1, len(self.felt))

    @property
    def replies_per_episode(self) -> float:
        return self.replies / max(1, self.episodes)

    @property
    def multi_answered_share(self) -> float:
        return self.multi_answered / max(1, self.multi_episodes)

    @property
    def supersedes_per_100(self) -> float:
        return 100 * self.visible_supersedes / max(1, self.messages)

    def supersedes_by_cause(self) -> str:
        """How many visible supersedes the same author caused and how many someone else, and
        the gaps (whole seconds: exports stamp to the second) after which they came."""
        if not self.superseded_by:
            return "none"
        same = sum(s.same_author for s in self.superseded_by)
        gaps: dict[int, int] = {}
        for s in self.superseded_by:
            gaps[math.floor(s.gap)] = gaps.get(math.floor(s.gap), 0) + 1
        spread = ", ".join(f"{g}-{g + 1} s: {n}" for g, n in sorted(gaps.items()))
        return (f"{len(self.superseded_by)}: same author {same}, another person "
                f"{len(self.superseded_by) - same}; after {spread}")  # fmt: skip

    @property
    def requests_per_message(self) -> float:
        return self.requests / max(1, self.messages)

    @property
    def wasted_share(self) -> float:
        return self.wasted_tokens / max(1, self.output_tokens)


def visible_at(call: Call, closes: dict[int, float]) -> float | None:
    """When the call's first word shows: its first token, but never before the window of its
    burst's last message closes (a speculation shows nothing before the close)."""
    if call.first_token_at is None:
        return None
    return max(call.first_token_at, closes.get(max(call.covers), call.first_token_at))


async def replay(policy: Policy, timeline: Sequence[Said], ttft: float, pace: float,
                 tokens: int) -> PolicyResult:  # fmt: skip
    clock = FakeClock(START)
    store = SqliteStore(":memory:")
    await store.open()
    counted = Counted()
    counted.wrap(store._db)
    model = PacedModel(clock, ttft, pace, tokens)
    platform = RecordingFrontend(PLATFORM)
    real = policy.speculate_after is None or speculates_for_real()
    overrides = dict(policy.settings)
    if policy.speculate_after is not None and real:
        overrides |= {"speculate": True, "speculate_after_seconds": policy.speculate_after}
    settings = dataclasses.replace(
        FIXED_WINDOW, max_wait_seconds=8.0, max_concurrent_generations=10_000, **overrides
    )
    engine = build_serving(store, model, clock, settings, "bench", {PLATFORM: platform}).engine
    wall = time.monotonic()
    last: dict[str, tuple[float, float | None]] = {}  # conversation → (last arrival, due)
    closes: dict[int, float] = {}  # message → when the window it armed closes (its due time)
    spec_wasted_requests = spec_wasted_tokens = 0

    async def settle() -> None:
        await quiesce(counted)
        await engine.run_due()
        await quiesce(counted)

    async def run_until(t: float) -> None:
        while True:
            wakes = [w for w in clock.waiting()]
            due = await store.next_due_at(clock.now(), engine.serving)
            nxt = min([*wakes, *([due] if due is not None else [])], default=None)
            if nxt is None or nxt > t:
                break
            await clock.advance(max(0.0, nxt - clock.now()))
            await settle()
        await clock.advance(max(0.0, t - clock.now()))
        await settle()

    for i, said in enumerate(timeline):
        at = START + said.at
        await run_until(at)
        cid = ConversationKey(PLATFORM, "w", said.channel).id
        key = ConversationKey(PLATFORM, "w", said.channel)
        if policy.speculate_after is not None and not real and cid in last:
            previous, due_at = last[cid]
            begun = previous + policy.speculate_after
            if due_at is not None and begun < at < due_at:  # a speculation cancelled unseen
                spec_wasted_requests += 1
                streamed = at - begun - ttft  # its tokens so far, none before the first
                if streamed >= 0:
                    spec_wasted_tokens += min(tokens, int(streamed / pace + 1e-9) + 1)
        result = await engine.ingest(
            IncomingMessage(key, f"m{i}", said.author, said.author, f"#{i} {said.text}")
        )
        if policy.speculate_after is not None and not real:
            model.first_token_from[i] = at + policy.speculate_after
        last[cid] = (at, result.due_at)
        closes[i] = result.due_at if result.due_at is not None else at
        await settle()
    await run_until(clock.now() + 120.0)
    await shut_down(engine)
    await store.close()

    arrivals = [START + s.at for s in timeline]
    answers = [answer_of(post.text) for post in platform.posts]
    posted = {a.generation for a in answers}
    out = PolicyResult(policy.name, real, len(timeline), seconds=time.monotonic() - wall)
    reply_of: dict[int, int] = {}
    for post in answers:
        call = model.calls[post.generation - 1]
        last_covered = max(call.covers)
        shown = visible_at(call, closes)
        if shown is not None:
            out.felt.append(shown - arrivals[last_covered])
        for m in call.covers:
            reply_of[m] = post.generation
    out.replies = len(answers)
    for run in episodes(timeline):
        out.episodes += 1
        if len(run) > 1:
            out.multi_episodes += 1
            if len({reply_of.get(m) for m in run}) > 1:
                out.multi_answered += 1
    for n, call in enumerate(model.calls, start=1):
        out.output_tokens += call.tokens
        if n not in posted:
            out.wasted_tokens += call.tokens
            cancelled, shown = call.cancelled_at, visible_at(call, closes)
            if cancelled is not None and shown is not None and shown < cancelled:
                out.visible_supersedes += 1
                out.superseded_by.append(supersede(timeline, call.covers, cancelled - START))
    out.requests = len(model.calls) + spec_wasted_requests
    out.output_tokens += spec_wasted_tokens
    out.wasted_tokens += spec_wasted_tokens
    return out


def supersede(timeline: Sequence[Said], covers: Sequence[int], at: float) -> Supersede:
    """The cause of a generation (of `covers`) cancelled at `at`: the newest message of its
    conversation by then."""
    last = timeline[max(covers)]
    newer = [
        s for s in timeline[max(covers) + 1 :] if s.channel == last.channel and s.at <= at + 1e-6
    ]
    cause = newer[-1] if newer else last
    return Supersede(cause.author == last.author, cause.at - last.at)


@dataclass
class RhythmRun:
    source: str
    described: str
    ttft: float
    pace: float
    tokens: int
    speculate_after: float
    results: list[PolicyResult]

    def goals(self, ours: PolicyResult) -> list[tuple[str, bool, str]]:
        """What `ours` (an adaptive policy's result) must meet against the fixed window."""
        fixed = next(r for r in self.results if r.policy == FIXED)
        return [
            ("felt wait p50 ≤ 50 % of fixed 1.5 s", ours.pct(0.5) <= 0.5 * fixed.pct(0.5),
             f"{ours.pct(0.5):.2f} s vs {fixed.pct(0.5):.2f} s"),
            ("felt wait p90 ≤ fixed 1.5 s", ours.pct(0.9) <= fixed.pct(0.9),
             f"{ours.pct(0.9):.2f} s vs {fixed.pct(0.9):.2f} s"),
            ("felt wait p99 ≤ 5 s", ours.pct(0.99) <= 5.0, f"{ours.pct(0.99):.2f} s"),
            ("visible supersedes per 100 messages ≤ fixed",
             ours.supersedes_per_100 <= fixed.supersedes_per_100,
             f"{ours.supersedes_per_100:.2f} vs {fixed.supersedes_per_100:.2f}"),
            ("multi-message episodes answered more than once ≤ 1.1× fixed",
             ours.multi_answered_share <= 1.1 * fixed.multi_answered_share,
             f"{ours.multi_answered_share:.1%} vs {fixed.multi_answered_share:.1%}"),
            ("wasted output ≤ 10 % of output", ours.wasted_share <= 0.10,
             f"{100 * ours.wasted_share:.1f} %"),
            ("model requests per message ≤ 1.3× fixed",
             ours.requests_per_message <= 1.3 * fixed.requests_per_message,
             f"{ours.requests_per_message:.3f} vs {fixed.requests_per_message:.3f}"),
        ]  # fmt: skip

    def adaptive(self) -> list[PolicyResult]:
        return [r for r in self.results if r.policy.startswith(ADAPTIVE)]


async def run_rhythm(source: str, described: str, timeline: Sequence[Said], ttft: float,
                     pace: float, tokens: int, speculate_after: float,
                     fits: Sequence[tuple[str, WindowModel]],
                     kinds: Sequence[str] = POLICY_KINDS) -> RhythmRun:  # fmt: skip
    results = []
    for policy in policies(speculate_after, fits, kinds):
        results.append(await replay(policy, timeline, ttft, pace, tokens))
    return RhythmRun(source, described, ttft, pace, tokens, speculate_after, results)


def table(run: RhythmRun) -> list[str]:
    lines = [
        f"timing: {run.source} ({run.described}); model: first token {run.ttft:g} s, "
        f"{run.tokens} tokens {run.pace:g} s apart; speculation starts {run.speculate_after:g} s "
        "after the last message",
        "",
        "| policy | felt p50 | felt p90 | felt p99 | waited > 3 s | replies / episode "
        "| multi-msg episodes answered >1 | visible supersedes / 100 msgs | requests / msg "
        "| wasted output | engine |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in run.results:
        lines.append(
            f"| {r.policy} | {r.pct(0.5):.2f} s | {r.pct(0.9):.2f} s | {r.pct(0.99):.2f} s | "
            f"{100 * r.waited_over_3_s:.1f} % | "
            f"{r.replies_per_episode:.3f} | {100 * r.multi_answered_share:.1f} % | "
            f"{r.supersedes_per_100:.2f} | {r.requests_per_message:.3f} | "
            f"{100 * r.wasted_share:.1f} % | {'real' if r.real else 'speculation modeled'} |"
        )
    lines += ["", "Visible supersedes by cause:", ""]
    lines += [f"- {r.policy}: {r.supersedes_by_cause()}" for r in run.results]
    for ours in run.adaptive():
        lines += ["", f"Goals ({ours.policy}, against fixed 1.5 s, same run):", ""]
        for goal, met, figures in run.goals(ours):
            lines.append(f"- {goal}: **{'met' if met else 'not met'}** ({figures})")
    seconds = sum(r.seconds for r in run.results)
    lines += ["", f"({len(run.results)} policies replayed in {seconds:.0f} s of wall time)"]
    return lines


def plot(runs: Sequence[RhythmRun], path: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(4, len(runs))
    rows = -(-len(runs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 4 * rows), squeeze=False)
    for ax in axes.flat[len(runs) :]:
        ax.set_visible(False)
    for ax, run in zip(axes.flat, runs, strict=False):
        for r in run.results:
            ax.scatter(r.supersedes_per_100, r.pct(0.5), s=60)
            ax.annotate(r.policy, (r.supersedes_per_100, r.pct(0.5)), fontsize=8,
                        xytext=(4, 4), textcoords="offset points")  # fmt: skip
        ax.set_xlabel("visible supersedes per 100 messages")
        ax.set_ylabel("felt wait p50 (s)")
        ax.set_title(f"felt wait vs supersedes: {run.source}", fontsize=9)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


BEGIN, END = "<!-- felt-latency: begin -->", "<!-- felt-latency: end -->"


def section(runs: Sequence[RhythmRun], image: str, fits: Sequence[str] = ()) -> str:
    real = speculates_for_real()
    lines = [
        BEGIN,
        "### 12. Felt latency on real chat timing (`--only rhythm`)",
        "",
        "Message timelines replayed through the real engine and SQLite store (in memory) on a "
        "fake clock, the driver calling the engine's due-timer step as the scheduler does, with "
        "a fake model (see `benchmarks/rhythm.py`). Felt wait: from "
        "the last message a reply covers to its first visible word. "
        + (
            "Speculation ran on the engine."
            if real
            else "This engine has no speculation setting yet: the speculating policies model it "
            "in the benchmark (first token `ttft` after the last message + the speculation delay, "
            "never shown before the window closes; a message between that start and the close "
            "counts a cancelled request and its tokens). The other policies ran on the engine."
        ),
        "",
    ]
    if fits:
        lines += ["The adaptive window's parameters, fitted on each corpus (all its messages):", ""]
        lines += [*(f"- {fitted}" for fitted in fits), ""]
    for run in runs:
        lines += [*table(run), ""]
    lines += [f"![felt wait against visible supersedes]({image})", "", END]
    return "\n".join(lines) + "\n"


def splice(report: str, new: str) -> str:
    """The report with its felt-latency section replaced by `new` (appended when it has none)."""
    if BEGIN in report and END in report:
        head, rest = report.split(BEGIN, 1)
        return head + new.rstrip("\n") + rest.split(END, 1)[1]
    return report.rstrip("\n") + "\n\n" + new
