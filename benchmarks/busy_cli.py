"""`python -m benchmarks.busy_cli [N] [ROOT]`: N people at once, as a new user would try it.

The real `burstbot run` (a process of its own, default settings, Slack HTTP mode, the Claude
replier) against the fake Slack Web API (no limits enforced) and the fake Messages API in this
process. N people each write a 3-message burst in a DM of their own, 0.3 s apart, all at once, as
Slack sends them (a signed event each). `ROOT` runs another checkout's burstbot (a baseline, e.g.
an earlier commit's) in the same way. Printed: every burst answered once or not, and the time
from each burst's last message (its event acknowledged) to its final text on Slack, p50 / p99 /
max.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from benchmarks.busy import BURST
from benchmarks.ingest import percentile
from benchmarks.streamed import Model as StreamedModel
from benchmarks.streamed import TimedSlack, tag_of
from testkit.fake_anthropic import Plan
from testkit.fake_slack import EventSender, dm

SECRET = "busy-cli-signing-secret"
MODEL_KEY_ENV = "BUSY_MODEL_KEY"
HERE = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def config_text(
    directory: str, slack: TimedSlack | None, model: StreamedModel, port: int, extra: str = ""
) -> str:
    """A config file's text: SQLite in `directory`, the fake Messages API, Slack HTTP mode on
    `port` against `slack` (none: no Slack), then `extra` (more sections)."""
    text = f"""
[storage]
url = "sqlite:///{os.path.join(directory, "burstbot.db")}"

[console]
enabled = false

[llm]
provider = "anthropic"
base_url = "{model.base_url}"
api_key_env = "{MODEL_KEY_ENV}"
"""
    if slack is not None:
        text += f"""
[slack]
enabled = true
mode = "http"
api_base_url = "{slack.url}"
http_port = {port}
"""
    return text + extra


def run_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "bot", "run", "--config", str(config)]


@asynccontextmanager
async def burstbot_run(
    config: str,
    env: Mapping[str, str],
    directory: str,
    root: Path = HERE,
    command: Callable[[Path], list[str]] = run_command,
) -> AsyncIterator[asyncio.subprocess.Process]:
    """`burstbot run` as a process of its own until the block ends (then SIGTERM): `config`
    written in `directory` (its working directory), `root`'s burstbot importable, `env` over this
    environment less its Slack, Discord and Anthropic variables, the model's key set. `command`
    makes the command line from the config's path. Its exit status and the last lines of its
    stderr are printed to stderr."""
    path = Path(directory) / "burstbot.toml"
    path.write_text(config, encoding="utf-8")
    variables = {k: v for k, v in os.environ.items()
                 if not k.startswith(("SLACK_", "DISCORD_", "ANTHROPIC_"))}  # fmt: skip
    variables.update(PYTHONPATH=str(root), **{MODEL_KEY_ENV: "bench-key"}, **env)
    log_path = Path(directory) / "burstbot.log"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            *command(path), cwd=directory, env=variables,
            stdout=asyncio.subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
    try:
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
        await process.wait()
        tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
        print("burstbot run exited", process.returncode, *tail, sep="\n  ", file=sys.stderr)


async def measure(n: int, root: Path = HERE) -> int:
    tags = [f"c{i}" for i in range(n)]
    model = StreamedModel({t: 10 + i % 5 * 2 for i, t in enumerate(tags)},
                          Plan(first_delay=0.2, delay=0.05))  # fmt: skip
    await model.start()
    slack = TimedSlack()
    await slack.start()
    port = free_port()
    env = {"SLACK_BOT_TOKEN": slack.token, "SLACK_SIGNING_SECRET": SECRET}
    try:
        with tempfile.TemporaryDirectory(prefix="burstbot-busy-cli-") as directory:
            config = config_text(directory, slack, model, port)
            async with burstbot_run(config, env, directory, root):
                return await _drive(n, tags, slack, model, port)
    finally:
        await model.stop()
        await slack.stop()


async def _drive(
    n: int, tags: list[str], slack: TimedSlack, model: StreamedModel, port: int
) -> int:
    sender = EventSender(f"http://127.0.0.1:{port}/slack/events", SECRET)
    deadline = time.monotonic() + 30
    while True:  # the process is serving once its endpoint answers
        try:
            await sender.send({"type": "message", "channel": "D0", "user": "U0", "text": "",
                               "ts": "1.000000", "bot_id": "B0PROBE"})  # fmt: skip
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
    stamps = iter(range(1, 10**6))

    async def burst(i: int, tag: str) -> float:
        for k, text in enumerate(BURST):
            if k:
                await asyncio.sleep(0.3)
            ts = f"{time.time():.0f}.{next(stamps):06d}"
            await sender.send(dm(ts, f"{tag} {text}", channel=f"D{i}", user=f"U{i}"))
        return time.monotonic()

    ends = await asyncio.gather(*(burst(i, t) for i, t in enumerate(tags)))
    finals: dict[str, float] = {}
    give_up = time.monotonic() + 60
    while len(finals) < n and time.monotonic() < give_up:
        for i, tag in enumerate(tags):
            done = [s for s in model.streams if s.outcome == "completed"
                    and tag_of(model.requests[s.request_index]) == tag]  # fmt: skip
            at = done and slack.first_shown(f"D{i}", model.replies[done[-1].request_index])
            if at:
                finals[tag] = at
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # anything posted after the final text shows now
    once = sum(
        1
        for i, tag in enumerate(tags)
        if tag in finals
        and len(slack.posts(f"D{i}")) == 1
        and slack.posts(f"D{i}")[0].text in model.replies
    )
    waits = [finals[t] - end for t, end in zip(tags, ends, strict=True) if t in finals]
    p50 = percentile(waits, 0.5) if waits else float("nan")
    p99 = percentile(waits, 0.99) if waits else float("nan")
    print(f"{n} bursts through `burstbot run` (Slack HTTP mode, no limits, defaults): "
          f"answered once {once} of {n}; last message -> final text s, p50 {p50:.1f}, "
          f"p99 {p99:.1f}, max {max(waits, default=float('nan')):.1f}")  # fmt: skip
    return 0 if once == n else 1


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    sys.exit(asyncio.run(measure(count, Path(sys.argv[2]) if len(sys.argv) > 2 else HERE)))
