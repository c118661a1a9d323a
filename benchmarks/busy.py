"""Workload 11: a busy workspace — many people at once, each a 3-message burst, defaults.

One burstbot (the real `App`, default settings: 8 generation slots, the default quiet window and
streaming) in this process against the fake Slack Web API (HTTP mode) or the fake Discord gateway,
and the fake Messages API streaming each answer, on the real clock. N people write a 3-message
burst at once, each in a DM of their own (Slack) or all in one Discord channel (scope "user").

- Slack with the fake enforcing Slack's tiers (`chat.update` per workspace, Tier 3 with a burst of
  20; `chat.postMessage` about one a second per channel; 429 + Retry-After), and with no limits.
- Discord: one channel limited to 5 posts and edits per 5 s (429 with Discord's body and headers).

Measured: the burst's last message (its send returned) → its final text on the platform, p50 /
p99 / max; the model's last token → final text (max); 429s; platform writes (posts + edits) per
reply; redundant edits (an edit setting the text the message showed already, counted by the
fake); and whether every burst was answered exactly once.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, replace
from typing import Any

import discord

from adapters.slack import SlackFrontend
from benchmarks.ingest import percentile
from benchmarks.profiles import Profile
from benchmarks.streamed import KEY_ENV, SECRET, Model, TimedSlack, message, tag_of, until
from bot.app import App
from bot.config import DiscordConfig, parse_config
from bot.core.clock import SystemClock
from bot.wiring import build_store, claude_replier
from testkit.fake_anthropic import Plan
from testkit.fake_discord import FakeDiscord, frontend_for
from testkit.fake_slack import EventSender

BURST = ("a question", "one more detail", "that is all")
GUILD, CHANNEL = 300_000_000_000_000_002, 400_000_000_000_000_002


@dataclass(frozen=True)
class BusyRow:
    system: str
    answers: str  # how long the answers are, in words
    conversations: int
    last_message_to_final_ms: list[float]
    last_token_to_final_ms: list[float]
    rate_limited: int
    writes_per_reply: float
    redundant_edits: int
    answered_once: int  # bursts whose final text shows exactly once
    leftover: int  # other messages of ours still showing (a second answer, a draft left behind)
    missing: int  # bursts with no final text when the run ended

    streams: bool = False  # long answers, streamed for seconds


def _config(directory: str, name: str, model: Model, platform: dict[str, Any]) -> Any:
    return parse_config(
        {
            "storage": {"url": "sqlite:///" + os.path.join(directory, f"{name}.db")},
            "console": {"enabled": False},
            "catch_up": {"enabled": False},
            "llm": {
                "provider": "anthropic",
                "base_url": model.base_url,
                "api_key_env": KEY_ENV,
                "max_retries": 0,
                "timeout_seconds": 3600.0,
            },
            **platform,
        }
    )


async def _burst(send: Any, gap: float) -> float:
    """Send one burst, `gap` seconds between its messages; when its last send returned."""
    for n, text in enumerate(BURST):
        if n:
            await asyncio.sleep(gap)
        await send(text)
    return time.monotonic()


def _final_of(model: Model, tag: str) -> tuple[str, float] | None:
    """The text of the tag's last completed answer and its last token's time."""
    done = [
        s
        for s in model.streams
        if s.outcome == "completed"
        and s.delta_times
        and tag_of(model.requests[s.request_index]) == tag
    ]
    if not done:
        return None
    last = done[-1]
    return model.replies[last.request_index], last.delta_times[-1]


def _row(
    system: str, answers: str, n: int, sent: dict[str, float],
    shown: dict[str, tuple[float, float]], once: int, ours: int, rate_limited: int,
    writes: int, redundant: int,
) -> BusyRow:  # fmt: skip
    return BusyRow(
        system=system,
        answers=answers,
        conversations=n,
        last_message_to_final_ms=[1000 * (at - sent[t]) for t, (at, _) in shown.items()],
        last_token_to_final_ms=[1000 * (at - token) for at, token in shown.values()],
        rate_limited=rate_limited,
        writes_per_reply=writes / n,
        redundant_edits=redundant,
        answered_once=once,
        leftover=ours - once,
        missing=n - len(shown),
    )


async def run_slack(
    profile: Profile, directory: str, n: int, enforce: bool, words: tuple[int, int],
    token_seconds: float, pacer: bool = True,
) -> BusyRow:  # fmt: skip
    tags = [f"c{i}" for i in range(n)]
    model = Model({t: words[0] + i % 5 * words[1] for i, t in enumerate(tags)},
                  Plan(first_delay=0.2, delay=token_seconds))  # fmt: skip
    await model.start()
    slack = TimedSlack()
    if enforce:
        slack.enforce_rate_limits()
    await slack.start()
    name = f"busy-slack-{n}-{int(enforce)}-{int(pacer)}-{words[0]}"
    unpaced = {} if pacer else {"updates_per_minute": 0, "posts_per_minute": 0}
    platform = {"slack": {"enabled": True, "mode": "http", "api_base_url": slack.url,
                          "http_port": 0, **unpaced}}  # fmt: skip
    config = _config(directory, name, model, platform)
    replier = claude_replier(config, {KEY_ENV: "bench-key"})
    frontend = SlackFrontend(config.slack, slack.token, signing_secret=SECRET)
    app = App(config, build_store(config), replier, [frontend], shutdown_grace=1.0)
    running = asyncio.create_task(app.run())
    shown: dict[str, tuple[float, float]] = {}

    def settled() -> bool:
        for i, tag in enumerate(tags):
            final = _final_of(model, tag)
            at = None if final is None else slack.first_shown(f"D{i}", final[0])
            if final is not None and at is not None:
                shown[tag] = (at, final[1])
        return len(shown) == n

    try:
        await asyncio.wait_for(app.serving.wait(), 30)
        url = f"http://127.0.0.1:{frontend.http_port}{config.slack.http_path}"
        sender = EventSender(url, SECRET)

        def send_for(i: int, tag: str) -> Any:
            return lambda text: sender.send(message(tag, f"D{i}", text))

        gap = profile.busy_gap_seconds
        ends = await asyncio.gather(*(_burst(send_for(i, t), gap) for i, t in enumerate(tags)))
        sent = dict(zip(tags, ends, strict=True))
        await until(settled, profile.settle_timeout_seconds + n, 0.05)
        await asyncio.sleep(0.5)  # anything posted after the final text would show now
        settled()
    finally:
        app.request_stop()
        await asyncio.gather(running, return_exceptions=True)
        await replier.aclose()
        await model.stop()
        await slack.stop()
    once = ours = 0
    for i, tag in enumerate(tags):
        final = _final_of(model, tag)
        texts = [m.text for m in slack.posts(f"D{i}")]
        once += final is not None and texts.count(final[0]) == 1
        ours += len(texts)
    writes = sum(1 for c in slack.chat_log if c["method"] in ("chat.postMessage", "chat.update"))
    system = "Slack, Tier 3 enforced" if enforce else "Slack, no limits"
    system += "" if pacer else ", pacer off (baseline)"
    return _row(system, _answers(words), n, sent, shown, once, ours,
                sum(slack.rate_limited.values()), writes, slack.redundant_updates)  # fmt: skip


async def run_discord(
    profile: Profile, directory: str, n: int, words: tuple[int, int], token_seconds: float
) -> BusyRow:
    tags = [f"c{i}" for i in range(n)]
    model = Model({t: words[0] + i % 5 * words[1] for i, t in enumerate(tags)},
                  Plan(first_delay=0.2, delay=token_seconds))  # fmt: skip
    await model.start()
    base, gateway = discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    shown: dict[str, tuple[float, float]] = {}
    async with FakeDiscord() as fake:
        discord.http.Route.BASE = fake.api_base
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = fake.gateway_url
        fake.guilds.append(GUILD)
        fake.add_channel(CHANNEL, "text", guild_id=GUILD)
        fake.enforce_rate_limits()
        config = _config(directory, f"busy-discord-{n}-{words[0]}", model, {})
        discord_config = DiscordConfig(enabled=True, listen_channels=[str(CHANNEL)], scope="user")
        frontend = frontend_for(fake, SystemClock(), discord_config)
        replier = claude_replier(config, {KEY_ENV: "bench-key"})
        app = App(config, build_store(config), replier, [frontend], shutdown_grace=1.0)
        running = asyncio.create_task(app.run())

        def settled() -> bool:
            for tag in tags:
                final = _final_of(model, tag)
                if final is None:
                    continue
                writes = [*fake.created, *fake.edits]
                times = [w["at"] for w in writes if w.get("content") == final[0]]
                if times:
                    shown[tag] = (min(times), final[1])
            return len(shown) == n

        try:
            await asyncio.wait_for(app.serving.wait(), 30)

            def send_for(i: int, tag: str) -> Any:
                person = {"id": str(200_000_000_000_000_001 + i), "username": f"p{i}",
                          "discriminator": "0", "global_name": f"P{i}", "avatar": None}  # fmt: skip

                async def send(text: str) -> None:
                    await fake.dispatch("MESSAGE_CREATE", fake.message(
                        CHANNEL, person, f"{tag} {text}", guild_id=str(GUILD)))  # fmt: skip

                return send

            gap = profile.busy_gap_seconds
            ends = await asyncio.gather(*(_burst(send_for(i, t), gap) for i, t in enumerate(tags)))
            sent = dict(zip(tags, ends, strict=True))
            await until(settled, profile.settle_timeout_seconds + n, 0.05)
            await asyncio.sleep(0.5)
            settled()
        finally:
            app.request_stop()
            await asyncio.gather(running, return_exceptions=True)
            await replier.aclose()
            await model.stop()
            discord.http.Route.BASE = base
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = gateway
    texts = fake.shown(CHANNEL)
    once = 0
    for tag in tags:
        final = _final_of(model, tag)
        once += final is not None and texts.count(final[0]) == 1
    writes = len(fake.created) + len(fake.edits)
    return _row("Discord, one channel, 5 writes / 5 s", _answers(words), n, sent, shown, once,
                len(texts), fake.rate_limited, writes, fake.redundant_edits)  # fmt: skip


def _answers(words: tuple[int, int]) -> str:
    return f"{words[0]}-{words[0] + 4 * words[1]} words"


def streamed(row: BusyRow, profile: Profile) -> BusyRow:
    """The row, marked as one of long streams when its answers were the profile's long ones."""
    return replace(row, streams=row.answers == _answers(profile.busy_long_words))


async def run_busy(profile: Profile, directory: str) -> list[BusyRow]:
    rows = []
    short, long = profile.busy_short_words, profile.busy_long_words
    for n in profile.busy_sizes:
        for enforce, pacer in ((True, True), (False, True), (False, False)):
            rows.append(await run_slack(profile, directory, n, enforce, short,
                                        profile.busy_token_seconds, pacer))  # fmt: skip
    rows.append(await run_slack(profile, directory, profile.busy_streams, True, long,
                                profile.busy_token_seconds))  # fmt: skip
    for n, words in ((profile.discord_people, short), (profile.discord_people, long)):
        rows.append(await run_discord(profile, directory, n, words, profile.busy_token_seconds))
    return [streamed(row, profile) for row in rows]


def busy_summary(values: list[float]) -> str:
    """p50 / p99 / max in seconds."""
    if not values:
        return "- / - / -"
    p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
    return f"{p50 / 1000:.1f} / {p99 / 1000:.1f} / {max(values) / 1000:.1f}"
