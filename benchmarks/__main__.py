"""`python -m benchmarks [--quick]`: run every workload, print the tables, write the report."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sqlite3
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.bursts import run_bursts, run_typing
from benchmarks.busy import run_busy
from benchmarks.caching import run_caching
from benchmarks.flood import run_flood
from benchmarks.idle import run_idle
from benchmarks.ingest import run_ingest
from benchmarks.postgres import DSN_ENV, chosen_dsn
from benchmarks.profiles import FULL, QUICK, Profile
from benchmarks.report import Results, markdown, plot, text
from benchmarks.rhythm import POLICY_KINDS, run_rhythm, section, splice
from benchmarks.rhythm import plot as rhythm_plot
from benchmarks.rhythm import table as rhythm_table
from benchmarks.scale import run_scale
from benchmarks.scale_postgres import run_scale_postgres
from benchmarks.streamed import run_first_word, run_first_word_postgres, run_rate_limits
from benchmarks.timelines import HABITS, describe, generate, read
from benchmarks.window_fit import describe_fit, fit
from bot.core.quiet_window import DEFAULT_MODEL

WORKLOADS = (
    "bursts", "typing", "ingest", "scale", "flood", "felt", "caching", "limits", "idle", "rhythm",
    "busy",
)  # fmt: skip


def machine() -> list[str]:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        f"{os.cpu_count()} CPU cores, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}",
        f"load average at the end of the run: {load} (other work shared the machine)",
        "database files on the local disk (WAL, synchronous=FULL)",
    ]


async def run(
    profile: Profile,
    db_dir: str | None,
    seed: int,
    only: frozenset[str] = frozenset(),
    py_spy: str | None = None,
    postgres: str | None = None,
) -> Results:
    results = Results(profile, [])
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="burstbot-bench-", dir=db_dir) as directory:
        steps = (
            ("bursts", lambda: run_bursts(profile, directory, seed)),
            ("typing", lambda: run_typing(profile, directory, seed)),
            ("ingest", lambda: run_ingest(profile, directory)),
            ("scale", lambda: run_scale(profile, directory)),
        )
        for name, step in steps:
            if only and name not in only:
                continue
            print(f"running: {name} ...", file=sys.stderr, flush=True)
            getattr(results, name).extend(await step())
        if postgres and (not only or "scale" in only):
            print("running: scale on PostgreSQL ...", file=sys.stderr, flush=True)
            results.scale_postgres = await run_scale_postgres(profile, postgres)
        if not only or "flood" in only:
            print("running: flood ...", file=sys.stderr, flush=True)
            flood = await run_flood(profile, directory, py_spy)
            results.flood, results.indicator = flood.floods, flood.indicator
        if not only or "felt" in only:
            print("running: first visible word and cancel latency ...", file=sys.stderr, flush=True)
            first_word, cancel = await run_first_word(profile, directory)
            results.first_word, results.cancel = [first_word], [cancel]
            if postgres:
                print("running: first visible word on PostgreSQL ...", file=sys.stderr, flush=True)
                results.first_word.append(
                    await run_first_word_postgres(profile, directory, postgres)
                )
        if not only or "caching" in only:
            print("running: prompt caching ...", file=sys.stderr, flush=True)
            results.caching = await run_caching(profile, seed)
        if not only or "limits" in only:
            print("running: streaming under rate limits ...", file=sys.stderr, flush=True)
            results.limits = await run_rate_limits(profile, directory)
        if not only or "idle" in only:
            print("running: idle CPU ...", file=sys.stderr, flush=True)
            results.idle = await run_idle(profile, directory)
        if not only or "busy" in only:
            print("running: a busy workspace ...", file=sys.stderr, flush=True)
            results.busy = await run_busy(profile, directory)
    results.seconds = time.monotonic() - started
    results.machine = machine()
    return results


def preamble(profile: Profile) -> str:
    return (Path(__file__).parent / "intro.md").read_text(encoding="utf-8").format(p=profile)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test (seconds)")
    parser.add_argument(
        "--out", help="report directory (default: docs/, or a temp dir for --quick)"
    )
    parser.add_argument("--db-dir", help="where the databases go (default: the system temp dir)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--only",
        default="",
        help=f"comma-separated workloads of {', '.join(WORKLOADS)} (default: all; the report "
        "then goes to a temp dir unless --out is given)",
    )
    parser.add_argument(
        "--timing",
        nargs="+",
        metavar="PATH",
        help="rhythm: chat corpora to replay besides the generated timelines (Gitter or IRC "
        "text, Slack XML; a file or directory each), each with the window fitted on the others",
    )
    parser.add_argument(
        "--timing-limit", type=int, default=1000, help="rhythm: messages replayed of each corpus"
    )
    parser.add_argument(
        "--policies",
        default=",".join(POLICY_KINDS),
        help=f"rhythm: comma-separated policies of {', '.join(POLICY_KINDS)} (default: all; the "
        "fixed 1.5 s window, the goals' yardstick, always runs)",
    )
    parser.add_argument("--runs", type=int, default=0, help="flood runs (default: the profile's)")
    parser.add_argument(
        "--timers", type=int, default=0, help="armed timers of the scale runs (default: profile's)"
    )
    parser.add_argument(
        "--py-spy",
        metavar="DIR",
        help="profile the flood's burstbot process with py-spy (pip install py-spy): collapsed "
        "stacks to DIR/flood-N.txt",
    )
    parser.add_argument(
        "--postgres-dsn",
        help=f"also measure the first word and the scale on PostgreSQL here (default: ${DSN_ENV}, "
        "full profile only); each workload uses a schema of its own, dropped afterwards",
    )
    args = parser.parse_args(argv)
    profile = QUICK if args.quick else FULL
    if args.runs:
        profile = replace(profile, flood_runs=args.runs)
    if args.timers:
        profile = replace(profile, armed_timers=args.timers)
    only = frozenset(w for w in args.only.split(",") if w)
    if unknown := only - set(WORKLOADS):
        parser.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
    kinds = tuple(k for k in args.policies.split(",") if k)
    if unknown_policies := set(kinds) - set(POLICY_KINDS):
        parser.error(f"unknown policies: {', '.join(sorted(unknown_policies))}")
    scratch = args.quick or bool(only)
    out = Path(args.out or (tempfile.mkdtemp(prefix="burstbot-report-") if scratch else "docs"))
    out.mkdir(parents=True, exist_ok=True)
    if only != {"rhythm"}:
        postgres = chosen_dsn(args.postgres_dsn, args.quick)
        results = asyncio.run(run(profile, args.db_dir, args.seed, only, args.py_spy, postgres))
        print(text(results))
        plot(results, out / "benchmarks.png")
        closing = (Path(__file__).parent / "closing.md").read_text(encoding="utf-8")
        report = markdown(results, preamble(profile), "benchmarks.png") + "\n" + closing
        (out / "benchmarks.md").write_text(report)
    if not only or "rhythm" in only:
        felt_latency(profile, args.seed, args.timing or [], args.timing_limit, out, kinds)
    print(f"\nreport: {out / 'benchmarks.md'}")
    return 0


def felt_latency(
    profile: Profile,
    seed: int,
    timing: list[str],
    limit: int,
    out: Path,
    kinds: tuple[str, ...] = POLICY_KINDS,
) -> None:
    """The rhythm workload: the generated timelines (one per punctuation habit), then each
    `--timing` corpus; its section of the report is replaced in place (the rest of an existing
    report stays). The adaptive window's parameters are fitted on each other corpus (on all its
    messages) for a corpus, on all the corpora for the generated timelines (the shipped defaults
    when there are none): never on the timeline they are measured on."""
    corpora = [(Path(path).name, read([path], 10**9)) for path in timing]
    fitted = [(name, fit(timeline)) for name, timeline in corpora]
    pooled = fit([s for _, timeline in corpora for s in timeline]) if corpora else DEFAULT_MODEL
    everywhere = "all the corpora" if corpora else "the shipped defaults"
    for name, model in [*fitted, *([(everywhere, pooled)] if corpora else [])]:
        print(f"fitted on {name}: {describe_fit(model)}", file=sys.stderr)
    cases = [
        (
            f"generated, {habit}",
            generate(profile.rhythm_people, profile.rhythm_messages, seed, habit),
            [(everywhere, pooled)],
        )
        for habit in HABITS
    ]
    for name, _ in corpora:
        others = [(where, model) for where, model in fitted if where != name]
        sample = read([path for path in timing if Path(path).name == name], limit)
        cases.append((f"{name}, first {limit} messages", sample, others or [(everywhere, pooled)]))
    runs = []
    for source, timeline, fits in cases:
        print(f"running: felt latency on {source} ...", file=sys.stderr, flush=True)
        run_ = asyncio.run(
            run_rhythm(source, describe(timeline), timeline, profile.rhythm_ttft_seconds,
                       profile.rhythm_token_seconds, profile.rhythm_tokens,
                       profile.rhythm_speculate_after_seconds, fits, kinds)
        )  # fmt: skip
        print("\n".join(rhythm_table(run_)), flush=True)
        runs.append(run_)
    rhythm_plot(runs, out / "benchmarks-rhythm.png")
    path = out / "benchmarks.md"
    report = path.read_text(encoding="utf-8") if path.exists() else ""
    fits_text = [f"{name}: {describe_fit(model)}" for name, model in fitted]
    path.write_text(splice(report, section(runs, "benchmarks-rhythm.png", fits_text)),
                    encoding="utf-8")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
