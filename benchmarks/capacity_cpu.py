"""`python -m benchmarks.capacity_cpu [--answers N] [--scale S]`: what one process spends streaming.

What bounds a process once the API's limits no longer do is its own CPU and memory. One burstbot
process (a child of this command, one per policy, so each peak RSS is its own) answers N
conversations asking at once (200 by default), each answer 40 words streamed over 10 s, through
the real `Engine` and `Scheduler`, the Claude replier (the Anthropic SDK) and a streaming
recording front end, on SQLite in /dev/shm. The fake Messages API runs in a process of its own
(`python -m testkit.fake_anthropic`, which sends no limit headers), so the figures are
burstbot's alone: with admission every answer streams at once (nothing limits them), beside the
fixed policy of 8 at a time. Time-scaled like `benchmarks.capacity` (the child's clock and the
fake's word pacing run `S` times faster; CPU is counted in real seconds).

Printed per policy: answered, output tokens streamed, the child's CPU (user + system, from the
moment the schedulers start to the last answer) per 1,000 streamed tokens, its peak RSS, and
the wall time (scaled).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.capacity import QUIET_SECONDS, ScaledClock, TimedFrontend
from bot.config import parse_config
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.settings import EngineSettings
from bot.wiring import build_serving, claude_replier
from storage.sqlite import SqliteStore

WORDS = 40
ANSWER_SECONDS = 10.0
KEY_ENV = "CAPACITY_CPU_KEY"


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def child(
    policy: str, port: int, answers: int, scale: float, folder: str
) -> dict[str, float]:
    """One burstbot process's run: the figures, as a JSON object on stdout."""
    clock = ScaledClock(scale)
    store = SqliteStore(os.path.join(folder, f"{policy}.db"))
    await store.open()
    os.environ[KEY_ENV] = "sk-capacity-cpu"
    llm = {"base_url": f"http://127.0.0.1:{port}", "api_key_env": KEY_ENV, "max_retries": 2}
    settings = EngineSettings(
        quiet_seconds=QUIET_SECONDS,
        adaptive=False,
        speculate=False,
        streaming=True,
        max_concurrent_generations=8 if policy == "fixed" else 1_000,
        system_prompt="You are a helpful assistant.",
    )
    frontend = TimedFrontend(clock)
    replier = claude_replier(parse_config({"llm": llm}))
    serving = build_serving(store, replier, clock, settings, "p0", {"test": frontend})
    if policy == "fixed":
        serving.engine.admission = None
    keys = [ConversationKey("test", "w1", f"c{n}") for n in range(answers)]
    for n, key in enumerate(keys):
        await serving.engine.ingest(IncomingMessage(key, f"m{n}", f"u{n}", f"user{n}", "hi"))
    await clock.sleep(QUIET_SECONDS + 0.1)
    cpu, started = cpu_seconds(), clock.now()
    run = asyncio.create_task(serving.scheduler.run())
    while len(frontend.answered) < answers and clock.now() < started + 3_600.0:
        await clock.sleep(1.0)
    cpu, wall = cpu_seconds() - cpu, clock.now() - started
    serving.scheduler.stop()
    await run
    serving.engine.stop_taking_work()
    await serving.engine.finish(0.0)
    tokens = sum(g.usage.output_tokens for g in await store.generations())
    await replier.aclose()
    await store.close()
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux: kilobytes
    return {
        "answered": len(frontend.answered),
        "tokens": tokens,
        "cpu": cpu,
        "rss_mb": peak_kb / 1024,
        "wall": wall,
    }


def fake_api(port: int, scale: float, log: Path) -> subprocess.Popen[bytes]:
    text = " ".join(f"word{n}" for n in range(WORDS))
    delay = ANSWER_SECONDS / WORDS / scale
    command = [sys.executable, "-m", "testkit.fake_anthropic", "--port", str(port)]
    command += ["--reply", text, "--delay", f"{delay:g}"]
    with log.open("wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30.0
    while "fake Messages API on" not in log.read_text(errors="replace"):
        if time.monotonic() > deadline or server.poll() is not None:
            server.kill()
            raise SystemExit(f"the fake Messages API did not start: {log.read_text()}")
        time.sleep(0.1)
    return server


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=200)
    parser.add_argument("--scale", type=float, default=5.0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        figures = asyncio.run(child(args.child, args.port, args.answers, args.scale, args.folder))
        print(json.dumps(figures))
        return
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=shm) as folder:
        port = free_port()
        server = fake_api(port, args.scale, Path(folder) / "fake.log")
        rows = []
        try:
            for policy in ("fixed", "admission"):
                command = [sys.executable, "-m", "benchmarks.capacity_cpu", "--child", policy]
                command += ["--port", str(port), "--answers", str(args.answers)]
                command += ["--scale", str(args.scale), "--folder", folder]
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                rows.append((policy, json.loads(done.stdout.strip().splitlines()[-1])))
        finally:
            server.terminate()
            server.wait()
    scale = f"time-scaled x{args.scale:g}"
    print(f"{args.answers} answers of {WORDS} words over {ANSWER_SECONDS:g} s, {scale}")
    header = f"{'policy':10} {'answered':>8} {'tokens':>7} {'CPU s':>6} {'CPU ms/1k tok':>13}"
    print(f"{header} {'peak RSS MB':>11} {'wall s':>7}")
    for policy, f in rows:
        per_k = f["cpu"] / f["tokens"] * 1_000_000 if f["tokens"] else float("nan")
        print(
            f"{policy:10} {f['answered']:>8.0f} {f['tokens']:>7.0f} {f['cpu']:>6.1f} "
            f"{per_k:>13.1f} {f['rss_mb']:>11.0f} {f['wall']:>7.1f}"
        )


if __name__ == "__main__":
    main()
