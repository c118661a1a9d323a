"""`python -m benchmarks.first_word_cli [--platform slack|discord|both] [--conversations N]
[--spacing S]`: the first visible word, tried as a new user would.

The real `burstbot run` (a process of its own, the Claude replier, SQLite) against the fakes in
this process: Slack in HTTP mode (the fake Web API; each message lands in the DM's history and
its signed event goes to the process's endpoint) or Discord (the fake REST API and gateway, the
process's discord.py pointed at them; each message is a gateway MESSAGE_CREATE), and the fake
Messages API, whose time to first token is 0.8 s, then a token every 0.05 s (about 20 words). Per
platform, two runs side by side, each a fresh process and database: the defaults (the adaptive
quiet window and speculation: nothing of those keys set), and the fixed 1.5 s window without
speculation (`[debounce] adaptive = false`, `speculate = false`, `quiet_seconds = 1.5`), the
baseline. The process is used once `/healthz` answers 200.

In each run:

- N people never seen before each ask one complete question (ending in "?") in a DM of their own,
  spaced out: one every 0.5 s (`--spacing`), so two or three are being answered at once, all in
  one Slack workspace (whose `chat.update` budget they share: a draft is posted only where its
  final edit fits, else the reply is posted whole) or each in a Discord DM (a budget each). Per
  conversation, on this process's monotonic clock: the model's first token (as the fake Messages
  API streamed it, of the stream whose reply was posted) → the first text the platform shows in
  that DM (a draft's or the reply's), and the message sent (just before its event or gateway
  dispatch went out) → that first text; p50 and p90 of each, beside the message → the model
  request and the model's own time to first token.
- Then a fast typer, also new: 4 messages in one DM sent 0.3 s apart (start to start), the last a
  question: our messages visible there at the end (replies), model requests for it and per
  message, whether the posted reply's request held all four, its last message → first text, and
  each request's start (from the last message), outcome and tokens streamed.
- Then a new person whose one message trails off ("... and") and who writes nothing more: its
  message → first text. The earlier window model held such a message 3 s (a stranger's dangling
  end); `--before PATH` runs the defaults once more on the checkout at PATH (the code before a
  change, read only), so before and after are measured in one run.
- Last, a person whose rhythm the bot has learned, alone (no other reply shares the workspace's
  draft budget): three bursts in a DM of their own, each two messages 4.5 s apart and answered,
  more than 10 s between bursts (so each burst's first message is no follow-up), then, more than
  10 s after the last, one message without punctuation and nothing after: its message → first
  text. The earlier model took their follow-ups (half their messages, 4.5 s later) for a reason
  to hold them their log-gap's mean plus one spread, the whole 5 s bound; the least-expected-cost
  window does not find a 4.5 s wait worth it at their chance.

The targets: first visible text within 0.5 s of the model's first token (p50; read as the
model's first token itself and as its time to first token after the message, 0.8 s + 0.5 s:
before speculation it was the whole 1.5 s window plus that time); the fast typer gets one reply
and at most one model request per message. Exit status 1 when any conversation was not answered
exactly once: one message of ours visible in its DM, the reply of a completed stream (the fast
typer's covering its four messages).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import aiohttp

from benchmarks.busy_cli import HERE, SECRET, burstbot_run, config_text, free_port, run_command
from benchmarks.ingest import percentile
from benchmarks.streamed import Model, TimedSlack, tag_of, until
from testkit.fake_anthropic import Plan, StreamRecord
from testkit.fake_discord import FakeDiscord
from testkit.fake_slack import EventSender, dm

TTFT_SECONDS = 0.8  # the fake model's time to first token
TOKEN_SECONDS = 0.05  # then one token (a word) every this long
SPACING_SECONDS = 0.5  # between two people's questions (the default)
QUESTION = "how do I rotate the signing secret without downtime?"
FAST = ("hey", "so I'm deploying the api", "and the migrate step fails", "what should I check?")
FAST_GAP_SECONDS = 0.3
DANGLING = "dangle I looked at the deploy logs and"
TEACHING = ("teach so I ran the migration", "it printed nothing")  # one burst, TAUGHT_GAP apart
TEACHING_BURSTS = 3
TAUGHT_GAP_SECONDS = 4.5  # within a teaching burst: a follow-up
PAUSE_SECONDS = 11.0  # between bursts: more than FOLLOW_UP_SECONDS, so no follow-up
TAUGHT = "taught it still prints nothing"  # the measured message: no punctuation
TARGET_SECONDS = 0.5
SETTLE_SECONDS = 1.5  # after the last final text: anything posted after it shows by then
CONFIGURATIONS = (
    ("defaults (adaptive window, speculation)", ""),
    ("fixed 1.5 s, no speculation (baseline)",
     "\n[debounce]\nadaptive = false\nspeculate = false\nquiet_seconds = 1.5\n"),
)  # fmt: skip
DM_BASE = 400_000_000_000_200_000  # Discord DM channel ids
PERSON_BASE = 200_000_000_000_200_000  # Discord user ids


class Platform(Protocol):
    """One fake platform as a person sees it: they write in a DM of their own (person i: DM i)
    and read what the bot shows there."""

    name: str
    env: dict[str, str]  # the process's token variables

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def config(self, directory: str, model: Model, extra: str) -> str: ...

    def command(self, config: Path) -> list[str]: ...

    async def say(self, person: int, text: str) -> None: ...

    def first_text_at(self, person: int, after: float = 0.0) -> float | None:
        """When the bot first showed any text in the person's DM (at `after` or later)."""

    def shown_at(self, text: str) -> float | None:
        """When any message of the bot's first showed exactly `text`."""

    def ours(self, person: int) -> list[str]:
        """The bot's messages visible in the person's DM now."""


class Slack:
    name = "Slack HTTP mode"

    def __init__(self) -> None:
        self.fake = TimedSlack()
        self.port = free_port()
        self.sender = EventSender(f"http://127.0.0.1:{self.port}/slack/events", SECRET)
        self.env = {"SLACK_BOT_TOKEN": self.fake.token, "SLACK_SIGNING_SECRET": SECRET}
        self._stamps = itertools.count(1)

    async def start(self) -> None:
        await self.fake.start()

    async def stop(self) -> None:
        await self.fake.stop()

    def config(self, directory: str, model: Model, extra: str) -> str:
        return config_text(directory, self.fake, model, self.port, extra)

    def command(self, config: Path) -> list[str]:
        return run_command(config)

    async def say(self, person: int, text: str) -> None:
        channel, user = f"D{person}", f"U{person}"
        self.fake.users[user] = f"person{person}"
        ts = f"{time.time():.0f}.{next(self._stamps):06d}"
        self.fake.add_user_message(channel, ts, text, user=user)
        status = await self.sender.send(dm(ts, text, channel=channel, user=user))
        if status != 200:
            raise RuntimeError(f"the event for {channel} was answered {status}")

    def first_text_at(self, person: int, after: float = 0.0) -> float | None:
        shown = self.fake.shown.get(f"D{person}", [])
        return next((at for at, text in shown if text.strip() and at >= after), None)

    def shown_at(self, text: str) -> float | None:
        times = [at for shown in self.fake.shown.values() for at, t in shown if t == text]
        return min(times, default=None)

    def ours(self, person: int) -> list[str]:
        return [m.text for m in self.fake.posts(f"D{person}")]


class Discord:
    name = "Discord"

    def __init__(self) -> None:
        self.fake = FakeDiscord()
        self.env = {"DISCORD_TOKEN": self.fake.token}

    async def start(self) -> None:
        await self.fake.__aenter__()

    async def stop(self) -> None:
        await self.fake.__aexit__(None, None, None)

    def config(self, directory: str, model: Model, extra: str) -> str:
        return config_text(directory, None, model, 0, extra + "\n[discord]\nenabled = true\n")

    def command(self, config: Path) -> list[str]:
        return self.fake.run_command(config)

    async def say(self, person: int, text: str) -> None:
        author = {"id": str(PERSON_BASE + person), "username": f"person{person}",
                  "discriminator": "0", "global_name": None, "avatar": None}  # fmt: skip
        channel = DM_BASE + person
        if channel not in self.fake.channels:
            self.fake.add_channel(channel, "dm", recipient=author)
        await self.fake.dispatch("MESSAGE_CREATE", self.fake.message(channel, author, text))

    def first_text_at(self, person: int, after: float = 0.0) -> float | None:
        channel = str(DM_BASE + person)
        created = (c for c in self.fake.created if c["channel_id"] == channel)
        times = [c["at"] for c in created if c["content"].strip() and c["at"] >= after]
        return min(times, default=None)

    def shown_at(self, text: str) -> float | None:
        writes = (*self.fake.created, *self.fake.edits)
        return min((w["at"] for w in writes if w.get("content") == text), default=None)

    def ours(self, person: int) -> list[str]:
        bot = self.fake.bot_user["id"]
        history = self.fake.history.get(DM_BASE + person, [])
        return [m["content"] for m in history if m["author"]["id"] == bot]


PLATFORMS: dict[str, Callable[[], Platform]] = {"slack": Slack, "discord": Discord}


@dataclass(frozen=True)
class Trial:
    platform: str
    configuration: str
    conversations: int
    spacing: float  # seconds between two people's questions
    answered_once: int
    token_to_text: list[float]  # seconds: the posted stream's first token → first text shown
    sent_to_text: list[float]  # the message sent → first text shown
    sent_to_request: list[float]  # the message sent → the posted stream's request
    ttft: list[float]  # the fake model's own: request → first token
    typer_replies: int  # our messages visible in the fast typer's DM at the end
    typer_requests: int
    typer_covered: bool  # the posted reply's request held all four messages
    typer_last_to_text: float | None  # the fast typer's last message → first text shown
    typer_streams: list[tuple[float, str, int]]  # each request: start (from its last message),
    # outcome, tokens streamed
    dangling_to_text: float | None  # the trailing-off message → first text shown
    taught_to_text: float | None  # the learned person's message → first text shown

    @property
    def ok(self) -> bool:
        typer_once = self.typer_replies == 1 and self.typer_covered
        return self.answered_once == self.conversations and typer_once


def posted(model: Model, platform: Platform, tag: str) -> tuple[StreamRecord, float] | None:
    """The newest completed stream for the conversation whose reply shows, and when it did."""
    for stream in reversed(model.streams):
        request = model.requests[stream.request_index]
        if stream.outcome != "completed" or tag_of(request) != tag:
            continue
        at = platform.shown_at(model.replies[stream.request_index])
        if at is not None:
            return stream, at
    return None


def answered_once(model: Model, platform: Platform, person: int, tag: str) -> bool:
    found = posted(model, platform, tag)
    ours = platform.ours(person)
    return found is not None and ours == [model.replies[found[0].request_index]]


async def healthy(port: int, process: asyncio.subprocess.Process, within: float = 60) -> None:
    """Until the process's `/healthz` answers 200 (its front end receives, its store answers)."""
    url = f"http://127.0.0.1:{port}/healthz"
    give_up = time.monotonic() + within
    async with aiohttp.ClientSession() as session:
        while True:
            if process.returncode is not None:
                raise RuntimeError(f"burstbot run exited {process.returncode} before serving")
            try:
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > give_up:
                raise TimeoutError(f"{url} did not answer 200 within {within:.0f} s")
            await asyncio.sleep(0.1)


async def trial(
    platform_name: str,
    configuration: str,
    extra: str,
    n: int,
    spacing: float = SPACING_SECONDS,
    root: Path | None = None,
) -> Trial:
    """One `burstbot run` (of the checkout at `root`, else this one) driven through the runs."""
    platform = PLATFORMS[platform_name]()
    model = Model({}, Plan(first_delay=TTFT_SECONDS, delay=TOKEN_SECONDS, watch=True))
    await model.start()
    await platform.start()
    health = free_port()
    metrics = f"\n[metrics]\nenabled = true\nport = {health}\n"
    try:
        with tempfile.TemporaryDirectory(prefix="burstbot-first-word-") as directory:
            config = platform.config(directory, model, extra + metrics)
            env = {**platform.env, "PYTHONDONTWRITEBYTECODE": "1"}
            async with burstbot_run(config, env, directory, root or HERE,
                                    command=platform.command) as process:  # fmt: skip
                await healthy(health, process)
                return await _drive(platform, model, configuration, n, spacing)
    finally:
        await platform.stop()
        await model.stop()


async def _drive(
    platform: Platform, model: Model, configuration: str, n: int, spacing: float
) -> Trial:
    tags = [f"q{i}" for i in range(n)]
    sent: dict[str, float] = {}

    async def ask(person: int) -> None:
        await asyncio.sleep(person * spacing)
        sent[tags[person]] = time.monotonic()
        await platform.say(person, f"{tags[person]} {QUESTION}")

    await asyncio.gather(*(ask(i) for i in range(n)))
    await until(lambda: all(posted(model, platform, t) for t in tags), 30 + n, 0.05)

    typer, fast = n, "fast"
    first = time.monotonic()
    for k, text in enumerate(FAST):  # sent at a steady pace, however long each send takes
        last = first + k * FAST_GAP_SECONDS
        await asyncio.sleep(last - time.monotonic())
        await platform.say(typer, f"{fast} {text}" if k == 0 else text)

    def covered() -> bool:
        found = posted(model, platform, fast)
        request = found and model.requests[found[0].request_index].last_user_text
        return bool(request) and all(text in str(request) for text in FAST)

    await until(covered, 30, 0.05)
    await asyncio.sleep(SETTLE_SECONDS)

    trailing = n + 1
    dangling_sent = time.monotonic()
    await platform.say(trailing, DANGLING)
    await until(lambda: posted(model, platform, "dangle") is not None, 30, 0.05)
    dangling_shown = platform.first_text_at(trailing)
    await asyncio.sleep(SETTLE_SECONDS)
    taught_to_text = await teach(platform, n + 2)

    token_to_text, sent_to_text, sent_to_request, ttft = [], [], [], []
    for person, tag in enumerate(tags):
        found, shown = posted(model, platform, tag), platform.first_text_at(person)
        if found is None or shown is None or not found[0].delta_times:
            continue
        stream = found[0]
        token_to_text.append(shown - stream.delta_times[0])
        sent_to_text.append(shown - sent[tag])
        sent_to_request.append(stream.started_at - sent[tag])
        ttft.append(stream.delta_times[0] - stream.started_at)
    typer_shown = platform.first_text_at(typer)
    streams = [(s.started_at - last, str(s.outcome), s.deltas_sent) for s in model.streams
               if tag_of(model.requests[s.request_index]) == fast]  # fmt: skip
    return Trial(
        platform=platform.name,
        configuration=configuration,
        conversations=n,
        spacing=spacing,
        answered_once=sum(answered_once(model, platform, i, t) for i, t in enumerate(tags)),
        token_to_text=token_to_text,
        sent_to_text=sent_to_text,
        sent_to_request=sent_to_request,
        ttft=ttft,
        typer_replies=len(platform.ours(typer)),
        typer_requests=sum(1 for r in model.requests if tag_of(r) == fast),
        typer_covered=covered() and answered_once(model, platform, typer, fast),
        typer_last_to_text=None if typer_shown is None else typer_shown - last,
        typer_streams=streams,
        dangling_to_text=None if dangling_shown is None else dangling_shown - dangling_sent,
        taught_to_text=taught_to_text,
    )


async def teach(platform: Platform, person: int) -> float | None:
    """`TEACHING_BURSTS` bursts of `TEACHING` from `person`, then `TAUGHT`: seconds from it to
    the first text shown after it (None: none within 30 s)."""
    start = time.monotonic()
    for burst in range(TEACHING_BURSTS):  # at a steady pace, however long each send takes
        for k, text in enumerate(TEACHING):
            at = start + burst * (TAUGHT_GAP_SECONDS + PAUSE_SECONDS) + k * TAUGHT_GAP_SECONDS
            await asyncio.sleep(at - time.monotonic())
            await platform.say(person, text)
    await asyncio.sleep(PAUSE_SECONDS)
    sent = time.monotonic()
    await platform.say(person, TAUGHT)
    await until(lambda: platform.first_text_at(person, after=sent) is not None, 30, 0.02)
    shown = platform.first_text_at(person, after=sent)
    return None if shown is None else shown - sent


def p(values: list[float], q: float) -> float:
    return percentile(values, q) if values else float("nan")


def describe(t: Trial) -> list[str]:
    per = t.typer_requests / len(FAST)
    typer_text = "-" if t.typer_last_to_text is None else f"{t.typer_last_to_text:.2f} s"
    return [
        f"{t.platform}, {t.configuration}:",
        f"  {t.conversations} new people, one question each in a DM of their own, one every "
        f"{t.spacing:g} s: answered once {t.answered_once} of {t.conversations}",
        f"    model's first token -> first visible text  p50 {p(t.token_to_text, 0.5):.2f} s, "
        f"p90 {p(t.token_to_text, 0.9):.2f} s",
        f"    message sent -> first visible text         p50 {p(t.sent_to_text, 0.5):.2f} s, "
        f"p90 {p(t.sent_to_text, 0.9):.2f} s",
        f"    message sent -> model request              p50 {p(t.sent_to_request, 0.5):.2f} s, "
        f"p90 {p(t.sent_to_request, 0.9):.2f} s",
        f"    model request -> first token (the fake's)  p50 {p(t.ttft, 0.5):.2f} s, "
        f"p90 {p(t.ttft, 0.9):.2f} s",
        f"  fast typer, {len(FAST)} messages {FAST_GAP_SECONDS} s apart in one DM: "
        f"{t.typer_replies} repl{'y' if t.typer_replies == 1 else 'ies'} visible "
        f"(its request held all {len(FAST)}: {'yes' if t.typer_covered else 'no'}), "
        f"{t.typer_requests} model requests ({per:.2f} per message); last message -> first "
        f"visible text {typer_text}",
        "    its requests (start from its last message, outcome, tokens streamed): "
        + ", ".join(f"{at:+.2f} s {outcome} {tokens}" for at, outcome, tokens in t.typer_streams),
        f"  a new person's message that trails off (... and), nothing after: message -> first "
        f"visible text {seconds(t.dangling_to_text)}",
        f"  a person whose follow-ups came {TAUGHT_GAP_SECONDS:g} s later ({TEACHING_BURSTS} "
        f"bursts of {len(TEACHING)}), then one message without punctuation, nothing after: "
        f"message -> first visible text {seconds(t.taught_to_text)}",
    ]


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def table(trials: list[Trial]) -> list[str]:
    def met(ok: bool) -> str:
        return "yes" if ok else "NO"

    lines = [
        "| platform | configuration | answered once | first token -> text, p50 / p90 s "
        "| sent -> text, p50 / p90 s | fast typer: replies, requests (per message) "
        f"| token -> text p50 <= {TARGET_SECONDS} | sent -> text p50 <= "
        f"{TTFT_SECONDS} + {TARGET_SECONDS} | fast typer ok | trailing-off message -> text "
        "| learned person's message -> text |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in trials:
        typer_ok = t.typer_replies == 1 and t.typer_covered and t.typer_requests <= len(FAST)
        lines.append(
            f"| {t.platform} | {t.configuration} | {t.answered_once} of {t.conversations} "
            f"| {p(t.token_to_text, 0.5):.2f} / {p(t.token_to_text, 0.9):.2f} "
            f"| {p(t.sent_to_text, 0.5):.2f} / {p(t.sent_to_text, 0.9):.2f} "
            f"| {t.typer_replies}, {t.typer_requests} ({t.typer_requests / len(FAST):.2f}) "
            f"| {met(p(t.token_to_text, 0.5) <= TARGET_SECONDS)} "
            f"| {met(p(t.sent_to_text, 0.5) <= TTFT_SECONDS + TARGET_SECONDS)} "
            f"| {met(typer_ok)} | {seconds(t.dangling_to_text)} | {seconds(t.taught_to_text)} |"
        )
    return lines


async def measure(
    platforms: list[str], n: int, spacing: float = SPACING_SECONDS, before: Path | None = None
) -> int:
    trials = []
    runs: list[tuple[str, str, Path | None]] = [(c, e, None) for c, e in CONFIGURATIONS]
    if before is not None:
        runs.insert(1, ("defaults, before (the earlier checkout)", "", before))
    for name in platforms:
        for configuration, extra, root in runs:
            found = await trial(name, configuration, extra, n, spacing, root)
            print(*describe(found), sep="\n", flush=True)
            trials.append(found)
    print(f"\nthe fake model: {TTFT_SECONDS} s to first token, then a word every "
          f"{TOKEN_SECONDS} s; the real `burstbot run` per row, a fresh database each")  # fmt: skip
    print(*table(trials), sep="\n")
    return 0 if all(t.ok for t in trials) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.first_word_cli",
        description="The first visible word and a fast typer through the real `burstbot run`.",
    )
    parser.add_argument("--platform", choices=("slack", "discord", "both"), default="both")
    parser.add_argument("--conversations", type=int, default=20, help="new people (default 20)")
    parser.add_argument("--spacing", type=float, default=SPACING_SECONDS,
                        help="seconds between two people's questions (default 0.5)")  # fmt: skip
    parser.add_argument(
        "--before", type=Path, metavar="PATH", help="also run the defaults on the checkout at PATH"
    )
    args = parser.parse_args(argv)
    platforms = ["slack", "discord"] if args.platform == "both" else [args.platform]
    return asyncio.run(measure(platforms, args.conversations, args.spacing, args.before))


if __name__ == "__main__":
    sys.exit(main())
