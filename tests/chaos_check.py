"""The chaos checker: what the fake platform received, held against what the store accepted.

- duplicates: user messages covered by two posted replies (G1). A post is mapped to its outbox row
  by its nonce (`r<id>`), and the row to the version range it covers.
- unanswered: acknowledged messages covered by no posted reply (G2, G7 — lost ones count too).
- unseen: posted answers whose text does not quote exactly the messages they cover (the reply saw
  its whole burst and nothing else).
- late: replies that reached the platform later than the design's bound after their burst began
  (G4/G5). A burst begins at its first message, or at the previous reply's commit when it arrived
  while that one was being generated (the commit restarts the cap). The bound is
  `max_wait + one scheduler tick + generation timeout + lease TTL`, plus for each fault that hit
  this burst what the design lets it cost: a failed model attempt (timeout + backoff), a SIGKILL of
  the worker that held its lease (TTL + a new generation), a worker killed between commit and post
  (the delivery claim's TTL), a failed post (its backoff); plus jitter for process scheduling:
  a fixed half second, plus STARVED_STEPS times the worst lag of the parent's own 50 ms timer
  during the burst (on a machine starved for CPU every hop of the pipeline runs that late; the
  summary's `max_loop_lag` says how starved this run was).
- takeover: for every conversation whose lease holder was SIGKILLed, how long until another worker
  started generating for it; must be within lease TTL + one scheduler tick (+ the same jitter) (G5).
"""

from __future__ import annotations

import os
import sys
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from bot.core.store import GenerationRecord, Store

if TYPE_CHECKING:
    from tests.chaos_run import FakePlatform, Run

STARVED_STEPS = 6  # wake-ups in a row from arrival to post: timer, lease, generate, commit, post


def worst_lag(run: Run, start: float, end: float) -> float:
    return max((lag for when, lag in run.lags if start <= when <= end + 0.1), default=0.0)


async def check(
    store: Store,
    channels: list[str],
    run: Run,
    platform: FakePlatform,
    engine: dict[str, Any],
    replier: dict[str, Any],
    jitter: float,
) -> dict[str, Any]:
    verbose = bool(os.environ.get("BURSTBOT_CHAOS_VERBOSE"))
    ttl, tick = engine["lease_ttl_seconds"], engine["poll_seconds"]
    gen_timeout = replier["generation_timeout"]
    base_bound = engine["max_wait_seconds"] + tick + gen_timeout + ttl + jitter
    attempts = Counter(a["nonce"] for a in platform.attempts)
    generations: dict[str, list[GenerationRecord]] = defaultdict(list)
    for record in await store.generations(None):
        generations[record.conversation_id].append(record)
    kills_by_cid: dict[str, list[float]] = defaultdict(list)
    for killed_at, _owner, leases in run.kills:
        for cid in leases:
            kills_by_cid[cid].append(killed_at)
    kill_times = [k for k, _, _ in run.kills]

    counts: dict[str, Any] = Counter()
    max_latency, max_ratio = 0.0, 0.0
    for channel in channels:
        cid = f"chaos/w/{channel}/"
        state = await store.conversation_state(cid)
        acked = {m for m, c in run.acked.items() if c == channel}
        if state is None:
            counts["unanswered"] += len(acked)
            continue
        messages = {m.seq: m for m in await store.pending_messages(cid, 0, state.version)}
        stored = Counter(m.message_id for m in messages.values())
        counts["messages"] += len(messages)
        counts["unanswered"] += len(acked - set(stored))  # acknowledged but lost
        counts["stored_twice"] += sum(1 for n in stored.values() if n > 1)
        coverage: Counter[int] = Counter()
        previous_commit = 0.0
        for row in sorted(await store.replies(cid), key=lambda r: r.covers_to_version):
            counts["replies"] += 1
            post = platform.posts.get(f"r{row.id}")
            covered = [
                messages[s]
                for s in range(row.covers_from_version + 1, row.covers_to_version + 1)
                if s in messages
            ]
            if post is None:
                counts["not_posted"] += 1
                previous_commit = row.created_at
                continue
            counts["apologies" if row.kind == "apology" else "answers"] += 1
            coverage.update(m.seq for m in covered)
            if row.kind == "answer":
                quoted = sorted(post["text"].removeprefix("saw: ").split())
                if quoted != sorted(m.text for m in covered):
                    counts["unseen"] += 1
            if covered:
                begin = max(min(m.created_at for m in covered), previous_commit)
                end = float(post["received_at"])
                failed = sum(
                    1
                    for g in generations[cid]
                    if g.outcome == "failed" and begin <= g.started_at <= end
                )
                killed = sum(1 for k in kills_by_cid[cid] if begin <= k <= end)
                killed_before_post = sum(1 for k in kill_times if row.created_at <= k <= end)
                post_retries = attempts[f"r{row.id}"] - 1
                bound = (
                    base_bound
                    + failed * (gen_timeout + engine["model_backoff_seconds"] * 4)
                    + killed * (ttl + gen_timeout + tick)
                    + killed_before_post * (ttl + tick)
                    + engine["delivery_backoff_seconds"] * 2**post_retries
                    + STARVED_STEPS * worst_lag(run, begin, end)
                )
                latency = end - begin
                max_latency = max(max_latency, latency)
                max_ratio = max(max_ratio, latency / bound)
                if latency > bound:
                    counts["late"] += 1
                    if verbose:
                        window = [
                            (
                                round(g.started_at - begin, 2),
                                round(g.ended_at - begin, 2),
                                g.outcome,
                                g.lease_token,
                            )
                            for g in generations[cid]
                            if begin - 1 <= g.ended_at <= end
                        ]
                        print(
                            f"late {cid} r{row.id} v{row.covers_from_version}-"
                            f"{row.covers_to_version} latency={latency:.2f} bound={bound:.2f} "
                            f"commit=+{row.created_at - begin:.2f} failed={failed} "
                            f"killed={killed}/{killed_before_post} posts={post_retries + 1} "
                            f"generations={window}",
                            file=sys.stderr,
                        )
            previous_commit = row.created_at
        counts["duplicates"] += sum(1 for n in coverage.values() if n > 1)
        counts["unanswered"] += sum(1 for seq in messages if coverage[seq] == 0)

    takeovers = []
    for killed_at, _owner, leases in run.kills:
        for cid in leases:
            after = [g.started_at for g in generations[cid] if g.started_at > killed_at]
            if after:
                took = min(after) - killed_at
                takeovers.append(took)
                starved = STARVED_STEPS * worst_lag(run, killed_at, min(after))
                if took > ttl + tick + jitter + starved:
                    counts["slow_takeovers"] += 1
            else:
                counts["no_takeover"] += 1
    outcomes = Counter(g.outcome for records in generations.values() for g in records)
    return {
        "conversations": len(channels),
        "bursts": run.size.bursts,
        "messages": counts["messages"],
        "acked": len(run.acked),
        "duplicate_deliveries": run.duplicate_deliveries,
        "kills": len(run.kills),
        "kills_while_generating": sum(1 for _, _, leases in run.kills if leases),
        "replies": counts["replies"],
        "posts": len(platform.posts),
        "post_attempts": len(platform.attempts),
        "post_failures": platform.failures,
        "model_failures": outcomes["failed"],
        "superseded": outcomes["superseded"],
        "apologies": counts["apologies"],
        "duplicates": counts["duplicates"],
        "unanswered": counts["unanswered"],
        "stored_twice": counts["stored_twice"],
        "not_posted": counts["not_posted"],
        "unseen": counts["unseen"],
        "late": counts["late"],
        "max_latency": round(max_latency, 2),
        "max_latency_of_bound": round(max_ratio, 2),
        "takeovers": len(takeovers),
        "no_takeover": counts["no_takeover"],
        "slow_takeovers": counts["slow_takeovers"],
        "max_takeover": round(max(takeovers, default=0.0), 2),
        "takeover_bound": round(ttl + tick + jitter, 2),
        "max_loop_lag": round(max((lag for _, lag in run.lags), default=0.0), 2),
    }


def summary_line(db: str, size: str, counts: dict[str, Any]) -> str:
    fields = " ".join(f"{k}={v}" for k, v in counts.items())
    return f"chaos db={db} size={size} {fields}"
