"""What each page shows, gathered from the store with the operations the command line uses
(`burstbot status`'s listing, `explain`'s timeline, `usage`'s summaries); nothing is rendered
here, so the pages and their tests read plain values.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from bot.cli.explain import explain_lines
from bot.cli.status import Process, processes
from bot.config import DAY
from bot.core.actions import ActionRecord
from bot.core.installations import InstallationRecord
from bot.core.store import Backlog, ConversationSummary, OutboxRow
from bot.ops.usage import PriceTable, UsageRow, summarize, tool_call_counts

if TYPE_CHECKING:
    from bot.tool_servers import McpHub
    from storage.sql_store import SqlStore

RECENT_CONVERSATIONS = 50
WAIT_BUCKETS = (1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0)
"""Upper bounds (seconds) of the felt-wait histogram's bars; a last bar holds the longer ones."""


@dataclass(frozen=True, slots=True)
class ToolServer:
    name: str
    state: str
    calls: str  # in the last day, as `burstbot usage` counts them


@dataclass(frozen=True, slots=True)
class Overview:
    processes: list[Process]
    backlog: Backlog
    in_flight: list[ConversationSummary]
    recent: list[ConversationSummary]
    troubled: list[OutboxRow]  # failed replies, and pending ones held back by an error
    installations: list[InstallationRecord]
    tool_servers: list[ToolServer]


@dataclass(frozen=True, slots=True)
class Timeline:
    conversation_id: str
    lines: list[str]  # `burstbot explain`'s
    failed: list[OutboxRow]
    changing: bool  # pending input, a timer, a lease or an unsent reply: the page refreshes


@dataclass(frozen=True, slots=True)
class Usage:
    since: float
    by: dict[str, list[UsageRow]]  # "day", "channel", "workspace", "model"
    total: UsageRow
    waits: list[float] = field(default_factory=list)  # seconds, one per answered burst


def tool_servers(
    configured: Sequence[str], hub: McpHub | None, actions: Iterable[ActionRecord]
) -> list[ToolServer]:
    """Each `[[tools.mcp]]` server: up or down in the process serving the page (from the
    database alone, `burstbot web`, only that it is configured), and its calls of the last day."""
    counts = tool_call_counts(actions)

    def calls(name: str) -> str:
        made, failed, unknown = counts.get(name, (0, 0, 0))
        return f"{made} call(s), {failed} failed, {unknown} may have run"

    def state(name: str) -> str:
        server = None if hub is None else hub.servers.get(name)
        if server is None:
            return "configured (its state is known to `burstbot run` only)"
        return "up" if server.up else "down: its tools are off"

    return [ToolServer(name, state(name), calls(name)) for name in configured]


async def overview(
    store: SqlStore[Any],
    now: float,
    this_owner: str | None,
    configured_tools: Sequence[str],
    hub: McpHub | None,
) -> Overview:
    active = await store.list_conversations(active_only=True, limit=1000)
    troubled: list[OutboxRow] = []
    for item in active:
        if item.outbox_failed or item.outbox_pending:
            for reply in await store.replies(item.state.conversation_id):
                if reply.state == "failed" or (reply.state == "pending" and reply.last_error):
                    troubled.append(reply)
    return Overview(
        processes=processes(await store.processes(now), active, now, this_owner),
        backlog=await store.backlog(),
        in_flight=active,
        recent=await store.list_conversations(active_only=False, limit=RECENT_CONVERSATIONS),
        troubled=troubled,
        installations=await store.installations(),
        tool_servers=tool_servers(configured_tools, hub, await store.actions_since(now - DAY)),
    )


async def timeline(store: SqlStore[Any], conversation_id: str, now: float) -> Timeline | None:
    lines = await explain_lines(store, conversation_id, now)
    if lines is None:
        return None
    replies = await store.replies(conversation_id)
    state = await store.conversation_state(conversation_id)
    assert state is not None  # explain found it
    unsent = any(r.state == "pending" for r in replies)
    changing = (
        state.version > state.answered_version
        or state.timer is not None
        or state.lease_owner is not None
        or unsent
    )
    failed = [r for r in replies if r.state == "failed"]
    return Timeline(conversation_id, lines, failed, changing)


async def usage(store: SqlStore[Any], prices: PriceTable, since: float) -> Usage:
    generations = await store.generations()
    by: dict[str, list[UsageRow]] = {}
    total = UsageRow("total")
    for grouping in ("day", "channel", "workspace", "model"):
        rows, total = summarize(generations, prices, grouping, since)
        by[grouping] = sorted(rows, key=lambda r: r.key) if grouping == "day" else rows
    return Usage(since, by, total, await store.felt_waits(since))


def wait_histogram(waits: Iterable[float]) -> list[tuple[str, float]]:
    """The felt waits counted into `WAIT_BUCKETS`' bars, labelled `<1 s`, `1-2 s`, …, `>60 s`."""
    labels = [f"<{WAIT_BUCKETS[0]:g} s"]
    labels += [f"{low:g}-{high:g} s" for low, high in pairwise(WAIT_BUCKETS)]
    labels.append(f">{WAIT_BUCKETS[-1]:g} s")
    counts = [0] * len(labels)
    for wait in waits:
        index = next((i for i, bound in enumerate(WAIT_BUCKETS) if wait < bound), len(WAIT_BUCKETS))
        counts[index] += 1
    return list(zip(labels, map(float, counts), strict=True))
