"""Tables, targets, the Markdown report and the plot of one benchmark run."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.bursts import BurstRow
from benchmarks.busy import BusyRow, busy_summary
from benchmarks.caching import CachingRow
from benchmarks.flood import PACED, PHASES, FloodRow, IndicatorRow
from benchmarks.idle import IdleRow
from benchmarks.ingest import ACK_FLOOR_PER_SECOND, ACK_P99_FLOOR_MS, IngestRow, percentile
from benchmarks.profiles import Profile
from benchmarks.scale import LATE_P99_GOAL_MS, ScaleRow, highest_rate_within_goal
from benchmarks.scale_postgres import PostgresScaleRow
from benchmarks.streamed import CancelRow, FirstWordRow, LimitsRow, summary

FIRST_WORD_GOAL_MS = {"SQLite": 100.0, "PostgreSQL": 150.0}  # first token → draft request, p99
CANCEL_GOAL_MS = 50.0
CACHE_GOAL = 0.30
FINAL_GOAL_MS = 2000.0
BUSY_BURSTS = 30
BUSY_BURST_GOAL_S = 10.0
BUSY_STREAM_GOAL_S = 3.0
BUSY_DISCORD_GOAL_S = 5.0
RSS_GOAL_MB = 100.0


@dataclass
class Results:
    profile: Profile
    machine: list[str]
    bursts: list[BurstRow] = field(default_factory=list)
    typing: list[BurstRow] = field(default_factory=list)
    ingest: list[IngestRow] = field(default_factory=list)
    scale: list[ScaleRow] = field(default_factory=list)
    scale_postgres: list[PostgresScaleRow] = field(default_factory=list)
    flood: list[FloodRow] = field(default_factory=list)
    indicator: list[IndicatorRow] = field(default_factory=list)
    first_word: list[FirstWordRow] = field(default_factory=list)
    cancel: list[CancelRow] = field(default_factory=list)
    caching: list[CachingRow] = field(default_factory=list)
    limits: list[LimitsRow] = field(default_factory=list)
    idle: list[IdleRow] = field(default_factory=list)
    busy: list[BusyRow] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True)
class Table:
    title: str
    headers: tuple[str, ...]
    rows: list[tuple[str, ...]]


@dataclass(frozen=True)
class Target:
    name: str
    goal: str
    measured: str
    met: bool


def _wasted(row: BurstRow) -> int:
    """Engine systems: what the store's `generations` table says; baselines: the model's count."""
    return row.wasted_per_store if row.wasted_per_store is not None else row.tally.wasted_tokens


def _row(results: list[BurstRow], system: str) -> BurstRow:
    return next(r for r in results if r.system == system)


def tables(results: Results) -> list[Table]:
    out = []
    out.append(
        Table(
            "1. Bursts (model calls, replies and duplicates per burst)",
            (
                "system",
                "bursts",
                "model calls / burst",
                "replies / burst",
                "duplicate replies",
                "unanswered messages",
            ),
            [
                (
                    r.system,
                    str(r.units),
                    f"{r.tally.model_calls / r.units:.2f}",
                    f"{r.tally.replies / r.units:.2f}",
                    str(r.tally.duplicate_replies),
                    str(r.tally.unanswered),
                )
                for r in results.bursts
            ],
        )
    )
    discard = _wasted(_row(results.typing, "complete-then-discard")) if results.typing else 0
    out.append(
        Table(
            "2. Typing during generation (output tokens wasted on replies nobody sees)",
            (
                "system",
                "conversations",
                "model calls",
                "replies",
                "duplicate replies",
                "output tokens",
                "wasted tokens",
                "wasted vs complete-then-discard",
            ),
            [
                (
                    r.system,
                    str(r.units),
                    str(r.tally.model_calls),
                    str(r.tally.replies),
                    str(r.tally.duplicate_replies),
                    str(r.tally.output_tokens),
                    str(_wasted(r)),
                    f"{100 * _wasted(r) / discard:.0f} %" if discard else "n/a",
                )
                for r in results.typing
            ],
        )
    )
    raw = results.ingest[0].rate if results.ingest else 1.0
    out.append(
        Table(
            "3. Ingest flood (durable acks)",
            ("path", "messages", "messages / s", "vs raw", "ack p50 ms", "ack p99 ms"),
            [
                (
                    r.system,
                    str(r.messages),
                    f"{r.rate:.0f}",
                    f"{r.rate / raw:.2f}x",
                    f"{r.p50_ms:.1f}",
                    f"{r.p99_ms:.1f}",
                )
                for r in results.ingest
            ],
        )
    )
    out.append(
        Table(
            "4. Scale (timer due -> model called, one fresh process)",
            (
                "stored conversations",
                "armed timers",
                "fired",
                "due per second",
                "late p50 ms",
                "late p99 ms",
                "late max ms",
                "peak RSS MB",
                "still armed after",
                "plain asyncio timer late p50 / p99 ms",
            ),
            [
                (
                    f"{r.stored_conversations:,}",
                    f"{r.armed_timers:,}",
                    str(r.fired),
                    f"{r.fired / r.window_seconds:.0f}",
                    f"{r.p50_ms:.1f}",
                    f"{r.p99_ms:.1f}",
                    f"{r.max_ms:.1f}",
                    f"{r.peak_rss_mb:.0f}",
                    f"{r.still_armed:,}",
                    f"{r.loop_p50_ms:.1f} / {r.loop_p99_ms:.1f}",
                )
                for r in results.scale
            ],
        )
    )
    out.append(postgres_scale_table(results))
    out.append(
        Table(
            "5. Slack HTTP flood (acks, each burstbot run beside the bare Bolt app's same run)",
            (
                "run",
                "phase",
                "burstbot processes",
                "events",
                "burstbot acks / s",
                "bare Bolt acks / s",
                "ratio",
                "burstbot ack p50 / p99 ms",
                "bare Bolt ack p50 / p99 ms",
                "p99 ratio",
                "failed",
                "burstbot / bare Bolt CPU µs per ack",
                "CPU ratio",
            ),
            [_flood_row(bot, bare) for bot, bare in flood_pairs(results.flood)],
        )
    )
    out.append(
        Table(
            "6. Thinking indicator (Slack calls per answered burst in the flood)",
            (
                "run",
                "burstbot processes",
                "bursts",
                "replies",
                "reactions.add",
                "reactions.remove",
                "assistant status",
                "indicator calls / burst",
                "left on at the end",
            ),
            [
                (
                    str(r.run),
                    str(r.workers),
                    str(r.bursts),
                    str(r.replies),
                    str(r.calls.get("reactions.add", 0)),
                    str(r.calls.get("reactions.remove", 0)),
                    str(r.calls.get("assistant.threads.setStatus", 0)),
                    f"{r.per_burst:.2f}",
                    str(r.left_on),
                )
                for r in results.indicator
            ],
        )
    )
    return [*out, *felt_tables(results), idle_table(results)]


def idle_table(results: Results) -> Table:
    """Measured, with no goal: what a waiting process costs depends on the machine."""
    return Table(
        "11. Idle CPU (a process waiting on the model, then with nothing to do)",
        ("system", "seconds measured", "CPU cores used"),
        [
            (
                r.system,
                f"{r.seconds:.1f}",
                "n/a (no /proc)" if r.cores is None else f"{r.cores:.3f}",
            )
            for r in results.idle
        ],
    )


def _ms(values: list[float]) -> str:
    p50, p99 = summary(values)
    return f"{p50:.0f} / {p99:.0f}"


def felt_tables(results: Results) -> list[Table]:
    """What people feel: first visible word, cancel latency, prompt caching, rate limits."""
    return [
        Table(
            "7. First visible word (Slack HTTP mode, one-message bursts; ms, p50 / p99)",
            ("store", "bursts", "fake model's time to first token (baseline)", "first token -> "
             "draft on Slack", "quiet window's close -> model request",
             "quiet window's close -> draft"),
            [(r.store, str(r.conversations), _ms(r.ttft_ms), _ms(r.token_to_draft_ms),
              _ms(r.close_to_request_ms), _ms(r.close_to_draft_ms)) for r in results.first_word],
        ),
        Table(
            "8. Cancel latency (a newer message while the answer streams)",
            ("superseded streams", "ack -> model stream closed ms, p50 / p99",
             "fake model's time per token ms (baseline)", "output tokens after the ack",
             "tokens the rest of the replies would have cost (baseline)", "answered in full"),
            [(str(r.supersedes), _ms(r.ack_to_closed_ms), f"{r.token_interval_ms:.0f}",
              str(r.tokens_after), str(r.tokens_left), f"{r.answered} of {r.supersedes}")
             for r in results.cancel],
        ),
        Table(
            "9. Prompt caching (billed input cost, in input-token prices)",
            ("turns", "requests", "caching off (baseline)", "billed with caching", "share",
             "tokens read from cache", "tokens written"),
            [(r.turns, str(r.requests), f"{r.uncached_cost:,.0f}", f"{r.billed_cost:,.0f}",
              f"{100 * r.share:.0f} %", f"{r.read_tokens:,}", f"{r.written_tokens:,}")
             for r in results.caching],
        ),
        Table(
            "10. Streaming under rate limits (one Slack workspace, one Discord channel; limits "
            "enforced by the fakes)",
            ("system", "conversations", "429s", "429s after the first per bucket",
             "edits per reply", "model's last token -> final text ms, p50 / p99 / max",
             "replies complete", "cut short or missing"),
            [(r.system, str(r.conversations), str(r.rate_limited), str(r.beyond_first),
              f"{r.edits_per_reply:.1f}", _ms(r.last_token_to_final_ms) +
              f" / {max(r.last_token_to_final_ms, default=0):.0f}", str(r.complete),
              str(r.cut_short)) for r in results.limits],
        ),
        Table(
            "13. A busy workspace (N people at once, a 3-message burst each, default settings)",
            ("platform", "answers", "N", "burst's last message -> final text s, p50 / p99 / max",
             "model's last token -> final text s, max", "429s", "writes per reply",
             "redundant edits", "answered once", "left over", "missing"),
            [(r.system, r.answers, str(r.conversations), busy_summary(r.last_message_to_final_ms),
              f"{max(r.last_token_to_final_ms, default=0) / 1000:.1f}", str(r.rate_limited),
              f"{r.writes_per_reply:.2f}", str(r.redundant_edits),
              f"{r.answered_once} of {r.conversations}", str(r.leftover), str(r.missing))
             for r in results.busy],
        ),
    ]  # fmt: skip


def felt_targets(results: Results) -> list[Target]:
    found = []
    for r in results.first_word:
        p99, goal = summary(r.token_to_draft_ms)[1], FIRST_WORD_GOAL_MS[r.store]
        found.append(Target(f"first token -> draft request, p99 ({r.store})",
                            f"<= {goal:.0f} ms", f"{p99:.0f} ms", p99 <= goal))  # fmt: skip
    for c in results.cancel:
        p99 = summary(c.ack_to_closed_ms)[1]
        closed = len(c.ack_to_closed_ms) == c.supersedes
        found.append(Target("newer message acked -> model stream closed, p99",
                            f"<= {CANCEL_GOAL_MS:.0f} ms", f"{p99:.0f} ms",
                            p99 <= CANCEL_GOAL_MS and closed))  # fmt: skip
    later = [r for r in results.caching if not r.turns.startswith("1-")]
    for c_row in later:
        found.append(Target(f"billed input cost vs caching off, turns {c_row.turns}",
                            f"<= {100 * CACHE_GOAL:.0f} %", f"{100 * c_row.share:.0f} %",
                            c_row.share <= CACHE_GOAL))  # fmt: skip
    for lim in results.limits[:1]:
        worst = max(lim.last_token_to_final_ms, default=float("inf"))
        found.append(Target(f"429s after the first per bucket, {lim.conversations} conversations",
                            "0", str(lim.beyond_first), lim.beyond_first == 0))  # fmt: skip
        found.append(Target("model's last token -> final text on Slack, max (includes the commit)",
                            f"<= {FINAL_GOAL_MS / 1000:.0f} s", f"{worst / 1000:.1f} s",
                            worst <= FINAL_GOAL_MS))  # fmt: skip
        found.append(Target("replies complete under rate limits", f"{lim.conversations}",
                            str(lim.complete), lim.complete == lim.conversations))  # fmt: skip
    for lim in results.limits[2:3]:  # Discord, with the pacer
        worst = max(lim.last_token_to_final_ms, default=float("inf"))
        name = f"Discord: 429s after the first, {lim.conversations} people, one channel"
        found.append(Target(name, "0", str(lim.beyond_first), lim.beyond_first == 0))
        found.append(Target("Discord: model's last token -> final text, max",
                            f"<= {FINAL_GOAL_MS / 1000:.0f} s", f"{worst / 1000:.1f} s",
                            worst <= FINAL_GOAL_MS))  # fmt: skip
    found += busy_targets(results.busy)
    if results.scale:
        rss = max(r.peak_rss_mb for r in results.scale)
        stored = results.scale[0].stored_conversations
        found.append(Target(f"peak RSS with {stored:,} stored conversations",
                            f"<= {RSS_GOAL_MB:.0f} MB", f"{rss:.0f} MB",
                            rss <= RSS_GOAL_MB))  # fmt: skip
    return found + postgres_scale_targets(results)


def postgres_scale_table(results: Results) -> Table:
    return Table(
        "4b. Scale on PostgreSQL (timer due -> model called, two fresh processes sharing it)",
        ("stored conversations", "armed timers", "processes", "fired", "due per second",
         "late p50 ms", "late p99 ms", "late max ms", "peak RSS MB per process",
         "plain asyncio timer late p50 / p99 ms"),
        [(f"{r.stored_conversations:,}", f"{r.armed_timers:,}", str(r.processes), str(r.fired),
          f"{r.fired / r.window_seconds:.0f}", f"{r.p50_ms:.1f}", f"{r.p99_ms:.1f}",
          f"{r.max_ms:.1f}", " / ".join(f"{m:.0f}" for m in r.peak_rss_mb),
          f"{r.loop_p50_ms:.1f} / {r.loop_p99_ms:.1f}") for r in results.scale_postgres],
    )  # fmt: skip


def postgres_scale_targets(results: Results) -> list[Target]:
    found = []
    for r in results.scale_postgres:
        rate = r.fired / r.window_seconds
        found.append(Target(f"timer -> model p99, {r.armed_timers:,} timers, {rate:.0f} due/s, "
                            f"PostgreSQL, {r.processes} processes",
                            f"<= {LATE_P99_GOAL_MS:.0f} ms", f"{r.p99_ms:.1f} ms",
                            r.p99_ms <= LATE_P99_GOAL_MS))  # fmt: skip
    if results.scale_postgres:
        rss = max(m for r in results.scale_postgres for m in r.peak_rss_mb)
        stored = results.scale_postgres[0].stored_conversations
        found.append(Target(f"peak RSS of each process, {stored:,} stored conversations on "
                            "PostgreSQL", f"<= {RSS_GOAL_MB:.0f} MB", f"{rss:.0f} MB (highest)",
                            rss <= RSS_GOAL_MB))  # fmt: skip
    return found


def flood_pairs(rows: list[FloodRow]) -> list[tuple[FloodRow, FloodRow]]:
    """Each burstbot flood with the bare app's flood of the same run and phase."""
    bare = {(r.beside, r.run, r.phase): r for r in rows if r.workers == 0}
    return [
        (r, bare[(r.beside, r.run, r.phase)]) for r in rows if (r.workers, r.run, r.phase) in bare
    ]


def _flood_row(bot: FloodRow, bare: FloodRow) -> tuple[str, ...]:
    return (
        str(bot.run),
        bot.phase,
        str(bot.workers),
        str(bot.events),
        f"{bot.rate:.0f}",
        f"{bare.rate:.0f}",
        f"{bot.rate / bare.rate:.2f}x" if bare.rate else "n/a",
        f"{bot.p50_ms:.1f} / {bot.p99_ms:.1f}",
        f"{bare.p50_ms:.1f} / {bare.p99_ms:.1f}",
        f"{bot.p99_ms / bare.p99_ms:.1f}x" if bare.p99_ms else "n/a",
        str(bot.failed + bare.failed),
        f"{bot.cpu_us_per_ack:.0f} / {bare.cpu_us_per_ack:.0f}"
        if bot.cpu_us_per_ack is not None and bare.cpu_us_per_ack is not None
        else "n/a",
        f"{bot.cpu_us_per_ack / bare.cpu_us_per_ack:.2f}x"
        if bot.cpu_us_per_ack is not None and bare.cpu_us_per_ack
        else "n/a",
    )


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def _flood_targets(results: Results) -> list[Target]:
    found: list[Target] = []
    pairs = flood_pairs(results.flood)
    if not pairs:
        return found
    for phase in PHASES[:2]:  # the closed-loop floods: how many acks a second
        rates = [b.rate for b, _ in pairs if b.phase == phase]
        bare = [b.rate for _, b in pairs if b.phase == phase]
        each = ", ".join(f"{x:.0f}" for x in rates)
        found.append(
            Target(
                f"Slack flood acks / s {phase}, one process on SQLite, median of runs",
                f">= {ACK_FLOOR_PER_SECOND:.0f} / s",
                f"{_median(rates):.0f} / s (runs: {each}; bare Bolt {_median(bare):.0f} / s)",
                _median(rates) >= ACK_FLOOR_PER_SECOND,
            )
        )
    tails = [b.p99_ms for b, _ in pairs if b.phase == PACED]
    bare_tails = [b.p99_ms for _, b in pairs if b.phase == PACED]
    each = ", ".join(f"{x:.1f}" for x in tails)
    found.append(
        Target(
            f"Slack flood ack p99 {PACED} offered, one process on SQLite, median of runs",
            f"<= {ACK_P99_FLOOR_MS:.0f} ms",
            f"{_median(tails):.1f} ms (runs: {each}; bare Bolt {_median(bare_tails):.1f} ms)",
            _median(tails) <= ACK_P99_FLOOR_MS,
        )
    )
    if results.indicator:
        worst = max(r.per_burst for r in results.indicator)
        found.append(
            Target(
                "indicator calls per burst in the flood (one on, one off at most)",
                "<= 2",
                f"{worst:.2f} (highest of {len(results.indicator)} runs)",
                worst <= 2.0,
            )
        )
    return found


def targets(results: Results) -> list[Target]:
    found = []
    if results.bursts:
        bb = _row(results.bursts, "burstbot")
        per_burst = bb.tally.model_calls / bb.units
        found.append(
            Target("model calls per burst", "1.00", f"{per_burst:.2f}", round(per_burst, 2) == 1.0)
        )
    if results.typing:
        wasted = _wasted(_row(results.typing, "burstbot"))
        discard = _wasted(_row(results.typing, "complete-then-discard"))
        share = wasted / discard if discard else float("inf")
        found.append(
            Target(
                "wasted tokens vs complete-then-discard",
                "<= 20 %",
                f"{100 * share:.0f} % ({wasted} of {discard})",
                share <= 0.20,
            )
        )
    if len(results.ingest) >= 3:
        raw, flood, at_rate = results.ingest[:3]
        found.append(
            Target(
                "ingest acks / s, one process on SQLite, each sender awaiting its ack",
                f">= {ACK_FLOOR_PER_SECOND:.0f} / s",
                f"{flood.rate:.0f} / s (raw sqlite3 per-message commits: {raw.rate:.0f} / s)",
                flood.rate >= ACK_FLOOR_PER_SECOND,
            )
        )
        found.append(
            Target(
                f"ingest ack p99 at {ACK_FLOOR_PER_SECOND:.0f} / s offered, one process on SQLite",
                f"<= {ACK_P99_FLOOR_MS:.0f} ms",
                f"{at_rate.p99_ms:.1f} ms",
                at_rate.p99_ms <= ACK_P99_FLOOR_MS,
            )
        )
    for r in results.scale:
        rate = r.fired / r.window_seconds
        found.append(
            Target(
                f"timer -> model p99, {r.armed_timers:,} timers, {rate:.0f} due/s",
                "<= 10 ms",
                f"{r.p99_ms:.1f} ms",
                r.p99_ms <= 10.0,
            )
        )
    if results.scale:
        best = highest_rate_within_goal(results.scale)
        found.append(
            Target(
                f"highest due rate with timer -> model p99 <= {LATE_P99_GOAL_MS:.0f} ms, "
                f"{results.scale[0].armed_timers:,} armed timers, one process on SQLite",
                ">= 500 / s",
                f"{best:.0f} / s",
                best >= 500,
            )
        )
    return found + felt_targets(results) + _flood_targets(results)


def busy_targets(rows: list[BusyRow]) -> list[Target]:
    """The busy workspace's goals: 30 bursts at once on an unlimited Slack, 20 streams under
    Slack's tiers, 10 people streaming in one Discord channel."""
    found = []
    for r in rows:
        once = r.answered_once == r.conversations and r.leftover == 0 and r.missing == 0
        last_token = max(r.last_token_to_final_ms, default=float("inf"))
        if r.system == "Slack, no limits" and r.conversations == BUSY_BURSTS:
            p99 = percentile(r.last_message_to_final_ms, 0.99) if once else float("inf")
            found.append(Target(f"{r.conversations} bursts at once, no limits: last message -> "
                                "final text, p99 (every burst answered once)",
                                f"<= {BUSY_BURST_GOAL_S:.0f} s", f"{p99 / 1000:.1f} s",
                                p99 <= BUSY_BURST_GOAL_S * 1000))  # fmt: skip
        elif r.system.startswith("Slack, Tier 3") and r.streams:
            found.append(Target(f"{r.conversations} streams under Slack's tiers: 429s", "<= 2",
                                str(r.rate_limited), r.rate_limited <= 2))  # fmt: skip
            found.append(Target(f"{r.conversations} streams under Slack's tiers: model's last "
                                "token -> final text, max", f"<= {BUSY_STREAM_GOAL_S:.0f} s",
                                f"{last_token / 1000:.1f} s",
                                once and last_token <= BUSY_STREAM_GOAL_S * 1000))  # fmt: skip
        elif r.system.startswith("Discord") and r.streams:
            found.append(Target(f"Discord: {r.conversations} people streaming in one channel, "
                                "model's last token -> final text, max",
                                f"<= {BUSY_DISCORD_GOAL_S:.0f} s", f"{last_token / 1000:.1f} s",
                                once and last_token <= BUSY_DISCORD_GOAL_S * 1000))  # fmt: skip
            found.append(
                Target(
                    f"Discord: {r.conversations} people in one channel, redundant edits",
                    "0",
                    str(r.redundant_edits),
                    r.redundant_edits == 0,
                )
            )
    return found


def text(results: Results) -> str:
    lines = []
    for table in (t for t in tables(results) if t.rows):
        widths = [
            max(len(h), *(len(row[i]) for row in table.rows)) if table.rows else len(h)
            for i, h in enumerate(table.headers)
        ]
        lines += ["", table.title]
        lines.append("  ".join(h.ljust(w) for h, w in zip(table.headers, widths, strict=True)))
        for row in table.rows:
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    lines += ["", "Targets"]
    for t in targets(results):
        lines.append(
            f"  {'met    ' if t.met else 'NOT met'}  {t.name}: {t.measured} (goal {t.goal})"
        )
    return "\n".join(lines)


def _markdown_table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def markdown(results: Results, preamble: str, plot_name: str | None) -> str:
    lines = [preamble.rstrip(), "", "## Results", ""]
    lines += [f"Profile `{results.profile.name}`, whole run {results.seconds:.0f} s. Machine:", ""]
    lines += [f"- {fact}" for fact in results.machine]
    if plot_name:
        lines += ["", f"![benchmark plot]({plot_name})"]
    for table in (t for t in tables(results) if t.rows):
        lines += ["", f"### {table.title}", ""]
        lines += _markdown_table(table.headers, table.rows)
    lines += ["", "### Targets (goals, reported as measured)", ""]
    lines += _markdown_table(
        ("target", "goal", "measured", "met"),
        [(t.name, t.goal, t.measured, "yes" if t.met else "**no**") for t in targets(results)],
    )
    return "\n".join(lines) + "\n"


def _plot_felt(results: Results, g: Any, h: Any) -> None:
    """7: the first word beside the model's own first token; 10: 429s and final-text delay."""
    for r in results.first_word:
        names = ["model: first token", "first token -> draft", "close -> model request"]
        series = [r.ttft_ms, r.token_to_draft_ms, r.close_to_request_ms]
        spots = range(len(names))
        g.bar([x - 0.2 for x in spots], [summary(v)[0] for v in series], 0.4, label="p50")
        g.bar([x + 0.2 for x in spots], [summary(v)[1] for v in series], 0.4, label="p99")
        g.set_xticks(list(spots), names, fontsize=8)
        g.set_title(f"7. first visible word, ms ({r.conversations} bursts)")
        g.legend()
    labels = [r.system.split(" (")[0] for r in results.limits]
    spots = range(len(labels))
    h.bar([x - 0.2 for x in spots], [r.rate_limited for r in results.limits], 0.4, label="429s")
    h.bar([x + 0.2 for x in spots], [max(r.last_token_to_final_ms, default=0) / 1000
                                     for r in results.limits], 0.4,
          label="last token -> final text, max s")  # fmt: skip
    h.set_xticks(list(spots), labels, fontsize=8)
    conversations = results.limits[0].conversations if results.limits else 0
    h.set_title(f"10. {conversations} conversations streaming in one Slack workspace")
    h.legend()


def plot(results: Results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ((a, b), (c, d), (e, f), (g, h)) = plt.subplots(4, 2, figsize=(12, 16))
    systems = [r.system for r in results.bursts]
    xs = range(len(systems))
    a.bar(
        [x - 0.2 for x in xs],
        [r.tally.model_calls / r.units for r in results.bursts],
        0.4,
        label="model calls",
    )
    a.bar(
        [x + 0.2 for x in xs],
        [r.tally.replies / r.units for r in results.bursts],
        0.4,
        label="replies",
    )
    a.set_xticks(list(xs), systems, fontsize=8)
    a.set_title("1. per burst (lower is better, 1 is ideal)")
    a.legend()
    b.bar([r.system for r in results.typing], [_wasted(r) / r.units for r in results.typing])
    b.tick_params(axis="x", labelsize=8)
    b.set_title("2. wasted output tokens per conversation")
    names = ["raw sqlite3", "burstbot flood", "burstbot at 200/s"][: len(results.ingest)]
    c.bar(names, [r.rate for r in results.ingest], color="tab:green")
    for i, r in enumerate(results.ingest):
        c.annotate(f"p99 {r.p99_ms:.1f} ms", (i, r.rate), ha="center", va="bottom", fontsize=8)
    c.axhline(ACK_FLOOR_PER_SECOND, color="red", linestyle="--", label="floor")
    c.legend()
    c.set_title("3. ingest messages / s (durable)")
    labels = [f"{r.fired / r.window_seconds:.0f} due/s" for r in results.scale]
    spots = range(len(labels))
    d.bar([x - 0.2 for x in spots], [r.p50_ms for r in results.scale], 0.4, label="p50")
    d.bar([x + 0.2 for x in spots], [r.p99_ms for r in results.scale], 0.4, label="p99")
    d.axhline(10.0, color="red", linestyle="--", label="p99 goal")
    d.set_xticks(list(spots), labels)
    armed = f"{results.scale[0].armed_timers:,}" if results.scale else "no"
    d.set_title(f"4. timer due -> model called, ms ({armed} armed timers)")
    d.legend()
    pairs = flood_pairs(results.flood)
    labels = [f"run {b.run}\n{b.phase}\n{b.workers} proc" for b, _ in pairs]
    spots = range(len(labels))
    e.bar([x - 0.2 for x in spots], [bare.rate for _, bare in pairs], 0.4, label="bare Bolt")
    e.bar([x + 0.2 for x in spots], [b.rate for b, _ in pairs], 0.4, label="burstbot")
    for x, (b, bare) in zip(spots, pairs, strict=True):
        ratio = f"{b.rate / bare.rate:.2f}x" if bare.rate else ""
        e.annotate(ratio, (x + 0.2, b.rate), ha="center", va="bottom", fontsize=8)
    e.axhline(ACK_FLOOR_PER_SECOND, color="red", linestyle="--", label="floor")
    e.set_xticks(list(spots), labels, fontsize=7)
    e.set_title("5. Slack HTTP flood: acks / s, same senders, same run")
    e.legend()
    f.bar(
        [f"run {r.run}, {r.workers} proc" for r in results.indicator],
        [r.per_burst for r in results.indicator],
        color="tab:orange",
    )
    f.axhline(2.0, color="red", linestyle="--", label="at most one on + one off")
    f.set_title("6. thinking indicator calls per burst")
    f.legend()
    _plot_felt(results, g, h)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
