"""Workloads 7, 8 and 10: what people feel of a streamed answer, on Slack HTTP mode.

One burstbot (the real `App`: Slack front end through Bolt and `AsyncWebClient`, the Claude
replier through the Anthropic SDK, SQLite) runs in this process against the fake Slack Web API and
the fake Messages API (testkit), on the real clock. Both fakes note when each thing happened
on this process's monotonic clock: the model request, each streamed delta and the stream's close
(the fake Messages API), each post and update (the fake Slack).

- **First visible word** (7): one-message bursts in separate DMs; quiet window's close → model
  request, and the model's first token → first draft text on Slack, beside the fake model's own
  time to first token.
- **Cancel latency** (8): while each answer streams, a second message lands in its conversation;
  its ack → the model stream closed as the fake server saw it, and the output tokens the server
  streamed after the ack, beside what the rest of the reply would have cost.
- **Streaming under rate limits** (10): many conversations answered at once in one workspace
  against a fake Slack that enforces `chat.update` per workspace and `chat.postMessage` per channel
  as token buckets (429 + Retry-After); burstbot's shared pacer beside the same run with it off
  (each conversation pacing itself alone): 429s, edits per reply, model's last token → final text
  on Slack, and whether every reply arrived whole.

Workloads 7 and 8 raise the workspace's `chat.update` budget out of the way
(`FELT_UPDATES_PER_MINUTE`; the fake enforces no limit there): twenty answers streaming at once in
one workspace would spend the default 50 a minute in seconds, and a reply with no budget left is
posted whole at its end (workloads 10 and 13 measure that), which would time the budget rather than
the streaming path. All three run a fixed quiet window without early starts, so a window's close is
known (its message + `quiet`); what the adaptive window and speculation save is measured by
`rhythm` and by `python -m benchmarks.first_word_cli`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import discord

from adapters.slack import SlackFrontend
from benchmarks.ingest import percentile
from benchmarks.postgres import scratch_schema
from benchmarks.profiles import Profile
from bot.app import App
from bot.config import DiscordConfig, parse_config
from bot.core.clock import SystemClock
from bot.wiring import build_store, claude_replier
from storage.sql_store import SqlStore
from testkit.fake_anthropic import FakeAnthropic, Plan, RecordedRequest, StreamRecord
from testkit.fake_discord import FakeDiscord, frontend_for
from testkit.fake_slack import EventSender, FakeSlackApi, dm

SECRET = "bench-signing-secret"
KEY_ENV = "BENCH_MODEL_KEY"


class TimedSlack(FakeSlackApi):
    """The fake Slack Web API, noting when each post and update of a channel took effect."""

    def __init__(self) -> None:
        super().__init__()
        self.shown: dict[str, list[tuple[float, str]]] = defaultdict(list)

    def _chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        out = super()._chat_postMessage(args)
        if "error" not in out:
            self.shown[str(args["channel"])].append((time.monotonic(), str(args.get("text", ""))))
        return out

    def _chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        out = super()._chat_update(args)
        if "error" not in out:
            self.shown[str(args["channel"])].append((time.monotonic(), str(args.get("text", ""))))
        return out

    def first_shown(self, channel: str, text: str | None = None) -> float | None:
        """When the channel first showed anything (or exactly `text`)."""
        for at, shown in self.shown.get(channel, []):
            if text is None or shown == text:
                return at
        return None


class Model(FakeAnthropic):
    """The fake Messages API answering `words` words, each reply naming its request."""

    def __init__(self, words: dict[str, int], plan: Plan) -> None:
        super().__init__(reply=self._reply, default_plan=plan)
        self.words = words  # by conversation tag (the first word of its messages)
        self.replies: list[str] = []

    def _reply(self, request: RecordedRequest) -> str:
        tag = tag_of(request)
        text = f"r{len(self.replies)} " + " ".join(["w"] * self.words.get(tag, 20)) + " end."
        self.replies.append(text)
        return text

    def stream_of(self, tag: str, nth: int = 0) -> StreamRecord | None:
        found = [s for s in self.streams if tag_of(self.requests[s.request_index]) == tag]
        return found[nth] if len(found) > nth else None


def tag_of(request: RecordedRequest) -> str:
    """The conversation a request is for: its burst's first message starts with its tag."""
    text = request.last_user_text
    return text.split(": ", 1)[-1].split()[0] if text else ""


FELT_UPDATES_PER_MINUTE = 100_000.0


@asynccontextmanager
async def burstbot(
    directory: str, name: str, slack: FakeSlackApi, model: FakeAnthropic, quiet: float,
    conversations: int, store: SqlStore[Any] | None = None, **slack_settings: Any,
) -> AsyncIterator[tuple[App, EventSender]]:  # fmt: skip
    """One burstbot serving Slack HTTP mode in this process, until the block ends (on SQLite
    unless another `store` is given)."""
    config = parse_config(
        {
            "storage": {"url": "sqlite:///" + os.path.join(directory, f"{name}.db")},
            "console": {"enabled": False},
            "catch_up": {"enabled": False},
            "llm": {
                "provider": "anthropic",
                "base_url": model.base_url,
                "api_key_env": KEY_ENV,
                "max_retries": 0,
                "max_tokens": 4096,
                "timeout_seconds": 3600.0,  # the longest answer streams for minutes
            },
            # A fixed window without early starts: these workloads time the streaming path from
            # a known close (message + quiet); the window policies are measured by `rhythm` and
            # `first_word_cli`.
            "debounce": {
                "quiet_seconds": quiet,
                "max_wait_seconds": max(2.0, 4 * quiet),
                "adaptive": False,
                "speculate": False,
            },
            "engine": {"max_concurrent_generations": max(8, conversations)},
            "slack": {
                "enabled": True,
                "mode": "http",
                "api_base_url": slack.url,
                "http_port": 0,
                "thinking_indicator": "off",
                **slack_settings,
            },
        }
    )
    replier = claude_replier(config, {KEY_ENV: "bench-key"})
    frontend = SlackFrontend(config.slack, slack.token, signing_secret=SECRET)
    app = App(config, store or build_store(config), replier, [frontend], shutdown_grace=1.0)
    running = asyncio.create_task(app.run())
    serving = asyncio.ensure_future(app.serving.wait())
    await asyncio.wait({running, serving}, return_when=asyncio.FIRST_COMPLETED)
    if running.done():
        running.result()
    url = f"http://127.0.0.1:{frontend.http_port}{config.slack.http_path}"
    try:
        yield app, EventSender(url, SECRET)
    finally:
        app.request_stop()
        await asyncio.gather(running, return_exceptions=True)
        await replier.aclose()


_stamps = iter(range(1, 10**9))


def message(tag: str, channel: str, text: str) -> dict[str, Any]:
    return dm(f"{time.time():.0f}.{next(_stamps):06d}", f"{tag} {text}", channel=channel)


async def until(condition: Any, within: float, poll: float = 0.005) -> bool:
    """Poll `condition` (real time) until true or `within` seconds passed; whether it came true."""
    give_up = time.monotonic() + within
    while not condition():
        if time.monotonic() > give_up:
            return False
        await asyncio.sleep(poll)
    return True


# 7 and 8: first visible word, cancel latency ---------------------------------------------------
@dataclass(frozen=True)
class FirstWordRow:
    conversations: int
    ttft_ms: list[float]  # the fake model's own: request → first token (the baseline)
    token_to_draft_ms: list[float]  # first token → first draft text on Slack
    close_to_request_ms: list[float]  # quiet window's close → model request
    close_to_draft_ms: list[float]  # quiet window's close → first draft text
    store: str = "SQLite"


@dataclass(frozen=True)
class CancelRow:
    supersedes: int
    ack_to_closed_ms: list[float]
    tokens_after: int  # output tokens streamed after the newer message was acked
    tokens_left: int  # what the rest of those replies would have cost (the baseline)
    token_interval_ms: float  # the fake model's time per token
    answered: int  # conversations whose final answer covers both messages


async def run_first_word_postgres(profile: Profile, directory: str, dsn: str) -> FirstWordRow:
    """The first visible word again with the store on PostgreSQL (a scratch schema)."""
    from storage.postgres import PostgresStore

    async with scratch_schema(dsn, "burstbot_bench_felt") as schema:
        first_word, _ = await run_first_word(
            profile, directory, PostgresStore(dsn, schema=schema), "PostgreSQL"
        )
    return first_word


async def run_first_word(
    profile: Profile, directory: str, store: SqlStore[Any] | None = None, store_name: str = "SQLite"
) -> tuple[FirstWordRow, CancelRow]:
    n, quiet = profile.felt_conversations, profile.felt_quiet_seconds
    tags = [f"c{i}" for i in range(n)]
    plan = Plan(first_delay=profile.felt_ttft_seconds, delay=profile.felt_token_seconds, watch=True)
    model = Model(dict.fromkeys(tags, profile.felt_words), plan)
    await model.start()
    slack = TimedSlack()
    await slack.start()
    rows: dict[str, tuple[float, float]] = {}  # tag → (quiet window's close, newer message acked)
    try:
        async with burstbot(
            directory,
            "felt",
            slack,
            model,
            quiet,
            n,
            store,
            updates_per_minute=FELT_UPDATES_PER_MINUTE,
        ) as (_, sender):

            async def conversation(i: int) -> None:
                tag, channel = tags[i], f"D{i}"
                await asyncio.sleep(i * profile.felt_spread_seconds)
                sent = time.monotonic()
                await sender.send(message(tag, channel, "first question"))
                within = 10 * (quiet + profile.felt_ttft_seconds) + 10
                await until(lambda: (s := model.stream_of(tag)) is not None and
                            len(s.delta_times) >= profile.felt_cancel_after, within)  # fmt: skip
                await sender.send(message(tag, channel, "and one more thing"))
                rows[tag] = (sent + quiet, time.monotonic())

            await asyncio.gather(*(conversation(i) for i in range(n)))
            done = await until(lambda: all(_answered(slack, model, t) for t in tags),
                               profile.settle_timeout_seconds, 0.05)  # fmt: skip
            del done
    finally:
        await model.stop()
        await slack.stop()
    first_word = _first_word(model, slack, tags, rows, store_name)
    return first_word, _cancel(profile, model, slack, tags, rows)


def _answered(slack: TimedSlack, model: Model, tag: str) -> bool:
    second = model.stream_of(tag, 1)
    if second is None or second.outcome != "completed":
        return False
    channel = f"D{tag[1:]}"
    return slack.first_shown(channel, model.replies[second.request_index]) is not None


def _first_word(
    model: Model,
    slack: TimedSlack,
    tags: list[str],
    rows: dict[str, tuple[float, float]],
    store_name: str,
) -> FirstWordRow:
    ttft, to_draft, to_request, close_to_draft = [], [], [], []
    for tag in tags:
        stream, shown = model.stream_of(tag), slack.first_shown(f"D{tag[1:]}")
        if stream is None or not stream.delta_times or shown is None or tag not in rows:
            continue
        close = rows[tag][0]
        ttft.append(1000 * (stream.delta_times[0] - stream.started_at))
        to_draft.append(1000 * (shown - stream.delta_times[0]))
        to_request.append(1000 * (stream.started_at - close))
        close_to_draft.append(1000 * (shown - close))
    return FirstWordRow(len(tags), ttft, to_draft, to_request, close_to_draft, store_name)


def _cancel(
    profile: Profile,
    model: Model,
    slack: TimedSlack,
    tags: list[str],
    rows: dict[str, tuple[float, float]],
) -> CancelRow:
    latency, after, left = [], 0, 0
    for tag in tags:
        stream = model.stream_of(tag)
        if stream is None or tag not in rows:
            continue
        acked = rows[tag][1]
        before = sum(1 for t in stream.delta_times if t <= acked)
        after += len(stream.delta_times) - before
        left += stream.total_deltas - before
        if stream.ended_at is not None:
            latency.append(1000 * (stream.ended_at - acked))
    answered = sum(1 for tag in tags if _answered(slack, model, tag))
    interval = 1000 * profile.felt_token_seconds
    return CancelRow(len(tags), latency, after, left, interval, answered)


# 10: streaming under rate limits --------------------------------------------------------------
@dataclass(frozen=True)
class LimitsRow:
    system: str
    conversations: int
    rate_limited: int  # 429s the fake Slack answered
    beyond_first: int  # 429s after the first on each bucket
    buckets: int  # buckets that answered any 429
    edits_per_reply: float
    last_token_to_final_ms: list[float]
    complete: int  # replies whose whole text is on Slack
    cut_short: int  # replies not (or not wholly) shown when the run ended


async def run_rate_limits(profile: Profile, directory: str) -> list[LimitsRow]:
    rows = []
    for system, settings in (
        ("burstbot (shared pacer)", {}),
        ("each conversation alone (pacer off)", {"updates_per_minute": 0, "posts_per_minute": 0}),
    ):
        rows.append(await _limits_once(profile, directory, system, settings))
    for system, per_minute in (
        ("Discord, one channel: burstbot (shared pacer)", 60.0),
        ("Discord, one channel: each conversation alone (pacer off)", 0.0),
    ):
        rows.append(await _discord_limits_once(profile, directory, system, per_minute))
    return rows


GUILD, CHANNEL = 300_000_000_000_000_001, 400_000_000_000_000_001


async def _discord_limits_once(
    profile: Profile, directory: str, system: str, edits_per_minute: float
) -> LimitsRow:
    """People streaming at once in one Discord channel (scope "user": a conversation each)
    against the fake Discord enforcing about five posts and edits per five seconds there."""
    n = profile.discord_people
    tags = [f"c{i}" for i in range(n)]
    words = {tag: profile.limits_words[0] + i * profile.limits_words[1] for i, tag in
             enumerate(tags)}  # fmt: skip
    model = Model(words, Plan(first_delay=0.2, delay=profile.limits_token_seconds))
    await model.start()
    base, gateway = discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    async with FakeDiscord() as fake:
        discord.http.Route.BASE = fake.api_base
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = fake.gateway_url
        fake.guilds.append(GUILD)
        fake.add_channel(CHANNEL, "text", guild_id=GUILD)
        fake.enforce_rate_limits()
        name = "discord-paced" if edits_per_minute else "discord-alone"
        config = parse_config(
            {
                "storage": {"url": "sqlite:///" + os.path.join(directory, f"{name}.db")},
                "console": {"enabled": False},
                "catch_up": {"enabled": False},
                "llm": {"provider": "anthropic", "base_url": model.base_url,
                        "api_key_env": KEY_ENV, "max_retries": 0, "timeout_seconds": 3600.0},
                "debounce": {"quiet_seconds": 0.3, "max_wait_seconds": 2.0, "adaptive": False,
                             "speculate": False},
                "engine": {"max_concurrent_generations": max(8, n)},
            }
        )  # fmt: skip
        discord_config = DiscordConfig(enabled=True, listen_channels=[str(CHANNEL)], scope="user",
                                       edits_per_minute=edits_per_minute)  # fmt: skip
        frontend = frontend_for(fake, SystemClock(), discord_config)
        replier = claude_replier(config, {KEY_ENV: "bench-key"})
        app = App(config, build_store(config), replier, [frontend], shutdown_grace=1.0)
        running = asyncio.create_task(app.run())
        try:
            await asyncio.wait_for(app.serving.wait(), 30)
            for i, tag in enumerate(tags):
                person = {"id": str(200_000_000_000_000_001 + i), "username": f"p{i}",
                          "discriminator": "0", "global_name": f"P{i}", "avatar": None}  # fmt: skip
                await fake.dispatch("MESSAGE_CREATE", fake.message(
                    CHANNEL, person, f"{tag} a question", guild_id=str(GUILD)))  # fmt: skip
            longest = max(words.values()) * profile.limits_token_seconds
            await until(lambda: all(_discord_final(fake, model, t) for t in tags),
                        longest + profile.settle_timeout_seconds, 0.05)  # fmt: skip
        finally:
            app.request_stop()
            await asyncio.gather(running, return_exceptions=True)
            await replier.aclose()
            await model.stop()
            discord.http.Route.BASE = base
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = gateway
    finals = []
    for tag in tags:
        stream, shown = model.stream_of(tag), _discord_final(fake, model, tag)
        if stream is not None and stream.delta_times and shown is not None:
            finals.append(1000 * (shown - stream.delta_times[-1]))
    complete = sum(1 for tag in tags if _discord_final(fake, model, tag) is not None)
    refused = fake.limits.refused if fake.limits is not None else []
    return LimitsRow(
        system=system,
        conversations=n,
        rate_limited=len(refused),
        beyond_first=max(0, len(refused) - 1),  # one bucket: the channel
        buckets=1 if refused else 0,
        edits_per_reply=len(fake.edits) / n,
        last_token_to_final_ms=finals,
        complete=complete,
        cut_short=n - complete,
    )


def _discord_final(fake: FakeDiscord, model: Model, tag: str) -> float | None:
    stream = model.stream_of(tag)
    if stream is None or stream.outcome != "completed":
        return None
    text = model.replies[stream.request_index]
    shown = [w["at"] for w in (*fake.created, *fake.edits) if w.get("content") == text]
    return min(shown, default=None)  # an edit of its draft, or posted whole (no draft)


async def _limits_once(
    profile: Profile, directory: str, system: str, settings: dict[str, Any]
) -> LimitsRow:
    n = profile.limits_conversations
    tags = [f"c{i}" for i in range(n)]
    words = {tag: profile.limits_words[0] + i * profile.limits_words[1] for i, tag in
             enumerate(tags)}  # fmt: skip
    model = Model(words, Plan(first_delay=0.2, delay=profile.limits_token_seconds))
    await model.start()
    slack = TimedSlack()
    slack.enforce_rate_limits()
    await slack.start()
    name = "limits-paced" if not settings else "limits-alone"
    try:
        async with burstbot(directory, name, slack, model, 0.3, n, **settings) as (_, sender):
            await asyncio.gather(
                *(sender.send(message(tag, f"D{i}", "a question")) for i, tag in enumerate(tags))
            )
            longest = max(words.values()) * profile.limits_token_seconds
            await until(lambda: all(_final_shown(slack, model, t) for t in tags),
                        longest + profile.settle_timeout_seconds, 0.05)  # fmt: skip
    finally:
        await model.stop()
        await slack.stop()
    per_bucket: Counter[tuple[str, str]] = Counter()
    for method, (limits, _) in slack.limits.items():
        per_bucket.update((method, scope) for scope in limits.refused)
    finals = []
    for tag in tags:
        stream = model.stream_of(tag)
        shown = _final_shown(slack, model, tag)
        if stream is not None and stream.delta_times and shown is not None:
            finals.append(1000 * (shown - stream.delta_times[-1]))
    refused = sum(count for (method, _), count in per_bucket.items() if method == "chat.update")
    updates = sum(1 for name, _ in slack.calls if name == "chat.update") - refused
    complete = sum(1 for tag in tags if _final_shown(slack, model, tag) is not None)
    return LimitsRow(
        system=system,
        conversations=n,
        rate_limited=sum(per_bucket.values()),
        beyond_first=sum(count - 1 for count in per_bucket.values()),
        buckets=len(per_bucket),
        edits_per_reply=updates / n,
        last_token_to_final_ms=finals,
        complete=complete,
        cut_short=n - complete,
    )


def _final_shown(slack: TimedSlack, model: Model, tag: str) -> float | None:
    stream = model.stream_of(tag)
    if stream is None or stream.outcome != "completed":
        return None
    return slack.first_shown(f"D{tag[1:]}", model.replies[stream.request_index])


def summary(values: list[float]) -> tuple[float, float]:
    """p50 and p99 (0 when nothing was measured)."""
    return (percentile(values, 0.5), percentile(values, 0.99)) if values else (0.0, 0.0)
