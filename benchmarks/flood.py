"""Workload 5: a Slack HTTP flood into a real `burstbot run`, beside a bare Bolt app.

Signed Events API requests (new messages in direct-message channels) come from `senders`
concurrent senders, each sending its next event once the previous one is acknowledged (a closed
loop, as Slack's delivery workers are). The same senders flood, in the same run and taking turns:

- **bare Bolt**: a Bolt `AsyncApp` whose listeners do nothing (benchmarks/flood_peers.py), the
  baseline measured in the same run;
- **burstbot**: one `burstbot run` process in HTTP mode on a SQLite file, against the fake Slack
  Web API and the fake Anthropic Messages API (one more process, testkit), through the real
  Slack SDK and Anthropic SDK.

The bot runs a fixed quiet window without early starts, so that the first flood's bursts close
after it. Each run floods three times: once into an idle bot ("idle"), again once the first flood's
bursts have closed and are being answered ("while answering": the acks then share the process with
the model streams, commits and posts), and, once every burst is answered, with the events offered
at the floor's rate (`ACK_FLOOR_PER_SECOND`, evenly spaced, whether or not earlier ones were acked;
the process answers those bursts as they close, as it would in steady use). The floor: one process
on SQLite acknowledges >= 200 events a second (the closed-loop floods) with ack p99 <= 50 ms (at
that rate). The bare app gets the same floods. After burstbot's run every burst is waited
for, and the fake Slack API's call counts give the thinking indicator's calls (reactions,
assistant status) per answered burst.

Each flood also reads the CPU time its server used (user and system, from `/proc`, the process
and every process it started) and divides it by the events acknowledged. The senders share the
machine's cores, so acks per second follow this figure; where `/proc` is missing (not Linux) it
is left out.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.flood_peers import BOT_TOKEN, MODEL_KEY, SIGNING_SECRET
from benchmarks.ingest import ACK_FLOOR_PER_SECOND, percentile
from benchmarks.profiles import Profile

ROOT = str(Path(__file__).resolve().parent.parent)
INDICATOR_METHODS = ("reactions.add", "reactions.remove", "assistant.threads.setStatus")
PHASES = ("idle", "while answering", f"at {ACK_FLOOR_PER_SECOND:.0f} / s")
PACED = PHASES[2]


@dataclass(frozen=True)
class FloodRow:
    system: str
    workers: int  # burstbot processes; 0 for the bare app
    beside: int  # burstbot processes of the pass this row was measured in (the pairing key)
    run: int
    phase: str  # one of PHASES
    events: int
    seconds: float
    p50_ms: float
    p99_ms: float
    failed: int  # events not acknowledged with a 200
    cpu_us_per_ack: float | None = None  # the server's CPU per acknowledged event (None: no /proc)

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class IndicatorRow:
    workers: int
    run: int
    bursts: int
    replies: int
    calls: dict[str, int]
    left_on: int  # reactions still on a message once every burst was answered (and checked)

    @property
    def per_burst(self) -> float:
        return sum(self.calls.values()) / self.bursts if self.bursts else 0.0


@dataclass
class FloodResults:
    floods: list[FloodRow]
    indicator: list[IndicatorRow]


# the senders ------------------------------------------------------------------------------------
def _signed(body: bytes) -> dict[str, str]:
    stamp = str(int(time.time()))
    base = b"v0:" + stamp.encode() + b":" + body
    signature = hmac.new(SIGNING_SECRET.encode(), base, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={signature}",
    }


def events(tag: str, senders: int, per_sender: int, conversations: int) -> list[list[bytes]]:
    """Each sender's event bodies: messages spread over `conversations` DM channels per sender."""
    out = []
    for s in range(senders):
        bodies = []
        for m in range(per_sender):
            channel = f"D{tag}S{s}C{m % conversations}"
            event = {
                "type": "message", "channel": channel, "channel_type": "im", "user": f"U{s}",
                "text": f"message {m} from sender {s}", "ts": f"1700000000.{m:06d}",
                "user_profile": {"display_name": f"sender {s}"}, "team": "T0001",
            }  # fmt: skip
            envelope = {
                "token": "legacy", "team_id": "T0001", "api_app_id": "A0001",
                "type": "event_callback", "event_id": f"Ev{tag}S{s}M{m}",
                "event_time": int(time.time()), "event": event,
            }  # fmt: skip
            bodies.append(json.dumps(envelope).encode())
        out.append(bodies)
    return out


async def flood(url: str, per_sender: Sequence[Sequence[bytes]]) -> tuple[float, list[float], int]:
    """Send every body, each sender one at a time; (seconds, ack latencies in ms, failures)."""
    latencies: list[float] = []
    failed = 0

    async def sender(session: aiohttp.ClientSession, bodies: Sequence[bytes]) -> None:
        nonlocal failed
        for body in bodies:
            began = time.perf_counter()
            try:
                async with session.post(url, data=body, headers=_signed(body)) as response:
                    await response.read()
                    ok = response.status == 200
            except aiohttp.ClientError:
                ok = False
            latencies.append((time.perf_counter() - began) * 1000)
            failed += not ok

    connector = aiohttp.TCPConnector(limit=len(per_sender))
    async with aiohttp.ClientSession(connector=connector) as session:
        began = time.perf_counter()
        await asyncio.gather(*(sender(session, bodies) for bodies in per_sender))
        seconds = time.perf_counter() - began
    return seconds, latencies, failed


async def paced_flood(
    url: str, per_sender: Sequence[Sequence[bytes]], rate: float
) -> tuple[float, list[float], int]:
    """Offer every body at `rate` a second, evenly spaced (the senders' bodies interleaved), each
    sent on time whether or not earlier ones were acknowledged; as `flood` returns."""
    latencies: list[float] = []
    failed = 0
    order = [bodies[m] for m in range(max(map(len, per_sender))) for bodies in per_sender
             if m < len(bodies)]  # fmt: skip

    async def send(session: aiohttp.ClientSession, body: bytes) -> None:
        nonlocal failed
        began = time.perf_counter()
        try:
            async with session.post(url, data=body, headers=_signed(body)) as response:
                await response.read()
                ok = response.status == 200
        except aiohttp.ClientError:
            ok = False
        latencies.append((time.perf_counter() - began) * 1000)
        failed += not ok

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        began = time.perf_counter()
        sent: list[asyncio.Task[None]] = []
        for n, body in enumerate(order):
            delay = began + n / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sent.append(asyncio.create_task(send(session, body)))
        await asyncio.gather(*sent)
        seconds = time.perf_counter() - began
    return seconds, latencies, failed


def cpu_seconds(pid: int) -> float | None:
    """User and system CPU of `pid` and of every live process below it (None: no `/proc`)."""
    parents: dict[int, int] = {}
    spent: dict[int, float] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it exited meanwhile
        parents[int(entry)] = int(fields[1])
        spent[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    if pid not in spent:
        return None
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        below = [child for child, of in parents.items() if of == parent and child not in tree]
        tree.update(below)
        frontier += below
    return sum(spent[p] for p in tree)


# the processes ----------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "ANTHROPIC_"))}
    paths = [ROOT, env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env.update(extra)
    return env


@contextlib.asynccontextmanager
async def child(*args: str, env: dict[str, str], cwd: str | None = None) -> AsyncIterator[Any]:
    """A child process that prints one JSON line once it listens (given with its `pid` added);
    killed on the way out."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, *args, stdout=asyncio.subprocess.PIPE, env=env, cwd=cwd
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        if not line:
            raise RuntimeError(f"{args[1]} exited with {await process.wait()} before listening")
        yield {**json.loads(line), "pid": process.pid}
    finally:
        await _stop(process)


def write_config(directory: str, name: str, fakes: dict[str, str], port: int, quiet: float) -> str:
    path = os.path.join(directory, f"{name}.toml")
    Path(path).write_text(
        f"""[storage]
url = "sqlite:///{os.path.join(directory, name + ".db")}"

[debounce]
# A fixed window and no early starts, so each phase measures what it says: the idle flood's
# bursts close after it. With the adaptive window (the default) a conversation that hears from
# its sender every second or two gets each message answered on its own during the "idle" flood.
adaptive = false
speculate = false
quiet_seconds = {quiet}
max_wait_seconds = {max(8.0, 4 * quiet)}

[engine]
max_concurrent_generations = 64

[llm]
provider = "anthropic"
base_url = "{fakes["model"]}"
api_key_env = "BURSTBOT_FLOOD_MODEL_KEY"

[console]
enabled = false

[catch_up]
enabled = false

[slack]
enabled = true
mode = "http"
api_base_url = "{fakes["slack"]}"
http_port = {port}
thinking_indicator = "reaction"
updates_per_minute = 0.0
posts_per_minute = 0.0
""",
        encoding="utf-8",
    )
    return path


@contextlib.asynccontextmanager
async def burstbot(
    config: str, port: int, workers: int, py_spy: str | None = None
) -> AsyncIterator[int]:
    """`burstbot run` (its pid); with `py_spy` (a file), `py-spy record` writes its collapsed
    stacks there."""
    env = _env(
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        BURSTBOT_FLOOD_MODEL_KEY=MODEL_KEY,
    )
    args = [sys.executable, "-m", "bot", "run", "--config", config]
    if workers > 1:
        args += ["--workers", str(workers)]
    process = await asyncio.create_subprocess_exec(*args, env=env, cwd=os.path.dirname(config))
    spy = None
    try:
        await _listening(port, process)
        if py_spy:
            tool = os.path.join(os.path.dirname(sys.executable), "py-spy")
            spy = await asyncio.create_subprocess_exec(
                tool, "record", "--pid", str(process.pid), "--subprocesses", "--nonblocking",
                "--rate", "200", "--format", "raw", "--output", py_spy,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
        yield process.pid
    finally:
        if spy is not None and spy.returncode is None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
            await spy.wait()
        await _stop(process)


async def _stop(process: asyncio.subprocess.Process) -> None:
    """Terminate, and kill what has not exited within 30 s."""
    if process.returncode is None:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            process.kill()
            await process.wait()


async def _listening(port: int, process: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.returncode is not None:
            raise RuntimeError(f"burstbot exited with {process.returncode} before listening")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise RuntimeError("burstbot did not listen within 60 s")


async def _control(session: aiohttp.ClientSession, url: str, post: bool = False) -> Any:
    async with session.request("POST" if post else "GET", url) as response:
        return await response.json()


# one run ----------------------------------------------------------------------------------------
async def _floods(
    system: str, workers: int, beside: int, run: int, server: tuple[str, int], tag: str,
    profile: Profile, phases: Sequence[str],
) -> list[FloodRow]:  # fmt: skip
    """The floods of `phases` (PHASES) into `server` (its URL and pid), one after the other."""
    url, pid = server
    rows = []
    for phase in phases:
        bodies = events(
            f"{tag}{phase[0]}", profile.flood_senders, profile.flood_messages_per_sender,
            profile.flood_conversations_per_sender,
        )  # fmt: skip
        cpu_before = cpu_seconds(pid)
        if phase == PACED:
            seconds, latencies, failed = await paced_flood(url, bodies, ACK_FLOOR_PER_SECOND)
        else:
            seconds, latencies, failed = await flood(url, bodies)
        cpu_after = cpu_seconds(pid)
        p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
        acked = len(latencies) - failed
        cpu = None
        if cpu_before is not None and cpu_after is not None and acked:
            cpu = (cpu_after - cpu_before) / acked * 1e6
        row = FloodRow(
            system, workers, beside, run, phase, len(latencies), seconds, p50, p99, failed, cpu
        )
        rows.append(row)
        if phase == "idle":
            await asyncio.sleep(profile.flood_quiet_seconds + 0.3)  # the bursts close
    return rows


async def _started(session: aiohttp.ClientSession, control: str, workers: int) -> None:
    """Each burstbot process checks its token (`auth.test`) before it listens: wait for all."""
    deadline = time.monotonic() + 60
    while (await _control(session, f"{control}/counts"))["methods"].get("auth.test", 0) < workers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{workers} burstbot processes did not all start within 60 s")
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)  # from the token check to listening


async def _settle(session: aiohttp.ClientSession, control: str, bursts: int, within: float) -> Any:
    """Until every burst is answered and no indicator is left on (another process's indicator
    goes off at its next check, some seconds after the reply)."""
    deadline = time.monotonic() + within
    while True:
        counts = await _control(session, f"{control}/counts")
        done = counts["posts"] >= bursts and counts["reactions_left"] == 0
        if done or time.monotonic() > deadline:
            return counts
        await asyncio.sleep(0.2)


async def run_flood(
    profile: Profile, directory: str, py_spy_dir: str | None = None
) -> FloodResults:
    results = FloodResults([], [])
    bursts = len(PHASES) * profile.flood_senders * profile.flood_conversations_per_sender
    peers = ["-m", "benchmarks.flood_peers"]
    fakes_args = [*peers, "fakes", "--model-delay", str(profile.flood_model_delay)]
    async with (
        child(*fakes_args, "--model-words", str(profile.flood_model_words), env=_env()) as fakes,
        child(*peers, "bare", "--api", fakes["slack"], env=_env()) as bare,
        aiohttp.ClientSession() as session,
    ):
        bare_server = (f"http://127.0.0.1:{bare['port']}/slack/events", int(bare["pid"]))
        for workers in profile.flood_workers:
            port = free_port()
            name = f"flood-{workers}"
            config = write_config(directory, name, fakes, port, profile.flood_quiet_seconds)
            bot_url = f"http://127.0.0.1:{port}/slack/events"
            spy = os.path.join(py_spy_dir, f"{name}.txt") if py_spy_dir else None
            async with burstbot(config, port, workers, spy) as pid:
                await _started(session, fakes["control"], workers)
                for run in range(1, profile.flood_runs + 1):
                    tag = f"W{workers}R{run}"
                    order = ["bare", "burstbot"] if run % 2 else ["burstbot", "bare"]
                    for system in order:
                        await _control(session, f"{fakes['control']}/forget", post=True)
                        if system == "bare":
                            results.floods += await _floods(
                                "bare Bolt", 0, workers, run, bare_server, f"B{tag}", profile,
                                PHASES,
                            )  # fmt: skip
                            continue
                        bot = ("burstbot", workers, workers, run, (bot_url, pid), tag, profile)
                        results.floods += await _floods(*bot, PHASES[:2])
                        await _settle(
                            session, fakes["control"], bursts * 2 // 3,
                            profile.settle_timeout_seconds,
                        )  # fmt: skip
                        results.floods += await _floods(*bot, [PACED])
                        counts = await _settle(
                            session, fakes["control"], bursts, profile.settle_timeout_seconds
                        )
                        calls = {m: int(counts["methods"].get(m, 0)) for m in INDICATOR_METHODS}
                        posts, left = int(counts["posts"]), int(counts["reactions_left"])
                        results.indicator.append(
                            IndicatorRow(workers, run, bursts, posts, calls, left)
                        )
    return results
