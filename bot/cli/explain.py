"""`burstbot explain CONVERSATION`: one conversation's story, rebuilt from stored data.

Every line comes from a row (messages, generations with their searches, tool actions, clicks and
votes, the outbox), in time order. Stored text is shown through `printable` (no terminal escapes
from chat users); with `redact`, message and reply text is replaced by its length.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bot.core.actions import ActionRecord
from bot.core.clicks import ClickRecord
from bot.core.cpu_budget import WAITING_FOR as CPU_WAITING_FOR
from bot.core.events import ConversationKey
from bot.core.store import (
    UNFINISHED,
    GenerationRecord,
    OutboxRow,
    StoredMessage,
    WebSearch,
)
from bot.core.votes import THUMBS, VOTE_VALUES, VoteRecord, tally
from bot.ops.inspection import printable

if TYPE_CHECKING:
    from storage.sql_store import SqlStore

PREVIEW = 60
Event = tuple[float, int, str]  # when, order among events at the same time, the line
VIA = {"catch-up": " (via catch-up)", "held": " (held until its thread was looked up)"}


def normalize_conversation_id(text: str) -> str:
    """Accept `platform/workspace/channel/thread`, or without the trailing `/` for no thread."""
    parts = text.split("/")
    if len(parts) == 3:
        parts.append("")
    return ConversationKey.parse("/".join(parts)).id


def _clock(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S.%f")[:-3]


def _preview(text: str, redact: bool) -> str:
    if redact:
        return f"[{len(text)} chars]"
    flat = " ".join(text.split())
    return printable(flat if len(flat) <= PREVIEW else flat[: PREVIEW - 1] + "…")


def _versions(low_exclusive: int, high: int) -> str:
    return f"v{high}" if high == low_exclusive + 1 else f"v{low_exclusive + 1}-v{high}"


def _message_events(m: StoredMessage, redact: bool) -> list[Event]:
    text = _preview(m.text, redact)
    if m.attachments:  # file names are content too: redacted, only their count shows
        names = [f"{len(m.attachments)} file(s)"] if redact else [a.name for a in m.attachments]
        text = f"{text} [+ {printable(', '.join(names))}]"
    via = VIA.get(m.via, f" ({printable(m.via)})" if m.via else "")
    events = [(m.created_at, 0, f"received  #{m.seq} {printable(m.author_name)}{via}: {text}")]
    if m.edited_at is not None:
        what = f"deleted   #{m.seq}" if m.deleted else f"edited    #{m.seq} → {text}"
        events.append((m.edited_at, 0, what))
    return events


def _search_line(search: WebSearch, redact: bool) -> str:
    query = f"[{len(search.query)} chars]" if redact else printable(repr(search.query))
    if search.error == UNFINISHED:
        return f"searched  {query}: no result (the generation ended first)"
    if search.error:
        return f"searched  {query}: error {printable(search.error)}"
    return f"searched  {query}: {search.results} result(s)"


def _generation_events(
    g: GenerationRecord, committed_at: float | None, redact: bool
) -> list[Event]:
    """`committed_at`: when the reply of a posted generation entered the outbox (the generation
    is recorded just after its commit; the timeline shows it ending there)."""
    burst = _versions(g.from_version, g.to_version)
    usage = g.usage
    tokens = f"{usage.input_tokens} in / {usage.output_tokens} out tokens"
    if usage.web_searches:
        tokens += f", {usage.web_searches} web search(es)"
    outcome = g.outcome
    detail = {
        "posted": f"answered ({tokens})",
        "superseded": f"superseded by newer input, stream cancelled ({tokens}; output wasted)",
        "discarded": f"discarded at the final check ({tokens})",
        "failed": f"model failed: {printable(g.error or '')} ({tokens})",
        "lease_lost": f"lease lost; reply dropped ({tokens})",
        "skipped": f"no model call: {printable(g.error or '')}",
        "stopped": f"{printable(g.error or 'stopped')}, stream cancelled ({tokens})",
    }.get(outcome, outcome)
    seconds = g.ended_at - g.started_at
    searches = [(g.started_at, 1, _search_line(search, redact)) for search in g.searches]
    waited = []
    if g.waited > 0:
        why = printable(g.waited_for or "its capacity")
        what = why if g.waited_for == CPU_WAITING_FOR else f"the API's capacity: {why}"
        waited = [(g.started_at, 0, f"waited    {g.waited:.1f}s for {what}")]
    return [
        *waited,
        (g.started_at, 1, f"burst     {burst} → lease #{g.lease_token}, generation started"),
        *searches,
        (
            min(g.ended_at, committed_at or g.ended_at),
            2,
            f"generated {burst}: {detail} in {seconds:.2f}s",
        ),
    ]


def _action_line(a: ActionRecord, redact: bool) -> str:
    arguments = f"[{len(a.arguments)} chars]" if redact else _preview(a.arguments, False)
    outcome = {
        "done": f"done in {a.duration or 0.0:.2f}s",
        "failed": f"failed in {a.duration or 0.0:.2f}s",
        "unknown": "outcome unknown: may have run (never repeated)",
    }[a.state]
    if a.approval is not None and a.approval != "running":  # asked, and never claimed to run
        decided = f" by {printable(a.decided_by)}" if a.decided_by else ""
        outcome = f"{a.approval}{decided}: not run (card r{a.card_reply_id})"
    elif a.approval == "running" and a.state != "unknown":
        # the record starts when the model asked, so its time includes the wait for the click
        ended = f"{a.state} {a.duration or 0.0:.2f}s after it asked"
        outcome = f"approved by {printable(a.decided_by or '')}, {ended}"
    elif a.approval == "running":
        outcome = f"approved by {printable(a.decided_by or '')}, {outcome}"
    kind = "read-only" if a.read_only else "with effect"
    where = f"{printable(a.server)}.{printable(a.tool)}"
    return f"tool      {where} {arguments} ({kind}) → {outcome}; lease #{a.lease_token}"


def _window_event(g: GenerationRecord, messages: list[StoredMessage]) -> list[Event]:
    """Why the burst's window closed when it did: the reason its last message armed it with (an
    adaptive window), or that the deadline or a typing notice kept it open past that."""
    burst = [m for m in messages if g.from_version < m.seq <= g.to_version]
    last = max(burst, key=lambda m: m.seq, default=None)
    if last is None or last.quiet_reason is None:
        return []
    waited = g.started_at - last.created_at
    reason = printable(last.quiet_reason)
    return [(g.started_at, 1, f"window    {reason} (closed {waited:.1f} s after the burst's end)")]


def _click_line(c: ClickRecord) -> str:
    """A click and its decision: `stopped by NAME at …` when it stopped the burst."""
    who = printable(c.clicker_name)
    if c.outcome == "stopped":
        return f"clicked   {c.kind}: stopped by {who} at {_clock(c.clicked_at)} (v{c.version})"
    if c.outcome in ("approved", "denied"):
        return f"clicked   {c.kind} on card r{printable(c.target)}: {c.outcome} by {who}"
    why = {
        "refused": "not one of the people it answers"
        if c.kind == "stop"
        else "not one of the people who may decide",
        "already_stopped": "already stopped",
        "already_decided": "already decided",
        "ended": "the answer had already ended" if c.kind == "stop" else "no longer waiting",
        "duplicate": "a repeat delivery, counted once",
    }.get(c.outcome or "", printable(c.outcome or "undecided"))
    return f"clicked   {c.kind} by {who}: {why}, nothing changed"


def _vote_line(c: ClickRecord) -> str:
    """A 👍/👎 press and its decision."""
    reply_id, _, value = c.target.partition(":")
    thumb = THUMBS.get(value, "?") if value in VOTE_VALUES else printable(value)
    outcome = {
        "voted": "counted",
        "duplicate": "a repeat delivery, counted once",
        "outdated": "older than the vote standing, nothing changed",
        "not_votable": "that answer takes no votes, nothing changed",
    }.get(c.outcome or "", printable(c.outcome or "undecided"))
    return (
        f"clicked   vote {thumb} on {printable(reply_id)} by {printable(c.clicker_name)}: {outcome}"
    )


def _votes_line(votes: list[VoteRecord]) -> list[str]:
    """The votes standing, per answer (one per person: their newest press)."""
    by_reply: dict[int, list[VoteRecord]] = {}
    for vote in votes:
        by_reply.setdefault(vote.reply_id, []).append(vote)
    if not by_reply:
        return []
    counts = []
    for reply, standing in sorted(by_reply.items()):
        up, down = tally(standing)
        counts.append(f"r{reply} 👍 {up} 👎 {down}")
    return ["votes: " + ", ".join(counts)]


def _reply_events(r: OutboxRow, redact: bool) -> list[Event]:
    covers = _versions(r.covers_from_version, r.covers_to_version)
    if r.kind == "notice":  # a refused message's: it covers none
        covers = f"nothing (answers {printable(r.reply_to_message_id or '-')})"
    kind = "" if r.kind == "answer" else f" [{r.kind}]"
    kind += " [👍/👎]" if r.feedback else ""
    seen = "" if r.seen_version == r.covers_to_version else f" (deadline: v{r.seen_version} seen)"
    text = f"reply r{r.id}{kind} committed, covers {covers}{seen}: {_preview(r.text, redact)}"
    committed = (r.created_at, 3, text)
    if r.state == "sent" and r.sent_at is not None:
        parts = printable(", ".join(r.platform_message_ids)) or "-"
        failures = f" after {r.attempts} failed attempt(s)" if r.attempts else ""
        return [committed, (r.sent_at, 4, f"posted    r{r.id} as {parts}{failures}")]
    if r.state == "failed":
        error = printable(r.last_error or "")
        outcome = (
            f"FAILED    r{r.id} after {r.attempts} attempt(s): {error} "
            f"(`burstbot retry r{r.id}` posts it again)"
        )
    else:
        since = f", failing since {_clock(r.failing_since)}" if r.failing_since else ""
        note = f"; last error: {printable(r.last_error)}" if r.last_error else ""
        outcome = f"pending   r{r.id}, {r.attempts} failed attempt(s) so far{since}{note}"
    return [committed, (r.next_attempt_at, 4, outcome)]


async def explain_lines(
    inspector: SqlStore[Any], conversation_id: str, now: float, redact: bool = False
) -> list[str] | None:
    state = await inspector.conversation_state(conversation_id)
    if state is None:
        return None
    events: list[Event] = []
    messages = await inspector.messages(conversation_id)
    for message in messages:
        events += _message_events(message, redact)
    replies = await inspector.replies(conversation_id)
    committed = {r.covers_to_version: r.created_at for r in replies}
    for generation in await inspector.generations(conversation_id):
        at = committed.get(generation.to_version) if generation.outcome == "posted" else None
        events += _generation_events(generation, at, redact)
        events += _window_event(generation, messages)
    for action in await inspector.actions(conversation_id):
        events.append((action.started_at, 1, _action_line(action, redact)))
    for click in await inspector.clicks(conversation_id):
        line = _vote_line(click) if click.kind == "vote" else _click_line(click)
        events.append((click.clicked_at, 1, line))
    for reply in replies:
        events += _reply_events(reply, redact)
    events.sort(key=lambda e: (e[0], e[1]))
    start = events[0][0] if events else now
    lines = [f"conversation {printable(conversation_id)}"]
    lines += [f"  {_clock(at)} +{at - start:7.3f}s  {text}" for at, _, text in events]
    summary = f"now: version {state.version}, answered {state.answered_version}"
    if state.timer is not None:
        summary += (
            f"; timer due {_clock(state.timer.due_at)} (deadline {_clock(state.timer.deadline_at)})"
        )
    if state.lease_owner is not None and state.lease_expires_at is not None:
        owner = printable(state.lease_owner)
        summary += f"; leased by {owner} until {_clock(state.lease_expires_at)}"
    if state.failed_attempts:
        summary += f"; {state.failed_attempts} failed model attempt(s)"
    lines.append(summary)
    lines += _votes_line(await inspector.votes(conversation_id))
    return lines
