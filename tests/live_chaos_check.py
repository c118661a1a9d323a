"""The live chaos checker: what people see on the fake platforms, message by message.

It reads every message the fake Slack and Discord show now, per conversation, in the platform's
order (Slack `ts`, Discord snowflake), and groups the bot's: a message that quotes markers
(`g<n> saw: …`) starts an answer, the messages after it carrying only its tag are its follow-up
parts, an apology stands alone, anything else ("…", a tag without a head) is a group of its own.
The store is asked one thing only: which outbox row each group claims to be, and which messages
that row covers; everything else is read off the screen.

- duplicates: user messages (markers) quoted or covered by two visible groups, whatever they are.
- missing: messages the people sent that no valid reply covers.
- out_of_order: valid replies shown in an order that does not follow the messages they cover.
- stray_drafts: visible bot messages that are not part of the conversation's reply: a draft
  showing "…" or half an answer beside (or instead of) the reply, a reply whose text is not
  whole, or a message no sent outbox row names with these exact texts (stale text).
- shown_twice: bursts (outbox rows) that more than one visible group speaks for.
- wrong_channel: messages a sent outbox row names (its parts) that landed in another channel than
  its conversation's, deleted since or not.

Raw platform counts (every landed post, draft and edit, deleted ones included) and the faults
that fired come alongside, for the summary line.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bot.core.store import OutboxRow
from tests.live_chaos_platforms import MARKER, TAG

if TYPE_CHECKING:
    from tests.live_chaos_run import Conversation, Run

SUMMARY = ("posts", "drafts", "edits", "deletes", "duplicates", "missing", "out_of_order",
           "stray_drafts", "shown_twice", "wrong_channel", "kills", "sigterms")  # fmt: skip
VIOLATIONS = ("duplicates", "missing", "out_of_order", "stray_drafts", "shown_twice",
              "wrong_channel")  # fmt: skip


@dataclass
class Shown:
    """One visible message."""

    message_id: str
    text: str
    by_bot: bool


@dataclass
class Group:
    """One visible answer (its parts), apology, or something else the bot left."""

    kind: str  # "answer", "apology" or "other"
    tag: str | None
    parts: list[Shown] = field(default_factory=list)
    markers: list[str] = field(default_factory=list)
    valid: bool = False
    why: str = ""

    @property
    def whole(self) -> bool:
        return self.tag is not None and f"{self.tag}end" in self.parts[-1].text


def visible(run: Run, conversation: Conversation) -> list[Shown]:
    if conversation.platform == "slack":
        messages = [m for m in run.slack.messages if m.channel == conversation.channel]
        messages.sort(key=lambda m: float(m.ts))
        return [Shown(f"{m.channel}:{m.ts}", m.text, m.bot_id is not None) for m in messages]
    history = sorted(run.discord.history.get(int(conversation.channel), []),
                     key=lambda m: int(m["id"]))  # fmt: skip
    bot = run.discord.bot_user["id"]
    return [Shown(m["id"], m["content"], m["author"]["id"] == bot) for m in history]


def group(shown: list[Shown], failure_message: str) -> list[Group]:
    groups: list[Group] = []
    for message in (m for m in shown if m.by_bot):
        found = TAG.search(message.text)
        tag = f"g{found.group(1)}" if found else None
        last = groups[-1] if groups else None
        if message.text.strip() == failure_message:
            groups.append(Group("apology", None, [message]))
        elif "saw:" in message.text:
            groups.append(Group("answer", tag, [message], MARKER.findall(message.text)))
        elif last is not None and last.kind == "answer" and tag == last.tag and not last.whole:
            last.parts.append(message)
        else:
            groups.append(Group("other", tag, [message], MARKER.findall(message.text)))
    return groups


def covered_markers(row: OutboxRow, texts: dict[int, str]) -> list[str]:
    return [texts[s] for s in range(row.covers_from_version + 1, row.covers_to_version + 1)
            if s in texts]  # fmt: skip


def number(marker: str) -> int:
    return int(marker.rsplit("m", 1)[1])


async def check(run: Run) -> dict[str, Any]:
    """Every count the module docstring names, plus `examples`: what a person saw where the
    checks failed (a few conversations, each visible bot message with its verdict)."""
    from tests.live_chaos_run import FAILURE_MESSAGE

    counts: Counter[str] = Counter()
    examples: list[str] = []
    channel_of = landed_channels(run)
    for conversation in run.conversations:
        cid = conversation.key.id
        state = await run.store.conversation_state(cid)
        texts = {}
        if state is not None:
            texts = {m.seq: m.text for m in await run.store.pending_messages(cid, 0, state.version)
                     if not m.deleted}  # fmt: skip
        rows = [r for r in await run.store.replies(cid) if r.conversation_id == cid]
        counts["replies"] += len(rows)
        counts["failed_replies"] += sum(1 for r in rows if r.state == "failed")
        counts["apologies"] += sum(1 for r in rows if r.kind == "apology")
        groups = group(visible(run, conversation), FAILURE_MESSAGE)
        by_ids = {tuple(r.platform_message_ids): r for r in rows if r.state == "sent"}
        speaking_for: Counter[int] = Counter()
        for g in groups:
            row = by_ids.get(tuple(p.message_id for p in g.parts))
            if row is not None and g.kind == "apology":
                g.markers = covered_markers(row, texts)
            judge(g, row, texts)
            for r in rows:
                if set(covered_markers(r, texts)) & set(g.markers):
                    speaking_for[r.id] += 1
        coverage: Counter[str] = Counter(m for g in groups for m in set(g.markers))
        valid = [g for g in groups if g.valid]
        sent = run.sent.get(conversation, [])
        before = sum(counts[name] for name in VIOLATIONS)
        counts["wrong_channel"] += sum(
            1 for r in rows if r.state == "sent" for m in r.platform_message_ids
            if channel_of.get((conversation.platform, m)) != conversation.channel
        )  # fmt: skip
        counts["duplicates"] += sum(1 for n in coverage.values() if n > 1)
        counts["missing"] += len(set(sent) - {m for g in valid for m in g.markers})
        counts["out_of_order"] += sum(
            1 for a, b in itertools.pairwise(valid)
            if a.markers and b.markers and min(map(number, b.markers)) < max(map(number, a.markers))
        )  # fmt: skip
        counts["stray_drafts"] += sum(len(g.parts) for g in groups if not g.valid)
        counts["shown_twice"] += sum(1 for n in speaking_for.values() if n > 1)
        counts["multi_part"] += sum(1 for g in valid if len(g.parts) > 1)
        counts["streamed_replies"] += sum(1 for r in rows if r.draft_key is not None)
        if sum(counts[n] for n in VIOLATIONS) > before and len(examples) < 4:
            shown = {m for g in valid for m in g.markers}
            unshown = [r for r in rows if not set(covered_markers(r, texts)) <= shown]
            examples.append(describe(conversation, groups, sent, unshown, texts))
    return {**raw_counts(run), **{name: counts[name] for name in sorted(counts)},
            "examples": examples}  # fmt: skip


def landed_channels(run: Run) -> dict[tuple[str, str], str]:
    """The channel every bot message that landed (deleted since or not) was posted in."""
    slack = {("slack", f"{m.channel}:{m.ts}"): m.channel for m in run.slack.landed_posts}
    discord = {("discord", str(m["id"])): str(m["channel_id"]) for m in run.discord.landed_posts}
    return slack | discord


def judge(g: Group, row: OutboxRow | None, texts: dict[int, str]) -> None:
    """Whether a visible group is the conversation's reply: a sent row names exactly its
    messages, and it shows that row's whole answer."""
    if row is None:
        g.why = "no sent reply is this message" if g.kind != "answer" else "not a sent reply"
    elif g.kind == "apology":
        g.valid = row.kind == "apology"
        g.why = "" if g.valid else "apology text on an answer"
    elif g.kind != "answer":
        g.why = "not an answer"
    elif not g.whole:
        g.why = "answer cut short (stale text)"
    elif sorted(g.markers, key=number) != sorted(covered_markers(row, texts), key=number):
        g.why = "quotes other messages than its reply covers (stale text)"
    else:
        g.valid = True


def describe(
    conversation: Conversation,
    groups: list[Group],
    sent: list[str],
    unshown: list[OutboxRow],
    texts: dict[int, str],
) -> str:
    """What the conversation shows, and the store's replies whose messages it does not show."""
    lines = [f"{conversation.platform} {conversation.channel} (sent {' '.join(sent)}):"]
    for row in unshown:
        lines.append(
            f"  store r{row.id} {row.kind} {row.state}"
            f" covers {' '.join(covered_markers(row, texts))}"
            f" ids={list(row.platform_message_ids)} draft={row.draft_key}/{row.draft_message_id}"
            f" attempts={row.attempts} error={row.last_error!r}"
        )
    for g in groups:
        for index, part in enumerate(g.parts):
            text = re.sub(r"(\bg\d+\b )(?:\1)+", r"\1… ", part.text)  # long filler, shortened
            verdict = "ok" if g.valid else g.why
            lines.append(f"  {part.message_id} part {index}: {text[:160]!r} [{verdict}]")
    return "\n".join(lines)


def raw_counts(run: Run) -> dict[str, Any]:
    """Every post that landed (deleted ones included), every draft among them, every edit and
    delete that took effect, and the faults that fired."""
    slack_drafts = sum(1 for m in run.slack.landed_posts if draft_key_of(m.metadata))
    discord_drafts = sum(1 for m in run.discord.landed_posts if str(m.get("nonce")).startswith("d"))
    ledger = run.ledger.counts
    faults = ("fail_before", "rate_limited", "lost_answer", "slow", "people_deleted",
              "model_overloaded", "model_error_mid_stream", "model_hang", "long_answers",
              "events_to_two_workers", "event_retries", "discord_replays", "typed_past_deadline",
              "stopped_while_generating", "sigterm_too_slow", "not_settled")  # fmt: skip
    return {
        "posts": len(run.slack.landed_posts) + len(run.discord.landed_posts),
        "drafts": slack_drafts + discord_drafts,
        "edits": len(run.slack.updates) + len(run.discord.edits),
        "deletes": len(run.slack.deleted) + len(run.discord.deleted),
        "kills": ledger["kills"],
        "sigterms": ledger["sigterms"],
        "deduped_by_nonce": run.discord.deduped,
        "model_requests": len(run.model.server.requests),
        **{name: ledger[name] for name in faults},
        "messages_sent": sum(len(markers) for markers in run.sent.values()),
    }


def draft_key_of(metadata: dict[str, Any] | None) -> str | None:
    payload = (metadata or {}).get("event_payload") or {}
    reply_id = str(payload.get("reply_id", ""))
    return reply_id if reply_id.startswith("d") else None


def summary_line(db: str, size: str, counts: dict[str, Any]) -> str:
    first = " ".join(f"{name}={counts[name]}" for name in SUMMARY)
    rest = " ".join(f"{k}={v}" for k, v in counts.items() if k not in SUMMARY and k != "examples")
    return f"live chaos db={db} size={size} {first} | {rest}"


def violations(counts: dict[str, Any]) -> list[str]:
    return [f"{name}={counts[name]}" for name in VIOLATIONS if counts[name]]
