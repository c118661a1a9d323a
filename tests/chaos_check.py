"""The chaos checker: what the fake platform received, held against what the store accepted.

Every count is over raw posts: a post is mapped to its outbox row by its reply id (`r<id>`), and
the row to the version range it covers. A reply is posted when every one of its parts is shown.

- duplicates: user messages covered by two posted replies (G1).
- duplicate_posts_raw: posts of a reply part the platform already showed (G1 at the edge: one
  per reply id and part, counted raw, whatever the platform deduped or not).
- unanswered: acknowledged messages covered by no posted reply (G2, G7 — lost ones count too).
- not_posted: replies whose parts are not all shown.
- stray_drafts: streamed drafts no reply finished (with streaming on): a second visible message
  for a burst (G10). `streamed` counts the replies whose first part is a finished draft.
- wrong_channel: posts of a reply (its parts, its finished draft) stored in another channel than
  its conversation's: an answer shown to the wrong people.
- unseen: posted answers whose text (the parts joined) does not quote exactly the messages they
  cover (the reply saw its whole burst and nothing else).
- out_of_order: a reply part shown before an earlier part of its reply, or a reply whose first
  post came before the previous reply of its conversation (commit order) showed its last part
  (G9).
- late: replies that reached the platform later than the design's bound after their burst began
  (G4/G5). A burst begins at its first message, or at the previous reply's commit when it arrived
  while that one was being generated (the commit restarts the cap). The bound is
  `max_wait + one scheduler tick + generation timeout + lease TTL`, plus for each fault that hit
  this burst what the design lets it cost: a failed model attempt (timeout + backoff), a SIGKILL of
  the worker that held its lease (TTL + a new generation), a worker killed between commit and post
  (the delivery claim's TTL), failed posts (their backoff and a tick each), Retry-After and slow
  posts (their seconds), waiting behind the conversation's previous reply (G9: from this commit
  until the platform answered that reply's last post), a store busy spell (its length, and a lost
  lease or claim: TTL + a new generation); plus jitter for process scheduling: a fixed half
  second, plus STARVED_STEPS times the worst lag of the parent's own 50 ms timer during the burst
  (on a machine starved for CPU every hop of the pipeline runs that late; the summary's
  `max_loop_lag` says how starved this run was).
- takeover: for every conversation whose lease holder was SIGKILLed, how long until another worker
  started generating for it (its generation's record) or was seen holding its lease, whichever
  came first: a worker killed in turn while generating leaves no record; must be within lease
  TTL + one scheduler tick (+ the same jitter) (G5).
- max_idle_cpu: the most CPU (cores: CPU seconds per wall second, from /proc) any worker used in
  any half second of a quiet spell, once the work begun before the spell has ended: nothing
  arrives then but the messages of two people typing on past their deadline, so a worker only
  waits on the model, the platform and its timers. Reported, never judged: a CPU figure depends
  on the machine (`python -m benchmarks --only idle` measures it beside a baseline); the busy
  loop it would show (input past the deadline while generating waking the scheduler again and
  again) is asserted against on a fake clock in `tests/test_promise_regressions.py`.

Also reported: the faults injected (post_failures, retry_after, slow_posts, deduped_by_nonce,
late_input, store_busy, ingest_refused, failed_starts: workers that exited at start because
the store was busy, started again) and `seen_newer`, answers committed past newer input
because their deadline had passed (input after the deadline, answered in the next burst).
"""

from __future__ import annotations

import itertools
import os
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bot.core.store import GenerationRecord, OutboxRow
from storage.sql_store import SqlStore

if TYPE_CHECKING:
    from tests.chaos_run import FakePlatform, Run

STARVED_STEPS = 6  # wake-ups in a row from arrival to post: timer, lease, generate, commit, post
SPELL_SETTLE = 0.8  # seconds into a quiet spell before sampling: work begun before it ends
IDLE_WINDOW = 0.5  # seconds of CPU time added up at a time
STARTUP_GRACE = 3.0  # a (re)started worker's imports and migrations are not idling


def worst_lag(run: Run, start: float, end: float) -> float:
    return max((lag for when, lag in run.lags if start <= when <= end + 0.1), default=0.0)


@dataclass
class Shown:
    """What the platform shows of one reply: every stored post of each part, in order."""

    parts: int = 0
    copies: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)  # every raw attempt

    @property
    def complete(self) -> bool:
        return self.parts > 0 and all(i in self.copies for i in range(self.parts))

    @property
    def first_at(self) -> float:
        return min(p["stored_at"] for copies in self.copies.values() for p in copies)

    @property
    def last_at(self) -> float:
        """When its last part first showed (a streamed draft: when it was finished): the reply
        was whole from then on."""
        return max(c[0].get("final_at", c[0]["stored_at"]) for c in self.copies.values())

    @property
    def settled_at(self) -> float:
        """When the platform answered the last request for it (the deliverer could mark it)."""
        return max((r["answered_at"] for r in self.requests if "answered_at" in r), default=0.0)

    def text(self) -> str:
        return " ".join(self.copies[i][0]["text"] for i in range(self.parts))

    def parts_out_of_order(self) -> int:
        firsts = [self.copies[i][0]["stored_at"] for i in sorted(self.copies)]
        return sum(1 for a, b in itertools.pairwise(firsts) if b < a)


def shown_replies(platform: FakePlatform) -> dict[str, Shown]:
    shown: dict[str, Shown] = defaultdict(Shown)
    for attempt in platform.attempts:
        shown[attempt["reply"]].requests.append(attempt)
    for post in platform.posts:  # a streamed draft counts as part 0 of the reply finishing it
        reply = shown[post.get("finished_by", post["reply"])]
        reply.parts = max(reply.parts, int(post["parts"]))
        reply.copies.setdefault(int(post["part"]), []).append(post)
    return shown


def store_stalls(run: Run, begin: float, end: float) -> float:
    """How long the store was locked or cut off between `begin` and `end`: each such spell may
    stall a step for its length, then make it fail (after the busy timeout) and wait a tick."""
    from tests.chaos_run import ENGINE, WORKER_SQLITE_BUSY_TIMEOUT_MS

    return sum(
        (finish - start) + WORKER_SQLITE_BUSY_TIMEOUT_MS / 1000 + ENGINE["poll_seconds"]
        for start, finish, _ in run.store_busy
        if start <= end and finish >= begin
    )


def idle_cpu(run: Run) -> list[tuple[str, float]]:
    """(worker, cores) for every worker alive through a quiet spell: the most it used in any
    IDLE_WINDOW of the spell (a spin while one generation runs on lasts well under a spell)."""
    found = []
    for start, end in run.spells:
        samples: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
        for owner, begin, finish, seconds in run.cpu:
            if begin >= start + SPELL_SETTLE and finish <= end:
                samples[owner].append((begin, finish, seconds))
        for owner, mine in samples.items():
            if run.worker_starts.get(owner, 0.0) + STARTUP_GRACE > start:
                continue
            if sum(f - b for b, f, _ in mine) < (end - start - SPELL_SETTLE) / 2:
                continue  # killed during the spell
            found.append((owner, max(busiest(mine, IDLE_WINDOW), default=0.0)))
    return found


def busiest(samples: list[tuple[float, float, float]], window: float) -> list[float]:
    """Cores used over each run of consecutive samples spanning about `window` seconds."""
    found = []
    for i, (begin, _, _) in enumerate(samples):
        used = wall = 0.0
        for b, f, seconds in samples[i:]:
            used, wall = used + seconds, wall + (f - b)
            if f - begin >= window - 1e-3:
                found.append(used / wall)
                break
    return found


async def check(
    store: SqlStore,
    channels: list[str],
    run: Run,
    platform: FakePlatform,
    engine: dict[str, Any],
    replier: dict[str, Any],
    jitter: float,
) -> dict[str, Any]:
    from tests.chaos_run import DISCORD, mode_of

    verbose = bool(os.environ.get("BURSTBOT_CHAOS_VERBOSE"))
    ttl, tick = engine["lease_ttl_seconds"], engine["poll_seconds"]
    gen_timeout = replier["generation_timeout"]
    base_bound = engine["max_wait_seconds"] + tick + gen_timeout + ttl + jitter
    shown = shown_replies(platform)
    generations: dict[str, list[GenerationRecord]] = defaultdict(list)
    for record in await store.generations(None):
        generations[record.conversation_id].append(record)
    kills_by_cid: dict[str, list[float]] = defaultdict(list)
    for killed_at, _owner, leases in run.kills:
        for cid in leases:
            kills_by_cid[cid].append(killed_at)
    kill_times = [k for k, _, _ in run.kills]

    def store_busy_cost(begin: float, end: float) -> float:
        return sum(
            (finish - start) + ttl + gen_timeout + 2 * tick
            for start, finish, _ in run.store_busy
            if start <= end and finish >= begin - ttl
        )

    counts: dict[str, Any] = Counter()
    max_latency, max_ratio = 0.0, 0.0
    for channel in channels:
        cid = f"chaos/w/{channel}/"
        state = await store.conversation_state(cid)
        acked = {m for m, c in run.acked.items() if c == channel}
        if state is None:
            counts["unanswered"] += len(acked)
            continue
        counts["discord_like" if mode_of(channel) == DISCORD else "slack_like"] += 1
        messages = {m.seq: m for m in await store.pending_messages(cid, 0, state.version)}
        stored = Counter(m.message_id for m in messages.values())
        counts["messages"] += len(messages)
        counts["unanswered"] += len(acked - set(stored))  # acknowledged but lost
        counts["stored_twice"] += sum(1 for n in stored.values() if n > 1)
        coverage: Counter[int] = Counter()
        previous_commit = 0.0
        previous: Shown | None = None
        for row in sorted(await store.replies(cid), key=lambda r: r.id):
            counts["replies"] += 1
            counts["seen_newer"] += row.seen_version > row.covers_to_version
            reply = shown.get(f"r{row.id}")
            covered = [
                messages[s]
                for s in range(row.covers_from_version + 1, row.covers_to_version + 1)
                if s in messages
            ]
            if reply is not None and reply.copies:
                counts["wrong_channel"] += sum(
                    1 for copies in reply.copies.values() for p in copies if p["channel"] != channel
                )
                doubled = sum(len(c) - 1 for c in reply.copies.values())
                counts["duplicate_posts_raw"] += doubled
                if doubled:  # always: a failing run says how it happened (stderr)
                    report_doubled(cid, row, reply, run)
                counts["out_of_order"] += reply.parts_out_of_order()
                if previous is not None and previous.copies:
                    counts["out_of_order"] += reply.first_at < previous.last_at
            if reply is None or not reply.complete:
                counts["not_posted"] += 1
                previous_commit = row.created_at
                previous = reply if reply is not None else previous
                continue
            counts["apologies" if row.kind == "apology" else "answers"] += 1
            counts["multi_part"] += reply.parts > 1
            coverage.update(m.seq for m in covered)
            if row.kind == "answer":
                quoted = sorted(reply.text().removeprefix("saw: ").split())
                if quoted != sorted(m.text for m in covered):
                    counts["unseen"] += 1
            if covered:
                begin = max(min(m.created_at for m in covered), previous_commit)
                end = reply.last_at
                bound = base_bound + latency_allowance(
                    run, row, reply, previous, begin, end, generations[cid],
                    kills_by_cid[cid], kill_times, engine, replier,
                ) + store_busy_cost(begin, end)  # fmt: skip
                latency = end - begin
                max_latency = max(max_latency, latency)
                max_ratio = max(max_ratio, latency / bound)
                if latency > bound:
                    counts["late"] += 1
                    if verbose:
                        report_late(cid, row, reply, begin, end, bound, generations[cid])
            previous_commit = row.created_at
            previous = reply
        counts["duplicates"] += sum(1 for n in coverage.values() if n > 1)
        counts["unanswered"] += sum(1 for seq in messages if coverage[seq] == 0)

    takeovers = []
    for killed_at, _owner, leases in run.kills:
        for cid in leases:
            after = [g.started_at for g in generations[cid] if g.started_at > killed_at]
            if (killed_at, cid) in run.taken_over:  # seen leased by another worker
                after.append(run.taken_over[(killed_at, cid)])
            if after:
                took = min(after) - killed_at
                takeovers.append(took)
                starved = STARVED_STEPS * worst_lag(run, killed_at, min(after))
                busy = store_stalls(run, killed_at, min(after))
                if took > ttl + tick + jitter + starved + busy:
                    counts["slow_takeovers"] += 1
                    if verbose:
                        print(
                            f"slow takeover {cid}: {took:.2f}s (starved {starved:.2f}, "
                            f"store busy {busy:.2f})",
                            file=sys.stderr,
                        )
            else:
                counts["no_takeover"] += 1
    outcomes = Counter(g.outcome for records in generations.values() for g in records)
    idle = idle_cpu(run)
    if verbose:
        print("spells: " + " ".join(f"{a:.2f}-{b:.2f}" for a, b in run.spells), file=sys.stderr)
        print("idle cpu: " + " ".join(f"{o}={c:.3f}" for o, c in idle), file=sys.stderr)
    return {
        "conversations": len(channels),
        "discord_like": counts["discord_like"],
        "slack_like": counts["slack_like"],
        "bursts": run.size.bursts,
        "messages": counts["messages"],
        "acked": len(run.acked),
        "duplicate_deliveries": run.duplicate_deliveries,
        "kills": len(run.kills),
        "kills_while_generating": sum(1 for _, _, leases in run.kills if leases),
        "replies": counts["replies"],
        "multi_part": counts["multi_part"],
        "posts": len(platform.posts),
        "edits": platform.edits,
        "streamed": sum(1 for p in platform.posts if p.get("finished_by")),
        "stray_drafts": sum(1 for p in platform.posts if is_stray_draft(p)),
        "wrong_channel": counts["wrong_channel"],
        "post_attempts": len(platform.attempts),
        "post_failures": platform.failures,
        "retry_after": platform.rate_limited,
        "slow_posts": platform.slow,
        "deduped_by_nonce": platform.deduped,
        "late_input": run.late_input,
        "seen_newer": counts["seen_newer"],
        "store_busy": len(run.store_busy),
        "ingest_refused": run.ingest_refused,
        "failed_starts": run.failed_starts,
        "model_failures": outcomes["failed"],
        "superseded": outcomes["superseded"],
        "apologies": counts["apologies"],
        "duplicates": counts["duplicates"],
        "duplicate_posts_raw": counts["duplicate_posts_raw"],
        "unanswered": counts["unanswered"],
        "stored_twice": counts["stored_twice"],
        "not_posted": counts["not_posted"],
        "unseen": counts["unseen"],
        "out_of_order": counts["out_of_order"],
        "late": counts["late"],
        "max_latency": round(max_latency, 2),
        "max_latency_of_bound": round(max_ratio, 2),
        "takeovers": len(takeovers),
        "no_takeover": counts["no_takeover"],
        "slow_takeovers": counts["slow_takeovers"],
        "max_takeover": round(max(takeovers, default=0.0), 2),
        "takeover_bound": round(ttl + tick + jitter, 2),
        "idle_samples": len(idle),
        "max_idle_cpu": round(max((cores for _, cores in idle), default=0.0), 3),
        "max_loop_lag": round(max((lag for _, lag in run.lags), default=0.0), 2),
    }


def latency_allowance(
    run: Run,
    row: OutboxRow,
    reply: Shown,
    previous: Shown | None,
    begin: float,
    end: float,
    generations: list[GenerationRecord],
    kills: list[float],
    kill_times: list[float],
    engine: dict[str, Any],
    replier: dict[str, Any],
) -> float:
    """What the faults that hit this burst may add to its latency (see the module docstring)."""
    ttl, tick = engine["lease_ttl_seconds"], engine["poll_seconds"]
    gen_timeout = replier["generation_timeout"]
    failed = sum(1 for g in generations if g.outcome == "failed" and begin <= g.started_at <= end)
    killed = sum(1 for k in kills if begin <= k <= end)
    killed_before_post = sum(1 for k in kill_times if row.created_at <= k <= end)
    post_retries = max((int(r["attempt"]) for r in reply.requests), default=1) - 1
    behind = max(0.0, previous.settled_at - row.created_at) + tick if previous else 0.0
    return (
        failed * (gen_timeout + engine["model_backoff_seconds"] * 4)
        + killed * (ttl + gen_timeout + tick)
        + killed_before_post * (ttl + tick)
        + engine["delivery_backoff_seconds"] * 2**post_retries
        + post_retries * tick
        + sum(float(r.get("retry_after", 0)) + r.get("slow_seconds", 0.0) for r in reply.requests)
        + behind
        + STARVED_STEPS * worst_lag(run, begin, end)
    )


def report_late(
    cid: str,
    row: OutboxRow,
    reply: Shown,
    begin: float,
    end: float,
    bound: float,
    generations: list[GenerationRecord],
) -> None:
    window = [
        (round(g.started_at - begin, 2), round(g.ended_at - begin, 2), g.outcome, g.lease_token)
        for g in generations
        if begin - 1 <= g.ended_at <= end
    ]
    requests = [
        (round(r["received_at"] - begin, 2), r.get("status"), r["part"], r["attempt"], r["owner"])
        for r in reply.requests
    ]
    print(
        f"late {cid} r{row.id} v{row.covers_from_version}-{row.covers_to_version} "
        f"latency={end - begin:.2f} bound={bound:.2f} commit=+{row.created_at - begin:.2f} "
        f"generations={window} requests={requests}",
        file=sys.stderr,
    )


def report_doubled(cid: str, row: OutboxRow, reply: Shown, run: Run) -> None:
    t0 = min(r["received_at"] for r in reply.requests)
    requests = [
        (round(r["received_at"] - t0, 3), round(r.get("answered_at", t0) - t0, 3),
         r.get("status"), r["part"], r["attempt"], r["owner"],
         round(r.get("slow_seconds", 0.0), 2), r.get("retry_after"))
        for r in reply.requests
    ]  # fmt: skip
    stored = [
        (part, round(p["stored_at"] - t0, 3), p["owner"], p["attempt"])
        for part, copies in sorted(reply.copies.items())
        for p in copies
    ]
    kills = [(round(k - t0, 3), owner) for k, owner, _ in run.kills if t0 - 5 <= k <= t0 + 15]
    busy = [
        (round(a - t0, 3), round(b - t0, 3), how)
        for a, b, how in run.store_busy
        if t0 - 5 <= a <= t0 + 15
    ]
    print(
        f"doubled {cid} r{row.id} created=+{row.created_at - t0:.3f} requests "
        f"(received, answered, status, part, attempt, owner, slow, retry_after)={requests} "
        f"stored={stored} kills={kills} store_busy={busy}",
        file=sys.stderr,
    )


def is_stray_draft(post: dict[str, Any]) -> bool:
    """A streamed draft (posted under its key, `d…`) that no reply finished."""
    return str(post["reply"]).startswith("d") and not post.get("finished_by")


def summary_line(db: str, size: str, counts: dict[str, Any]) -> str:
    fields = " ".join(f"{k}={v}" for k, v in counts.items())
    return f"chaos db={db} size={size} {fields}"
