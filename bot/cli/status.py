"""`burstbot status`: what is in flight right now, read from the database; the processes running
the bot (bot/core/processes.py), idle or gone ones too; and the Claude API's capacity: its limits
as the processes last heard them and the bursts waiting to start, in the order they will
(bot/core/shares.py).

Ids and owner names are shown through `printable`: they come from platforms and other processes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.config.sections import DAY, HOUR
from bot.core.events import ConversationKey
from bot.core.processes import ProcessRecord
from bot.core.shares import fair_order, speculative
from bot.core.store import ConversationSummary
from bot.ops.inspection import printable, render_table

if TYPE_CHECKING:
    from storage.sql_store import SqlStore


def relative(at: float | None, now: float) -> str:
    """`in 1.2s` / `3.0s ago` / `in 12 min` / `5.5 h ago` / `in 3.0 days`: easier to read at a
    glance than timestamps, and never a count of seconds too long to take in."""
    if at is None:
        return "-"
    delta = at - now
    span = abs(delta)
    if span < 120:
        amount = f"{span:.1f}s"
    elif span < 2 * HOUR:
        amount = f"{span / 60:.0f} min"
    elif span < 2 * DAY:
        amount = f"{span / HOUR:.1f} h"
    else:
        amount = f"{span / DAY:.1f} days"
    return f"in {amount}" if delta >= 0 else f"{amount} ago"


def ago(at: float, now: float) -> str:
    """`relative` for a moment past: one stamped as this very moment (or a hair after it, by a
    clock a little ahead) reads `0.0s ago`, not `in 0.0s`."""
    return relative(at, now) if at < now else "0.0s ago"


def in_workspace(conversation_id: str, workspace: str) -> bool:
    try:
        return ConversationKey.parse(conversation_id).workspace == workspace
    except ValueError:
        return False


def _row(item: ConversationSummary, now: float) -> list[str]:
    state = item.state
    timer = "-"
    if state.timer is not None:
        due, deadline = state.timer.due_at, state.timer.deadline_at
        timer = f"due {relative(due, now)}, deadline {relative(deadline, now)}"
    lease = "-"
    if state.lease_owner is not None:
        expires = state.lease_expires_at
        verb = "expired" if expires is not None and expires < now else "expires"
        owner = printable(state.lease_owner)
        lease = f"{owner} #{state.lease_token}, {verb} {relative(expires, now)}"
    outbox = f"{item.outbox_pending} pending, {item.outbox_failed} failed"
    return [
        printable(state.conversation_id),
        f"{state.answered_version}/{state.version}",
        str(item.pending_messages),
        timer,
        lease,
        outbox,
        relative(item.last_activity_at, now),
    ]


@dataclass(frozen=True, slots=True)
class Process:
    owner: str
    conversations: tuple[str, ...]  # held under an unexpired lease
    this_one: bool = False  # the process serving the page
    record: ProcessRecord | None = None  # None: holds leases, but has no row (yet)
    gone: bool = False  # its row not seen for `GONE_AFTER_SECONDS`


def processes(
    registered: Iterable[ProcessRecord],
    active: Iterable[ConversationSummary],
    now: float,
    this_owner: str | None,
) -> list[Process]:
    """The processes as the store shows them, each with the conversations it holds under an
    unexpired lease: every registered one (idle ones too; gone when not seen for a while), any
    other holder of a lease, and the process serving the page (if it runs the bot). The one
    serving the page comes first, then the live ones, then the gone, each by name."""
    held: dict[str, list[str]] = {}
    for item in active:
        state = item.state
        expires = state.lease_expires_at
        if state.lease_owner is not None and expires is not None and expires > now:
            held.setdefault(state.lease_owner, []).append(state.conversation_id)
    rows = {record.owner: record for record in registered}
    owners = {*rows, *held, *([this_owner] if this_owner is not None else [])}
    found = []
    for owner in owners:
        record = rows.get(owner)
        this_one = owner == this_owner
        gone = record is not None and record.gone(now) and not this_one
        found.append(Process(owner, tuple(held.get(owner, ())), this_one, record, gone))
    return sorted(found, key=lambda p: (not p.this_one, p.gone, p.owner))


def process_lines(found: Sequence[Process], now: float) -> list[str]:
    """One line per process: alive or gone, when last seen, where it runs, what it holds."""
    lines = ["", "processes:"]
    if not found:
        return [*lines, "  none running (none has written its row, none holds a lease)"]
    rows = []
    for p in found:
        record = p.record
        held = f"{len(p.conversations)} conversation(s)"
        if record is None:
            rows.append([printable(p.owner), "alive", "-", "-", "-", "-", "-", held])
            continue
        state = "gone" if p.gone else "alive"
        rows.append([printable(p.owner), state, ago(record.seen_at, now),
                     printable(record.host), str(record.pid), printable(record.version),
                     relative(record.started_at, now), held])  # fmt: skip
    headers = ["PROCESS", "STATE", "LAST SEEN", "HOST", "PID", "VERSION", "STARTED", "HOLDS"]
    return [*lines, *render_table(headers, rows)]


async def _installation_lines(store: SqlStore[Any], workspace: str) -> list[str]:
    """With "Add to Slack" installs, whether the workspace is installed: an uninstalled one's
    unsent replies failed with `workspace_not_installed`, which the outbox column shows."""
    installed = {record.team_id: record for record in await store.installations()}
    if not installed:
        return []  # one bot token (install = "token"): nothing is installed per workspace
    record = installed.get(workspace)
    if record is None:
        return [f"workspace {workspace}: not installed (uninstalled, or never installed here)"]
    return [f"workspace {workspace}: installed ({record.team_name})"]


async def status_lines(
    inspector: SqlStore[Any],
    now: float,
    show_all: bool = False,
    limit: int = 10,
    workspace: str | None = None,
) -> list[str]:
    """What is in flight, the processes running the bot, the API's capacity, then the most
    recently active conversations (of one workspace with `workspace`)."""

    def ours(items: list[ConversationSummary]) -> list[ConversationSummary]:
        if workspace is None:
            return items
        return [i for i in items if in_workspace(i.state.conversation_id, workspace)]

    headers = ["CONVERSATION", "ANSWERED", "PENDING", "TIMER", "LEASE", "OUTBOX", "LAST ACTIVITY"]
    active = ours(await inspector.list_conversations(active_only=True, limit=1000))
    lines = [] if workspace is None else await _installation_lines(inspector, workspace)
    lines.append("in flight:")
    if active:
        lines += render_table(headers, [_row(item, now) for item in active])
    else:
        lines.append("  nothing: no pending input, timers, leases or unsent replies")
    pending = sum(i.outbox_pending for i in active)
    failed = sum(i.outbox_failed for i in active)
    leased = sum(1 for i in active if i.state.lease_owner is not None)
    waiting = sum(1 for i in active if i.pending_messages)
    retry = " (`burstbot retry CONVERSATION` posts them again)" if failed else ""
    lines.append(
        f"{len(active)} in flight: {waiting} with pending input, {leased} leased; "
        f"outbox {pending} pending, {failed} failed{retry}"
    )
    lines += process_lines(processes(await inspector.processes(now), active, now, None), now)
    lines += await capacity_lines(inspector, now, active)
    everything = show_all or workspace is not None
    listed = await inspector.list_conversations(
        active_only=False, limit=1_000_000 if everything else limit
    )
    recent = ours(listed)[: None if show_all else limit]
    lines += [
        "",
        "every conversation:" if show_all else f"recent (up to {limit}; --all for every one):",
    ]
    if recent:
        lines += render_table(headers, [_row(item, now) for item in recent])
    else:
        lines.append("  none yet")
    return lines


async def capacity_lines(
    inspector: SqlStore[Any], now: float, active: list[ConversationSummary], shown: int = 10
) -> list[str]:
    """The API's limits as last heard (per key's name), and the due bursts no process has
    started yet, in the order they will start: closed windows first, then by workspace, channel
    and person shares."""
    lines = ["", "capacity:"]
    heard = await inspector.all_api_limits(now)
    if not heard:
        lines.append("  Claude API: no limits heard yet (only max_concurrent_generations bounds)")
    for scope, shared in heard:
        limits = shared.limits.aged(shared.age)
        budgets = ", ".join(
            f"{name.replace('-', ' ')} {b.remaining:,.0f}/{b.limit:,.0f}"
            for name, b in limits.budgets.items()
        )
        held = f"; starts held {limits.held:.1f}s more: {limits.reason}" if limits.held > 0 else ""
        lines.append(
            f"  Claude API {printable(scope)} (heard {relative(now - shared.age, now)}): "
            f"left this minute: {budgets or 'no limits announced'}{held}"
        )
    shares = await inspector.shares(now)
    running = [share.conversation_id for share in shares if share.generating]
    people = {share.conversation_id: share.person for share in shares}
    due = [
        timer
        for item in active
        if (timer := item.state.timer) is not None
        and item.state.lease_owner is None
        and min(timer.due_at, timer.start_at or timer.due_at) <= now
    ]
    if not due:
        lines.append("  no burst waiting to start")
        return lines
    lines.append(f"  {len(due)} waiting to start, in the order they will:")
    for n, timer in enumerate(fair_order(due, running, now, people)[:shown], start=1):
        kind = "early start" if speculative(timer, now) else "window closed"
        when = relative(timer.due_at, now)
        lines.append(f"  {n:>3}. {printable(timer.conversation_id)}  {kind}, due {when}")
    return lines
