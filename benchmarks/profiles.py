"""Sizes and timings of one benchmark run: `FULL` for the published report, `QUICK` for CI."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    quiet_seconds: float
    max_wait_seconds: float
    # 1. bursts: people typing bursts, pausing between them
    burst_conversations: int
    bursts_per_conversation: int
    burst_size: tuple[int, int]
    gap_seconds: tuple[float, float]
    pause_seconds: float
    burst_tokens: int
    burst_token_latency: float
    # 2. typing during generation: a burst, then one more message while the reply streams
    typing_conversations: int
    typing_burst_size: tuple[int, int]
    follow_up_seconds: tuple[float, float]  # after the burst's last message
    typing_tokens: int
    typing_token_latency: float
    # 3. ingest flood
    senders: int
    messages_per_sender: int
    # 4. scale
    stored_conversations: int
    armed_timers: int
    firing: tuple[tuple[int, float], ...]  # runs of (timers falling due, over seconds), slow first
    # 5. Slack HTTP flood (burstbot processes vs a bare Bolt app)
    flood_senders: int = 32
    flood_messages_per_sender: int = 64
    flood_conversations_per_sender: int = 8
    flood_quiet_seconds: float = 1.5
    flood_model_words: int = 20
    flood_model_delay: float = 0.02
    flood_runs: int = 3
    flood_workers: tuple[int, ...] = (1,)  # SQLite: one process (several need PostgreSQL)
    start_spread_seconds: float = 1.0  # people start typing at random times within this
    settle_timeout_seconds: float = 120.0
    # 7, 8. first visible word and cancel latency (Slack HTTP mode, Claude replier, real clock)
    felt_conversations: int = 20
    felt_quiet_seconds: float = 0.5
    felt_ttft_seconds: float = 0.3  # the fake model's time to first token
    felt_token_seconds: float = 0.02
    felt_words: int = 150
    felt_cancel_after: int = 10  # deltas streamed before the superseding message is sent
    felt_spread_seconds: float = 0.25
    # 9. prompt caching
    caching_conversations: int = 8
    caching_turns: int = 20
    # 10. streaming under rate limits: conversation i answers words[0] + i * words[1] words
    limits_conversations: int = 100
    limits_words: tuple[int, int] = (20, 8)
    limits_token_seconds: float = 0.2
    discord_people: int = 10  # conversations in one Discord channel (scope "user")
    # 11. idle CPU: wall seconds a waiting process is measured for
    idle_seconds: float = 5.0
    # 12. felt latency on chat timing (benchmarks/rhythm.py): the generated timeline's size
    rhythm_people: int = 100
    rhythm_messages: int = 2000
    rhythm_ttft_seconds: float = 0.8
    rhythm_token_seconds: float = 0.02
    rhythm_tokens: int = 60
    rhythm_speculate_after_seconds: float = 0.3
    # 13. a busy workspace: N people at once, a 3-message burst each, default settings
    busy_sizes: tuple[int, ...] = (10, 30, 100)
    busy_short_words: tuple[int, int] = (10, 2)  # conversation i: words[0] + i % 5 * words[1]
    busy_long_words: tuple[int, int] = (60, 10)  # long streams (the model writes for seconds)
    busy_streams: int = 20  # long streams at once under Slack's enforced tiers
    busy_token_seconds: float = 0.05
    busy_gap_seconds: float = 0.3  # between a burst's messages


FULL = Profile(
    name="full",
    quiet_seconds=0.5,
    max_wait_seconds=8.0,
    burst_conversations=100,
    bursts_per_conversation=2,
    burst_size=(3, 8),
    gap_seconds=(0.05, 0.4),
    pause_seconds=3.0,
    burst_tokens=40,
    burst_token_latency=0.01,
    typing_conversations=100,
    typing_burst_size=(2, 4),
    follow_up_seconds=(0.6, 2.0),
    typing_tokens=250,
    typing_token_latency=0.02,
    senders=100,
    messages_per_sender=100,
    stored_conversations=1_000_000,
    armed_timers=100_000,
    firing=tuple((rate * 4, 4.0) for rate in (100, 250, 500, 1_000, 2_000)),
)

QUICK = Profile(
    name="quick",
    quiet_seconds=0.1,
    max_wait_seconds=1.0,
    burst_conversations=4,
    bursts_per_conversation=1,
    burst_size=(3, 5),
    gap_seconds=(0.01, 0.05),
    pause_seconds=0.5,
    burst_tokens=5,
    burst_token_latency=0.002,
    typing_conversations=3,
    typing_burst_size=(2, 2),
    follow_up_seconds=(0.15, 0.3),
    typing_tokens=50,
    typing_token_latency=0.005,
    senders=4,
    messages_per_sender=25,
    stored_conversations=2_000,
    armed_timers=200,
    firing=((20, 0.5),),
    flood_senders=4,
    flood_messages_per_sender=6,
    flood_conversations_per_sender=2,
    flood_quiet_seconds=0.3,
    flood_model_words=3,
    flood_model_delay=0.0,
    flood_runs=1,
    flood_workers=(1,),
    start_spread_seconds=0.1,
    settle_timeout_seconds=30.0,
    felt_conversations=3,
    felt_quiet_seconds=0.1,
    felt_ttft_seconds=0.05,
    felt_token_seconds=0.005,
    felt_words=40,
    felt_cancel_after=3,
    felt_spread_seconds=0.02,
    rhythm_people=5,
    rhythm_messages=60,
    caching_conversations=1,
    caching_turns=8,
    limits_conversations=4,
    limits_words=(5, 3),
    limits_token_seconds=0.05,
    discord_people=3,
    idle_seconds=1.0,
    busy_sizes=(3,),
    busy_short_words=(3, 1),
    busy_long_words=(6, 2),
    busy_streams=3,
    busy_token_seconds=0.02,
)
