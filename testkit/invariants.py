"""The invariant checker every multi-step test ends with.

`check_invariants`: G1, G2, G3 and G9 over a store's outbox and state, and (given a
`RecordingFrontend`) over the raw posts: each part once, in order, and G10 over what is visible.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from bot.core.store import OutboxRow
from testkit.frontend import RecordingFrontend, split_evenly

if TYPE_CHECKING:
    from storage.sql_store import SqlStore

EPSILON = 1e-6  # fake clocks land exactly on deadlines


class InvariantViolation(AssertionError):
    pass


async def check_invariants(
    store: SqlStore[Any],
    conversation_ids: Sequence[str],
    *,
    quiescent: bool = True,
    max_wait_seconds: float | None = None,
    frontend: RecordingFrontend | None = None,
) -> dict[str, int]:
    """Check G1, G2, G3 and G9 from the store's outbox and state, and what `frontend` received.

    G1: the replies of a conversation cover disjoint version ranges, none past `answered_version`.
    G2 (when `quiescent`): every version is answered and every reply is sent (or failed, logged).
    G3 (given `max_wait_seconds`): an answer committed past newer input (`seen_version >
    covers_to_version`) was committed at or after its burst's deadline, `max_wait_seconds` after
    the burst began: its first message, or the previous reply's commit if later (a commit
    restarts the cap). A burst whose first version is no visible message (deleted, or an edit)
    is not judged: its first arrival is unknown.
    G9: a reply is sent only once every earlier reply of its conversation is settled (sent or
    failed), and the sent ones were sent in commit order.
    Raw posts (given `frontend`): each part of a reply posted at most once and in order (again
    only after a person deleted it: a draft deleted mid-stream is replaced), a conversation's
    replies posted one after another in commit order, and (when `quiescent`) every sent reply
    showing all its parts, and G10: every message still visible is a part of a sent reply showing
    that part's text (no stray draft, no draft left with a partial text), and no part visible twice.

    Raises `InvariantViolation` naming each breach; returns counts for a summary line.
    """
    counts = dict.fromkeys(
        ("conversations", "replies", "duplicates", "unanswered", "failed", "stale"), 0
    ) | dict.fromkeys(("out_of_order", "duplicate_posts", "missing_parts", "stray_drafts"), 0)
    problems: list[str] = []

    def breach(name: str, what: str) -> None:
        counts[name] += 1
        problems.append(what)

    rows_by_reply_id: dict[str, OutboxRow] = {}
    for cid in conversation_ids:
        state = await store.conversation_state(cid)
        if state is None:
            continue
        counts["conversations"] += 1
        replies = sorted(await store.replies(cid), key=lambda r: r.id)
        messages = {m.seq: m for m in await store.pending_messages(cid, 0, state.version)}
        covered_to, previous_commit, previous_sent_at = 0, None, None
        settled_so_far = True
        for reply in replies:
            rows_by_reply_id[f"r{reply.id}"] = reply
            counts["replies"] += 1
            # an arrival refusal's notice, an approval card and its ending cover no message
            covers = reply.kind not in ("notice", "card", "card_outcome")
            if covers and reply.covers_from_version < covered_to:
                breach("duplicates", f"G1: r{reply.id} covers versions covered before ({cid})")
            if covers and reply.covers_to_version > state.answered_version:
                breach("duplicates", f"G1: r{reply.id} covers past answered_version ({cid})")
            covered_to = max(covered_to, reply.covers_to_version)
            if reply.state == "failed":
                counts["failed"] += 1
            elif quiescent and reply.state != "sent":
                breach("unanswered", f"G2: r{reply.id} is still {reply.state} ({cid})")
            if reply.state == "sent":
                if not settled_so_far:
                    breach("out_of_order", f"G9: r{reply.id} sent before an earlier reply ({cid})")
                sent_at = reply.sent_at or 0.0
                if previous_sent_at is not None and sent_at < previous_sent_at:
                    breach("out_of_order", f"G9: r{reply.id} sent before its predecessor ({cid})")
                previous_sent_at = sent_at
            settled_so_far = settled_so_far and reply.state in ("sent", "failed")
            first = messages.get(reply.covers_from_version + 1)
            if (
                max_wait_seconds is not None
                and reply.kind == "answer"
                and reply.seen_version > reply.covers_to_version
                and first is not None
            ):
                began = max(first.created_at, previous_commit or first.created_at)
                early = began + max_wait_seconds - reply.created_at
                if early > EPSILON:
                    breach(
                        "stale",
                        f"G3: r{reply.id} committed past newer input (v{reply.seen_version} > "
                        f"v{reply.covers_to_version}) {early:.3f}s before its deadline ({cid})",
                    )
            previous_commit = reply.created_at
        if quiescent and state.answered_version < state.version:
            breach(
                "unanswered", f"G2: {cid} answered to v{state.answered_version} of v{state.version}"
            )
    if frontend is not None:
        check_posts(frontend, rows_by_reply_id, set(conversation_ids), quiescent, breach)
    if problems:
        raise InvariantViolation("invariants violated: " + "; ".join(problems))
    return counts


def check_posts(
    frontend: RecordingFrontend,
    rows: Mapping[str, OutboxRow],
    conversation_ids: set[str],
    quiescent: bool,
    breach: Callable[[str, str], None],
) -> None:
    """The raw posts against the outbox rows: once per part, parts in order, replies in order;
    when quiescent, what is still visible (`check_visible`)."""
    parts: dict[str, list[int]] = {}
    last_reply: dict[str, str] = {}  # conversation -> reply whose parts were posted last
    done: set[str] = set()  # replies a later reply of their conversation was posted after
    finished = {row.draft_key: reply_id for reply_id, row in rows.items() if row.draft_key}
    messages: dict[tuple[str, int], list[str]] = {}  # (reply, part) -> its messages, in order
    for raw in frontend.posts:
        cid = raw.key.id
        if cid not in conversation_ids:
            continue
        post = replace(raw, reply_id=finished.get(raw.reply_id, raw.reply_id))  # a draft: part 0
        if post.reply_id not in rows and raw.message_id in frontend.deleted:
            continue  # a draft no reply finished, gone (no reply, or a person deleted it)
        seen = parts.setdefault(post.reply_id, [])
        earlier = messages.setdefault((post.reply_id, post.part), [])
        earlier.append(raw.message_id)
        replaced = any(m in frontend.deleted_by_people for m in earlier[:-1])
        if post.part in seen and replaced:
            continue  # a replacement for a message a person deleted: not a second copy
        if post.part in seen:
            breach("duplicate_posts", f"part {post.part} of {post.reply_id} posted again ({cid})")
        elif post.part != max(seen, default=-1) + 1:
            breach("out_of_order", f"part {post.part} of {post.reply_id} posted after {seen}")
        seen.append(post.part)
        previous = last_reply.get(cid)
        if previous is not None and previous != post.reply_id:
            if post.reply_id in done or reply_number(post.reply_id) < reply_number(previous):
                breach("out_of_order", f"G9: {post.reply_id} posted after {previous} ({cid})")
            done.add(previous)
        last_reply[cid] = post.reply_id
    for reply_id, row in rows.items():
        if (
            quiescent
            and row.state == "sent"
            and sorted(set(parts.get(reply_id, []))) != list(range(frontend.parts))
        ):
            breach("missing_parts", f"{reply_id} is sent but shows parts {parts.get(reply_id)}")
    if quiescent:
        check_visible(frontend, rows, finished, conversation_ids, messages, breach)


def check_visible(
    frontend: RecordingFrontend,
    rows: Mapping[str, OutboxRow],
    finished: Mapping[str, str],
    conversation_ids: set[str],
    messages: Mapping[tuple[str, int], list[str]],
    breach: Callable[[str, str], None],
) -> None:
    """G10 once all is settled: each message the conversation still shows is one part of a sent
    reply, with that part's text; each part shows once (none, if a person deleted it)."""
    showing: dict[tuple[str, int], int] = {}
    for raw in frontend.posts:
        if raw.key.id not in conversation_ids or raw.message_id in frontend.deleted:
            continue
        reply_id = finished.get(raw.reply_id, raw.reply_id)
        row = rows.get(reply_id)
        text = frontend.shown.get(raw.message_id, raw.text)
        if row is None or row.state != "sent":
            state = "no reply" if row is None else row.state
            breach("stray_drafts", f"{raw.message_id} shows {text!r} ({state}, {raw.key.id})")
            continue
        expected = split_evenly(row.text, frontend.parts)[raw.part]
        if text != expected:
            breach("stray_drafts", f"{raw.message_id} shows {text!r}, not {reply_id}'s text")
        showing[(reply_id, raw.part)] = showing.get((reply_id, raw.part), 0) + 1
    for (reply_id, part), count in showing.items():
        if count > 1:
            breach("duplicate_posts", f"part {part} of {reply_id} is visible {count} times")
    for reply_id, row in rows.items():
        for part in range(frontend.parts) if row.state == "sent" else ():
            deleted = any(
                m in frontend.deleted_by_people for m in messages.get((reply_id, part), [])
            )
            if not showing.get((reply_id, part)) and not deleted:
                breach("missing_parts", f"part {part} of sent {reply_id} is not visible")


def reply_number(reply_id: str) -> int:
    """The outbox row of a reply id; a draft no reply finished yet is the newest message."""
    number = reply_id.removeprefix("r")
    return int(number) if number.isdigit() else sys.maxsize
