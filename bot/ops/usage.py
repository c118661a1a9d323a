"""What the model cost: tokens per model, user, channel, workspace or UTC day, from the stored
generations, priced; and how people rated the answers (👍/👎 votes, grouped the same way).

Every generation (answered, superseded, discarded, failed) is stored with its tokens, so the
report counts what was paid for, including the work thrown away (`wasted`, as the metric counts
it). Prices are USD per million tokens (the built-in table below, extended or replaced by
`[prices]`); a model id matches the longest entry it starts with, and a model that matches nothing
is shown without a cost rather than guessed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from bot.config import PriceConfig
from bot.core.actions import ActionRecord
from bot.core.events import ConversationKey
from bot.core.store import GenerationRecord
from bot.core.votes import VoteRecord
from bot.ops.inspection import render_table

Grouping = Literal["model", "user", "channel", "workspace", "day"]
GROUPINGS: tuple[Grouping, ...] = ("model", "user", "channel", "workspace", "day")
WASTED_OUTCOMES = frozenset({"superseded", "lease_lost", "discarded"})
MILLION = 1_000_000


def _price(input: float, output: float) -> PriceConfig:
    return PriceConfig(input=input, output=output)


DEFAULT_PRICES: dict[str, PriceConfig] = {
    "claude-opus-4-8": _price(5.0, 25.0),
    "claude-opus-4-5": _price(5.0, 25.0),
    "claude-sonnet-5-5": _price(3.0, 15.0),
    "claude-sonnet-5": _price(3.0, 15.0),
    "claude-sonnet-4-6": _price(3.0, 15.0),
    "claude-sonnet-4-5": _price(3.0, 15.0),
    "claude-haiku-4-5": _price(1.0, 5.0),
    "offline": _price(0.0, 0.0),
}


class PriceTable:
    def __init__(self, configured: Mapping[str, PriceConfig] | None = None) -> None:
        self.prices = {**DEFAULT_PRICES, **(configured or {})}

    def price_of(self, model: str) -> PriceConfig | None:
        matches = [name for name in self.prices if model == name or model.startswith(name + "-")]
        return self.prices[max(matches, key=len)] if matches else None

    def cost(
        self,
        model: str,
        input: int,
        output: int,
        cache_read: int,
        cache_write: int,
        web_searches: int = 0,
    ) -> float | None:
        """Estimated USD, or None for a model without a price."""
        price = self.price_of(model)
        if price is None:
            return None
        read = price.input / 10 if price.cache_read is None else price.cache_read
        write = price.input * 1.25 if price.cache_write is None else price.cache_write
        total = input * price.input + output * price.output
        searches = web_searches * price.web_search / 1000
        return (total + cache_read * read + cache_write * write) / MILLION + searches


@dataclass(slots=True)
class UsageRow:
    key: str
    generations: int = 0
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    wasted: int = 0
    searches: int = 0
    cost: float = 0.0
    unpriced: int = 0  # generations with tokens whose model has no price (not in `cost`)

    def add(self, record: GenerationRecord, prices: PriceTable) -> None:
        u = record.usage
        self.generations += 1
        self.input += u.input_tokens
        self.output += u.output_tokens
        self.cache_read += u.cache_read_tokens
        self.cache_write += u.cache_write_tokens
        self.searches += u.web_searches
        if record.outcome in WASTED_OUTCOMES:
            self.wasted += u.output_tokens
        tokens = (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens)
        searches = u.web_searches
        cost = prices.cost(record.model, *tokens, searches) if any(tokens) or searches else 0.0
        if cost is None:
            self.unpriced += 1
        else:
            self.cost += cost


def group_key(record: GenerationRecord, by: Grouping) -> str:
    if by == "model":
        return record.model or "(no model)"
    if by == "day":  # the UTC day the generation ended: daily budgets count UTC days too
        return datetime.fromtimestamp(record.ended_at, UTC).strftime("%Y-%m-%d")
    key = ConversationKey.parse(record.conversation_id)
    if by == "user":
        return f"{key.platform}:{record.user_id}" if record.user_id else "(unknown)"
    if by == "workspace":
        return f"{key.platform}/{key.workspace}"
    return f"{key.platform}/{key.workspace}/{key.channel}"


def summarize(
    records: Iterable[GenerationRecord], prices: PriceTable, by: Grouping, since: float = 0.0
) -> tuple[list[UsageRow], UsageRow]:
    """Rows (most expensive first) and the total, for generations that ended since `since`."""
    rows: dict[str, UsageRow] = {}
    total = UsageRow("total")
    for record in records:
        if record.ended_at < since:
            continue
        key = group_key(record, by)
        rows.setdefault(key, UsageRow(key)).add(record, prices)
        total.add(record, prices)
    ordered = sorted(rows.values(), key=lambda r: (-r.cost, -r.unpriced, r.key))
    return ordered, total


def parse_since(text: str, now: float | None = None) -> float:
    """`7d`, `24h`, `30m` ago, or a UTC date or time (`2026-11-01`, `2026-11-01T12:00`)."""
    now = time.time() if now is None else now
    relative = re.fullmatch(r"(\d+(?:\.\d+)?)([dhm])", text.strip())
    if relative:
        amount, unit = float(relative[1]), relative[2]
        return now - amount * {"d": 86_400, "h": 3_600, "m": 60}[unit]
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"--since {text!r}: use a duration (7d, 24h, 30m) or a UTC date (2026-11-01)"
        ) from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def usage_lines(
    rows: list[UsageRow], total: UsageRow, by: Grouping, since: float | None
) -> list[str]:
    """A plain text table; cost is an estimate from the price table ("?" when unpriced)."""
    when = "all time"
    if since:
        when = "since " + datetime.fromtimestamp(since, UTC).strftime("%Y-%m-%d %H:%M UTC")
    header = (by, "gens", "input", "output", "cache read", "cache write", "wasted", "searches",
              "cost (USD)")  # fmt: skip
    table = render_table(header, [*(_cells(row) for row in rows), _cells(total)], numbers=True)
    rule = "-" * len(table[0])
    lines = [f"model usage, {when}, by {by} (cost estimated from the price table)", ""]
    lines += [table[0], rule, *table[1:-1], rule, table[-1]]
    if total.unpriced:
        lines.append("+? = some tokens of a model without a price: add it under [prices]")
    return lines


def _cells(row: UsageRow) -> tuple[str, ...]:
    cost = f"{row.cost:.4f}" + ("+?" if row.unpriced else "")
    numbers = (row.generations, row.input, row.output, row.cache_read, row.cache_write, row.wasted,
               row.searches)  # fmt: skip
    return (row.key, *(f"{n:,}" for n in numbers), cost)


def vote_key(vote: VoteRecord, by: Grouping) -> str:
    """A vote's row: the model that wrote the answer, where it is, the day of the vote, or who
    voted."""
    if by == "model":
        return vote.model or "(no model)"
    if by == "day":
        return datetime.fromtimestamp(vote.voted_at, UTC).strftime("%Y-%m-%d")
    key = ConversationKey.parse(vote.conversation_id)
    if by == "user":
        return f"{key.platform}:{vote.voter_id}"
    if by == "workspace":
        return f"{key.platform}/{key.workspace}"
    return f"{key.platform}/{key.workspace}/{key.channel}"


def vote_lines(votes: Iterable[VoteRecord], by: Grouping) -> list[str]:
    """The 👍/👎 votes standing (one per person per answer: their newest press), grouped like
    the table above (by user: who voted)."""
    rows: dict[str, list[int]] = {}
    for vote in votes:
        counts = rows.setdefault(vote_key(vote, by), [0, 0])
        counts[0 if vote.value == "up" else 1] += 1
    if not rows:
        return []
    lines = [
        "",
        f"votes on answers (one per person per answer), by {'voter' if by == 'user' else by}:",
    ]
    for key, (up, down) in sorted(rows.items(), key=lambda item: (-sum(item[1]), item[0])):
        share = round(100 * up / (up + down))
        lines.append(f"  {key}: 👍 {up:,}  👎 {down:,}  ({share}% 👍)")
    return lines


def tool_call_counts(actions: Iterable[ActionRecord]) -> dict[str, tuple[int, int, int]]:
    """Per server: calls, failed ones, and ones whose outcome is unknown (may have run)."""
    counts: dict[str, list[int]] = {}
    for action in actions:
        row = counts.setdefault(action.server, [0, 0, 0])
        row[0] += 1
        row[1] += action.state == "failed"
        row[2] += action.state == "unknown"
    return {server: (calls, failed, unknown) for server, (calls, failed, unknown) in counts.items()}


def tool_call_lines(actions: Iterable[ActionRecord]) -> list[str]:
    """Tool calls per server (each made once per burst; given again to later generations at no
    cost), with the calls whose outcome is unknown."""
    counts = tool_call_counts(actions)
    if not counts:
        return []
    lines = ["", "tool calls (MCP), by server:"]
    for server, (calls, failed, unknown) in sorted(counts.items()):
        lines.append(f"  {server}: {calls:,} call(s), {failed:,} failed, {unknown:,} may have run")
    return lines
