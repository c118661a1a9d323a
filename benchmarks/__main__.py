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
from pathlib import Path

from benchmarks.bursts import run_bursts, run_typing
from benchmarks.ingest import run_ingest
from benchmarks.profiles import FULL, QUICK, Profile
from benchmarks.report import Results, markdown, plot, text
from benchmarks.scale import run_scale


def machine() -> list[str]:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        f"{os.cpu_count()} CPU cores, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}",
        f"load average at the end of the run: {load} (other work shared the machine)",
        "database files on the local disk (WAL, synchronous=FULL)",
    ]


async def run(profile: Profile, db_dir: str | None, seed: int) -> Results:
    results = Results(profile, [])
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="burstbot-bench-", dir=db_dir) as directory:
        steps = (
            ("bursts", lambda: run_bursts(profile, directory, seed)),
            ("typing during generation", lambda: run_typing(profile, directory, seed)),
            ("ingest flood", lambda: run_ingest(profile, directory)),
            ("scale", lambda: run_scale(profile, directory)),
        )
        for name, step in steps:
            print(f"running: {name} ...", file=sys.stderr, flush=True)
            rows = await step()
            attribute = {
                "bursts": "bursts",
                "typing during generation": "typing",
                "ingest flood": "ingest",
                "scale": "scale",
            }[name]
            getattr(results, attribute).extend(rows)
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
    args = parser.parse_args(argv)
    profile = QUICK if args.quick else FULL
    out = Path(args.out or (tempfile.mkdtemp(prefix="burstbot-report-") if args.quick else "docs"))
    results = asyncio.run(run(profile, args.db_dir, args.seed))
    print(text(results))
    out.mkdir(parents=True, exist_ok=True)
    plot(results, out / "benchmarks.png")
    (out / "benchmarks.md").write_text(markdown(results, preamble(profile), "benchmarks.png"))
    print(f"\nreport: {out / 'benchmarks.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
