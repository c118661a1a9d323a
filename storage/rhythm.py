"""The adaptive quiet window's storage side: learn the author's rhythm, choose the burst's window.

Runs inside the arrival's transaction, after the message is stored (so the burst's authors include
it), through whatever runs one named statement there (the SQL store's `_rows` on its transaction).
The choice itself is the core's pure `burst_window`; times here are differences on the database's
clock (G12), and the due time is armed from the window by the same statement as always
(`arm_timer`).

Two arrivals of one person in two conversations at the same moment may each read the row before
the other writes it: the later write wins and one gap is not learned, which the rhythm survives
(it is an estimate, not a protocol state).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict

from bot.core.events import ConversationKey
from bot.core.quiet_window import AdaptiveWindow, AuthorLast, Rhythm, Window, burst_window
from storage.rows import Params, Row, from_row

RunStatement = Callable[[str, Params], Awaitable[Sequence[Row]]]


def author_prefix(key: ConversationKey) -> str:
    """Authors are people per platform and workspace (the same ids as messages' dedupe key)."""
    return f"{key.platform}/{key.workspace}/"


def _rhythm(row: Row) -> Rhythm | None:
    return None if row["messages"] is None else from_row(Rhythm, row)


async def learn(
    run: RunStatement, key: ConversationKey, author_id: str, seq: int, now: float
) -> None:
    """One more message of `author_id`, stored as `seq`: update their rhythm."""
    uid = author_prefix(key) + author_id
    params = {"cid": key.id, "seq": seq, "author_id": author_id, "author_uid": uid, "now": now}
    found = await run("author_rhythm", params)
    before = Rhythm() if not found else _rhythm(found[0]) or Rhythm()
    gap = float(found[0]["since_last"]) if found and found[0]["consecutive"] else None
    after = before.learn(gap)
    await run("save_author_rhythm", {**params, **asdict(after)})


async def choose_window(
    run: RunStatement,
    key: ConversationKey,
    seq: int,
    now: float,
    adaptive: AdaptiveWindow,
    changed: bool,
) -> Window:
    """The window of the conversation's pending burst as of `seq`, noted on message `seq` for
    `explain`. `changed`: an edit or delete re-arms, and every author's window counts from now."""
    params = {"cid": key.id, "seq": seq, "author_prefix": author_prefix(key), "now": now}
    authors = [
        AuthorLast(
            str(r["author_name"] or r["author_id"]),
            str(r["text"]),
            0.0 if changed else max(float(r["age"]), 0.0),
            _rhythm(r),
        )
        for r in await run("burst_authors", params)
    ]
    low, high = adaptive.min_quiet_seconds, adaptive.max_quiet_seconds
    window = burst_window(authors, low, high, adaptive.model)
    if not changed:
        await run("note_quiet_window", {"cid": key.id, "seq": seq, "reason": window.reason})
    return window
