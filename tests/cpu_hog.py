"""A CPU hog for trying the test suite on a busy machine: one busy process per core (or
`--processes`), each spinning until `--seconds` have passed, then all stop by themselves.

    python -m tests.cpu_hog --seconds 900 &
    CI=true python -m pytest -q

The suite must pass the same under it: a test that only passes on an idle machine is timing
something, and its green says nothing on a loaded CI runner.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import sys
import time


def spin(until: float, parent: int) -> None:
    """Busy until the monotonic clock reaches `until` or the hog that started it is gone:
    arithmetic, no sleeping, no I/O."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    x = 0
    while time.monotonic() < until and os.getppid() == parent:
        for _ in range(10_000):
            x = (x * 31 + 7) % 1_000_003


def stop_on_sigterm(workers: list[multiprocessing.Process]) -> None:
    """`kill <hog>` stops its busy processes too, not just the hog."""

    def stop(signum: int, frame: object) -> None:
        for worker in workers:
            worker.terminate()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.cpu_hog", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--seconds", type=float, required=True, help="how long to keep busy")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1,
                        help="busy processes (default: one per core)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.processes <= 0:
        print("cpu_hog: --seconds and --processes must be positive", file=sys.stderr)
        return 2
    until = time.monotonic() + args.seconds
    workers = [
        multiprocessing.Process(target=spin, args=(until, os.getpid()), daemon=True)
        for _ in range(args.processes)
    ]
    stop_on_sigterm(workers)
    for worker in workers:
        worker.start()
    print(f"cpu_hog: {args.processes} busy process(es) for {args.seconds:.0f} s", flush=True)
    try:
        for worker in workers:
            worker.join()
    except KeyboardInterrupt:
        for worker in workers:
            worker.terminate()
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
