"""The usage page's feedback panel: the 👍/👎 votes standing on answers (one per person per answer,
bot/core/votes.py), per channel and per model, as split bars drawn on the server.

It is a `Panel` (bot/web/server.py): `burstbot run` and `burstbot web` both add it. Votes are
grouped as `burstbot usage` groups them (`vote_key`), and counted from the page's `since` on the
time of each vote.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

from bot.core.secrets import redact
from bot.ops.inspection import printable
from bot.ops.usage import Grouping, vote_key
from bot.web.charts import split_bar_chart

if TYPE_CHECKING:
    from storage.sql_store import SqlStore

GROUPINGS: tuple[Grouping, ...] = ("channel", "model")


async def feedback_panel(store: SqlStore[Any], since: float) -> str:
    votes = await store.votes(since=since)
    up = sum(vote.value == "up" for vote in votes)
    down = len(votes) - up
    summary = "no votes yet" if not votes else f"{up:,} up (👍), {down:,} down (👎) on answers"
    charts = []
    for grouping in GROUPINGS:
        counts: dict[str, list[int]] = {}
        for vote in votes:
            label = redact(printable(vote_key(vote, grouping)))  # the chart escapes it
            counts.setdefault(label, [0, 0])[0 if vote.value == "up" else 1] += 1
        rows = sorted(counts.items(), key=lambda item: (-sum(item[1]), item[0]))
        charts.append(split_bar_chart(f"votes per {grouping}: up (green), down (red)",
                                      [(label, u, d) for label, (u, d) in rows]))  # fmt: skip
    return (
        f'<section id="feedback"><h2>Feedback</h2><p id="feedback-summary">{escape(summary)} '
        "(one per person per answer: their newest press)</p>" + "".join(charts) + "</section>"
    )
