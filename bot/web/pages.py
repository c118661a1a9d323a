"""The pages as HTML strings. Everything that came from a store, a platform or a chat user goes
through `shown`: redacted of every known secret (bot/core/secrets.py), then HTML-escaped, so a
message holding `<script>` reads as text and no token reaches a page."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape
from urllib.parse import quote

from bot.cli.status import ago, relative
from bot.core.secrets import redact
from bot.core.store import OutboxRow
from bot.ops.inspection import printable
from bot.ops.usage import UsageRow
from bot.web.auth import Session, new_action_id
from bot.web.charts import bar_chart, column_chart
from bot.web.views import Overview, Timeline, Usage, wait_histogram

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#222}
nav{background:#223;color:#eee;padding:8px 16px;display:flex;gap:16px;align-items:center}
nav a{color:#fff}nav form{margin-left:auto}main{padding:12px 16px;max-width:1100px}
table{border-collapse:collapse;margin:6px 0 14px}td,th{border-bottom:1px solid #ddd;
padding:3px 8px;text-align:left;vertical-align:top}th{background:#f4f4f6}
pre{background:#f7f7f9;padding:8px;overflow-x:auto;white-space:pre-wrap}
.notice{background:#eef6e8;border:1px solid #9c6;padding:6px 10px}
.error{background:#fbecec;border:1px solid #c66;padding:6px 10px}
.empty{color:#777}form.inline{display:inline;margin:0}figure{margin:8px 0 18px}
figcaption{font-weight:600}button.danger{color:#a00}
"""


def shown(text: object) -> str:
    """Stored or platform text as it may appear on a page: printable, redacted, escaped."""
    return escape(redact(printable(str(text))))


def conversation_url(conversation_id: str) -> str:
    return "/conversation?id=" + quote(conversation_id, safe="")


def when(at: float | None) -> str:
    if at is None:
        return "-"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def layout(
    title: str, body: str, session: Session | None = None, refresh: float | None = None
) -> str:
    meta = f'<meta http-equiv="refresh" content="{refresh:g}">' if refresh else ""
    nav = ""
    if session is not None:
        logout = (
            '<form method="post" action="/logout" class="inline">'
            f'<input type="hidden" name="csrf" value="{escape(session.csrf)}">'
            '<button id="logout">log out</button></form>'
        )
        nav = (
            '<nav><strong>burstbot</strong><a href="/" id="nav-overview">overview</a>'
            f'<a href="/usage" id="nav-usage">usage</a><span id="role">{session.role}</span>'
            f"{logout}</nav>"
        )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>burstbot · {escape(title)}</title>{meta}<style>{STYLE}</style></head>"
        f"<body>{nav}<main><h1>{escape(title)}</h1>{body}</main></body></html>"
    )


def notice(text: str | None, error: bool = False) -> str:
    if not text:
        return ""
    kind = "error" if error else "notice"
    return f'<p class="{kind}" id="{kind}">{shown(text)}</p>'


def action_form(
    session: Session, path: str, fields: dict[str, str], label: str, button_id: str
) -> str:
    """An action's button, with the session's CSRF token and a fresh one-time action id; none
    for a viewer, who may not act."""
    if session.role != "operator":
        return ""
    hidden = {"csrf": session.csrf, "action": new_action_id(), **fields}
    inputs = "".join(
        f'<input type="hidden" name="{escape(name)}" value="{escape(value)}">'
        for name, value in hidden.items()
    )
    danger = ' class="danger"' if path == "/erase" else ""
    button = f'<button id="{escape(button_id)}"{danger}>{escape(label)}</button>'
    return f'<form method="post" action="{path}" class="inline">{inputs}{button}</form>'


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], table_id: str) -> str:
    """`rows` hold HTML already made safe (`shown`, links, forms)."""
    if not rows:
        return '<p class="empty">none</p>'
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table id="{table_id}"><tr>{head}</tr>{body}</table>'


def login_page(login_csrf: str, error: str | None = None) -> str:
    body = (
        f"{notice(error, error=True)}"
        '<form method="post" action="/login">'
        f'<input type="hidden" name="csrf" value="{escape(login_csrf)}">'
        '<label>token <input type="password" name="token" id="token" autocomplete="off" '
        'autofocus></label> <button id="login">log in</button></form>'
    )
    return layout("log in", body)


def overview_page(o: Overview, now: float, session: Session, flash: str | None,
                  refresh: float) -> str:  # fmt: skip
    processes = [
        [shown(p.owner) + (" (this process)" if p.this_one else ""),
         "gone" if p.gone else "alive",
         escape(ago(p.record.seen_at, now)) if p.record else "-",
         shown(f"{p.record.host}, pid {p.record.pid}, burstbot {p.record.version}, "
               f"started {relative(p.record.started_at, now)}") if p.record else "-",
         ", ".join(_link(c) for c in p.conversations) or "none"]
        for p in o.processes
    ]  # fmt: skip
    b = o.backlog
    oldest = relative(b.oldest_pending_at, now) if b.oldest_pending_at is not None else "-"
    backlog = (f"<p id=backlog>outbox: {b.outbox_depth} waiting, {b.outbox_failed} failed; "
               f"oldest unanswered message: {escape(oldest)}</p>")  # fmt: skip
    timers = [
        [_link(i.state.conversation_id), escape(relative(i.state.timer.due_at, now)),
         escape(relative(i.state.timer.deadline_at, now))]
        for i in o.in_flight if i.state.timer is not None
    ]  # fmt: skip
    troubled = [
        [f"r{r.id}", _link(r.conversation_id),
         "failed" if r.state == "failed" else "held back (retrying)",
         shown(r.last_error or "-"), str(r.attempts),
         _retry_form(session, r)
         if r.state == "failed" else ""]
        for r in o.troubled
    ]  # fmt: skip
    installs = [[shown(i.team_id), shown(i.team_name), escape(when(i.installed_at))]
                for i in o.installations]  # fmt: skip
    tools = [[shown(t.name), shown(t.state), escape(t.calls)] for t in o.tool_servers]
    recent = [
        [_link(i.state.conversation_id), f"{i.state.answered_version}/{i.state.version}",
         str(i.pending_messages), f"{i.outbox_pending} pending, {i.outbox_failed} failed",
         escape(relative(i.last_activity_at, now))]
        for i in o.recent
    ]  # fmt: skip
    body = "".join([
        notice(flash),
        "<h2>Processes</h2>",
        table(["process", "state", "last seen", "running", "conversations held"], processes,
              "processes"),
        "<h2>Backlog</h2>", backlog,
        "<h2>Due timers</h2>", table(["conversation", "due", "deadline"], timers, "timers"),
        "<h2>Replies failed or held back</h2>",
        table(["reply", "conversation", "state", "reason", "attempts", ""], troubled, "troubled"),
        "<h2>Installed workspaces</h2>",
        table(["team", "name", "installed"], installs, "installations")
        if installs else '<p class="empty">none (one bot token, or none installed yet)</p>',
        "<h2>MCP servers</h2>", table(["server", "state", "last 24 h"], tools, "tool-servers"),
        "<h2>Recent conversations</h2>",
        table(["conversation", "answered", "pending", "outbox", "last activity"], recent,
              "recent"),
    ])  # fmt: skip
    return layout("overview", body, session, refresh)


def timeline_page(t: Timeline, session: Session, flash: str | None, refresh: float) -> str:
    cid = t.conversation_id
    retries = "".join(
        f"<li>r{r.id} failed: {shown(r.last_error or '-')} {_retry_form(session, r)}</li>"
        for r in t.failed
    )
    erase = ""
    if session.role == "operator":
        erase = (f'<p><a href="/erase?id={escape(quote(cid, safe=""))}" id="erase">'
                 "erase this conversation…</a></p>")  # fmt: skip
    body = "".join([
        notice(flash),
        '<pre id="timeline">' + "\n".join(shown(line) for line in t.lines) + "</pre>",
        f'<h2>Failed replies</h2><ul id="failed">{retries}</ul>' if t.failed else "",
        erase,
    ])  # fmt: skip
    return layout(f"conversation {cid}", body, session, refresh if t.changing else None)


def erase_page(conversation_id: str, session: Session) -> str:
    form = action_form(session, "/erase", {"conversation": conversation_id, "confirm": "yes"},
                       "yes, erase it", "confirm-erase")  # fmt: skip
    body = (
        f"<p>Erase the stored text of <strong>{shown(conversation_id)}</strong>: its messages, "
        "replies and files (as <code>burstbot forget --conversation</code>). Pending work stays; "
        f"this cannot be undone.</p>{form} "
        f'<a href="{escape(conversation_url(conversation_id))}" id="cancel">cancel</a>'
    )
    return layout("erase a conversation", body, session)


def usage_page(u: Usage, session: Session, panels: Sequence[str], since: str) -> str:
    def dollars(value: float) -> str:
        return f"${value:.4f}"

    def tokens(row: UsageRow) -> float:
        return float(row.input + row.output + row.cache_read + row.cache_write)

    charts = [
        column_chart("cost per day (USD)", [(r.key, r.cost) for r in u.by["day"]], dollars),
        column_chart("tokens per day", [(r.key, tokens(r)) for r in u.by["day"]]),
    ]
    for grouping in ("channel", "workspace", "model"):
        rows = u.by[grouping]
        charts.append(bar_chart(f"cost per {grouping} (USD)", [(r.key, r.cost) for r in rows],
                                dollars))  # fmt: skip
        charts.append(bar_chart(f"tokens per {grouping}", [(r.key, tokens(r)) for r in rows]))
    waits = sorted(u.waits)
    summary = "no answered burst yet"
    if waits:
        median = waits[len(waits) // 2]
        p90 = waits[min(len(waits) - 1, int(len(waits) * 0.9))]
        summary = f"{len(waits)} answered bursts; median {median:.1f} s, p90 {p90:.1f} s"
    t = u.total
    unpriced = " (+ tokens of models without a price)" if t.unpriced else ""
    body = "".join([
        f"<p>since {escape(when(u.since) if u.since else 'the beginning')}: "
        f'<span id="total">{t.generations} generations, {tokens(t):,.0f} tokens, '
        f"${t.cost:.4f}{unpriced}</span> (estimated from the price table)</p>",
        f'<form method="get" action="/usage">since <input name="since" value="{escape(since)}" '
        'placeholder="7d, 24h, 2026-11-01"> <button>show</button></form>',
        '<div id="charts">', *charts, "</div>",
        f'<h2>Felt wait</h2><p id="wait-summary">{escape(summary)}: from a burst\'s last '
        "message to the first text shown (its streamed draft, else its post)</p>",
        column_chart("answered bursts by felt wait", wait_histogram(waits)),
        *panels,
    ])  # fmt: skip
    return layout("usage", body, session)


def message_page(title: str, text: str, session: Session | None = None) -> str:
    return layout(title, notice(text, error=True), session)


def _retry_form(session: Session, reply: OutboxRow) -> str:
    fields = {"reply": str(reply.id), "conversation": reply.conversation_id}
    return action_form(session, "/retry", fields, "retry", f"retry-r{reply.id}")


def _link(conversation_id: str) -> str:
    return f'<a href="{escape(conversation_url(conversation_id))}">{shown(conversation_id)}</a>'
