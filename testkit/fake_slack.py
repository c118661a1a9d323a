"""A fake Slack platform on 127.0.0.1: the Web API methods burstbot calls, plus an event sender.

`FakeSlackApi` serves `/api/<method>` like slack.com (form, query or JSON arguments; a Bearer
token), keeps channels and threads with message metadata, and lets a test inject failures: an HTTP
status with headers (429 + Retry-After), a Slack error, a post that lands but whose response is
lost, or a post that hangs. `EventSender` posts correctly signed Events API requests to a bot's
HTTP endpoint, with `X-Slack-Retry-Num` for retries, and slash commands. For Socket Mode,
`apps.connections.open` hands out a WebSocket on the same server; `push_envelope` sends an event
over it and `acks` records the envelope ids the bot acknowledged.

To try burstbot by hand against it: `python -m testkit.fake_slack --port 8766 --events-url
http://127.0.0.1:3000/slack/events --signing-secret S` (by hand the app has the assistant scope
unless `--without-assistant-scope`; `--channel C7:design` adds a channel the bot is in; the bot
token it accepts is `--token`, `xoxb-test` by default, and the app-level token `xapp-test`). `POST
/fake/say` (form: `channel`, `text`, optional `user`, `thread_ts`) is a person writing: the message
lands in history and is sent once as a signed event, as Slack does (if nobody listens, the event is
lost; without `--events-url`, it goes over the bot's Socket Mode connection: `apps.connections.open`
hands out one on the same server); `POST /fake/assistant` (form: `user`, optional `viewing` channel)
is a person opening the app's assistant panel: a new thread in their DM and its
`assistant_thread_started` event; with `--agent-view` (the app on the agent view) `POST
/fake/messages-tab` (form: `user`, optional `viewing` channel) is a person opening the app's
Messages tab (`app_context_changed` naming `viewing` first, if given, then `app_home_opened`), and a
DM's top-level messages then start exchanges; `POST /fake/press` (form: `ts` of a bot's message,
`button`: `stop`, `approve`, `deny`, `up` for 👍 or `down` for 👎, optional `user`) is a person
pressing one of its buttons, delivered the same way as events (Slack's interactivity URL is the
events URL); `POST /fake/stop-session` (form: `channel`, `thread_ts`, optional `user`; with
`--agent`, the app declared an agent) is a person pressing Slack's Stop on a thread's agent session;
`GET /fake/ephemerals` lists what one person alone was shown (`chat.postEphemeral`); `GET
/fake/posts` lists what bots posted (as the messages read now: `text`, what it `shows` and the
`buttons` under it), `GET /fake/calls` the `chat.*` calls bots made, in order (method, ts, text),
and `GET /fake/log` every Web API call, in order (method and arguments). `POST /fake/outage` (form:
`on=1`, `on=0`) starts and ends an outage: meanwhile every Web API call is answered by the load
balancer in front of Slack, a plain-text 503 (`UPSTREAM_DOWN`); tests set `outage` or `fail` with a
`page` for the same. `POST /fake/token` (form: `token`) is the workspace admin revoking the bot
token and reinstalling the app: from then on only the new token is accepted (`--token` sets the
first one).

Bots' messages can be updated (`chat.update`: the bot's own message, text within Slack's limit,
metadata replaced when given) and deleted (`chat.delete`), as on Slack.

Block Kit: `chat.postMessage` and `chat.update` take `blocks` (sections, actions with buttons,
context, divider, `task_card` with `task_id`, `title`, a status and rich-text `output`, `plan`
with a `title` and such `tasks`), checked against Slack's limits (`invalid_blocks` otherwise); an
update without `blocks` keeps the message's blocks, `blocks=[]` removes them, as on Slack. The
task cards among a message's blocks are its `tasks`, by id. A message with blocks
shows its blocks (`PostedMessage.visible`), its `text` is the notification fallback.
`click(message, user)` builds the `block_actions` payload Slack sends when someone presses a
button of a message, `feedback(message, user, positive)` the one of a press of a message's
`feedback_buttons` (in a `context_actions` block, checked as Slack documents it);
`EventSender.interact` delivers it over HTTP (a signed form, `payload=`; with `retry_num`, Slack's
retry headers), `push_interactive` over Socket Mode (an `interactive` envelope). Each delivery is
sent as asked: a second one of the same click is Slack redelivering it, never deduped here.
`chat.postEphemeral` records what one person alone was shown (`ephemerals`).

Native streams: `chat.startStream` (a thread reply: `thread_ts` required, `markdown_text` within
12,000 characters) posts a message that shows in `conversations.replies` at once, without
metadata; `chat.appendStream` appends to it, `chat.stopStream` appends its `markdown_text` if any,
sets its `metadata` if given and ends it. Appending to or stopping a message that is not streaming
answers `message_not_in_streaming_state`, an unknown one `message_not_found`. A streaming message
cannot be `chat.update`d (`cant_update_message`: Slack documents no update of a running stream,
so the fake refuses it and the bot must stop the stream first); it can be deleted. The three
methods also take `chunks`, checked as Slack documents them (`markdown_text` with its `text`;
`task_update` with `id`, `title`, `status` pending / in_progress / complete / error, optional
`details` and `output` within 256 characters and `sources`, a list of `url` elements with `url` and
`text`; `plan_update` with `title`; `blocks`), anything else `invalid_arguments`; `startStream`
takes `task_display_mode` timeline or plan. Markdown chunks append to the text; each task's newest
update is kept on the message (`tasks`, by id), as the timeline shows it. Slack ends a stream
`stream_limit_seconds` after it started (300 by default, about five minutes as Slack documents;
measured on `clock`, which a test may share with the bot's fake one): from then on appends and
stops answer `message_not_in_streaming_state` and the message can be updated. A stream's task
cards are part of the message's content: an update that gives `blocks` replaces them with the
`task_card` blocks among those (alone or in a `plan`), one without keeps them.

Assistant threads: `assistant.threads.setStatus`, `setSuggestedPrompts` and `setTitle` take
effect (recorded in `statuses`, `suggested` and `titles`) only when the app has the
`assistant:write` scope and the assistant feature (`assistant_enabled`, set by
`status_supported=True`); otherwise they answer `missing_scope`, as Slack does. What a person
sees of a status is `status_shown`: as Slack documents it, a status is removed when the app sends
a message in the thread, or `STATUS_TIMEOUT_SECONDS` (two minutes, on `clock`) after it was set
if no message was sent. Their arguments are
checked as Slack does (a thread, one to four prompts each with a title and a message, a title).
`conversations.info` answers for the channels in `channels` (name, and whether the bot is a
member).

Agent sessions (`agent=True`: the app is declared an agent): `agents.sessions.setStatus`,
`agents.sessions.rename` and the `agent_session_stopped` event, in testkit/fake_slack_agents.py
(`agents`). The agent view (`view="agent"`: the manifest's `agent_view`, which makes the app an
agent too): `setSuggestedPrompts` as Slack documents it for agents (the DM's channel, no
`thread_ts`; recorded in `agent_view.shown`), and the `app_home_opened` / `app_context_changed`
events (`app_home_opened`, `app_context_changed`; the latter's envelope names the person in
`authorizations`, which `EventSender.send` and `push_envelope` take).

Rate limits, on request (`enforce_rate_limits`, or `--rate-limits` by hand): `chat.update` per
workspace (Tier 3, 50 a minute) and `chat.postMessage` per channel (one a second), each a token
bucket holding five seconds' worth; a call over the limit is refused as Slack does (HTTP 429,
`ratelimited`, `Retry-After` in whole seconds) and counted (`rate_limited`, `GET
/fake/rate-limits`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiohttp import web
from slack_sdk.signature import SignatureVerifier

from testkit.fake_slack_agents import (
    AgentSessionsApi,
    AgentView,
    app_context_changed,
    app_home_opened,
    viewer_authorizations,
)
from testkit.rate_limits import RateLimits, whole_seconds
from testkit.serving import serve_locally

TEAM = "T0001"
BOT_USER = "UBOT"
BOT_ID = "BBOT"
MAX_TEXT_CHARS = 40_000  # Slack refuses longer text with msg_too_long
MAX_STREAM_CHARS = 12_000  # a stream's markdown_text, per call
STATUS_TIMEOUT_SECONDS = 120.0  # an assistant thread's status is removed this long after it is set
STREAM_LIMIT_SECONDS = 300.0  # Slack stops taking appends about five minutes into a stream
TASK_STATUSES = frozenset({"pending", "in_progress", "complete", "error"})
TASK_TEXT_CHARS = 256  # a task's details and output
TASK_KEYS = frozenset({"type", "id", "title", "status", "details", "output", "sources"})
MAX_BLOCKS = 50
SECTION_TEXT_CHARS = 3000
BUTTON_TEXT_CHARS = 75
BUTTON_VALUE_CHARS = 2000
ACTION_ID_CHARS = 255
CONTEXT_ACTIONS = 5  # elements of a `context_actions` block
ACCESSIBILITY_LABEL_CHARS = 75
SLACK_LIMITS = {
    "chat.update": (50.0, 20.0, "workspace"),
    "chat.postMessage": (60.0, 5.0, "channel"),
}
"""Per method: calls a minute, burst, and what the limit counts over (Slack's tiers: Tier 3 with
bursts for `chat.update`, about one post a second per channel)."""


@dataclass
class Failure:
    status: int = 200
    error: str = "internal_error"
    headers: dict[str, str] = field(default_factory=dict)
    lands: bool = False  # the call takes effect, but the caller sees the failure
    page: str | None = None  # a body that is not Slack's JSON: what a load balancer answers
    content_type: str = "text/plain"  # of `page`


UPSTREAM_DOWN = Failure(
    status=503,
    page="upstream connect error or disconnect/reset before headers. "
    "reset reason: connection failure",
)
"""What the load balancer in front of the Web API answers while Slack behind it is down."""


@dataclass
class PostedMessage:
    channel: str
    ts: str
    text: str
    thread_ts: str | None
    metadata: dict[str, Any] | None
    user: str = BOT_USER
    bot_id: str | None = BOT_ID

    subtype: str | None = None
    streaming: bool = False  # a native stream not stopped yet
    stream_started: float = 0.0  # when its stream started, on the fake's `clock`
    blocks: list[dict[str, Any]] | None = None  # Block Kit: shown instead of `text`
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)  # a stream's task cards, by id

    @property
    def top_level(self) -> bool:
        """In the channel's history: not a thread reply (unless broadcast to the channel)."""
        return not self.thread_ts or self.thread_ts == self.ts or self.subtype == "thread_broadcast"

    def as_api(self, with_metadata: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "message", "ts": self.ts, "text": self.text}
        out["user"] = self.user
        if self.bot_id:
            out["bot_id"] = self.bot_id
        if self.subtype:
            out["subtype"] = self.subtype
        if self.thread_ts:
            out["thread_ts"] = self.thread_ts
        if with_metadata and self.metadata:
            out["metadata"] = self.metadata
        if self.blocks:
            out["blocks"] = self.blocks
        return out

    @property
    def visible(self) -> str:
        """What people see: the sections' text where the message has blocks, else its text."""
        if not self.blocks:
            return self.text
        return "\n".join(b["text"]["text"] for b in self.blocks if b.get("type") == "section")

    def buttons(self) -> list[dict[str, Any]]:
        """The buttons the message shows."""
        return [e for b in self.blocks or [] if b.get("type") == "actions" for e in b["elements"]]

    def feedback_buttons(self) -> list[dict[str, Any]]:
        """The `feedback_buttons` elements the message shows (👍/👎)."""
        return [e for b in self.blocks or [] if b.get("type") == "context_actions"
                for e in b["elements"] if e.get("type") == "feedback_buttons"]  # fmt: skip


async def api_arguments(request: web.Request) -> dict[str, Any]:
    """A Web API call's arguments: its query, and its form or JSON body."""
    args: dict[str, Any] = dict(request.query)
    if request.can_read_body:
        if request.content_type == "application/json":
            args.update(await request.json())
        else:
            args.update(dict(await request.post()))
    return args


@dataclass
class SharedFile:
    name: str
    content: bytes
    mimetype: str


def stream_chunks(args: dict[str, Any]) -> tuple[str, list[dict[str, Any]]] | None:
    """A stream call's `chunks` as Slack documents them: the markdown they add and the task
    updates, or None when one is malformed."""
    chunks = args.get("chunks")
    if chunks is None:
        return "", []
    if isinstance(chunks, str):
        try:
            chunks = json.loads(chunks)
        except json.JSONDecodeError:
            return None
    if not isinstance(chunks, list) or not chunks:
        return None
    text, tasks = "", []
    for chunk in chunks:
        kind = chunk.get("type") if isinstance(chunk, dict) else None
        if kind == "markdown_text" and isinstance(chunk.get("text"), str) and chunk["text"]:
            text += chunk["text"]
        elif kind == "task_update" and valid_task(chunk):
            tasks.append(chunk)
        elif not (
            (kind == "plan_update" and isinstance(chunk.get("title"), str))
            or (kind == "blocks" and isinstance(chunk.get("blocks"), list))
        ):
            return None
    return text, tasks


def blocks_argument(args: dict[str, Any]) -> list[dict[str, Any]] | str | None:
    """A call's `blocks` (None: not given), or "invalid_blocks" where Slack would refuse them."""
    blocks = args.get("blocks")
    if blocks is None:
        return None
    if isinstance(blocks, str):
        try:
            blocks = json.loads(blocks)
        except json.JSONDecodeError:
            return "invalid_blocks"
    if not isinstance(blocks, list) or len(blocks) > MAX_BLOCKS:
        return "invalid_blocks"
    return blocks if all(isinstance(b, dict) and valid_block(b) for b in blocks) else (
        "invalid_blocks")  # fmt: skip


def valid_block(block: dict[str, Any]) -> bool:
    kind = block.get("type")
    if kind == "divider":
        return True
    if kind == "section":
        text = block.get("text")
        return (isinstance(text, dict) and text.get("type") in ("mrkdwn", "plain_text")
                and isinstance(text.get("text"), str)
                and 0 < len(text["text"]) <= SECTION_TEXT_CHARS)  # fmt: skip
    if kind in ("actions", "context"):
        elements = block.get("elements")
        if not (isinstance(elements, list) and 0 < len(elements) <= 25):
            return False
        return kind == "context" or all(valid_button(e) for e in elements)
    if kind == "task_card":
        return valid_task_card(block)
    if kind == "plan":
        tasks = block.get("tasks", [])
        return (isinstance(block.get("title"), str) and isinstance(tasks, list)
                and all(valid_task_card(t) for t in tasks))  # fmt: skip
    if kind == "context_actions":
        elements = block.get("elements")
        if not (isinstance(elements, list) and 0 < len(elements) <= CONTEXT_ACTIONS):
            return False
        return all(valid_feedback_buttons(e) for e in elements)
    return False


def valid_feedback_buttons(element: Any) -> bool:
    """A `feedback_buttons` element: an optional `action_id`, and a positive and a negative
    button, each with a plain text and a value (and an optional accessibility label)."""
    if not isinstance(element, dict) or element.get("type") != "feedback_buttons":
        return False
    if set(element) - {"type", "action_id", "positive_button", "negative_button"}:
        return False
    action_id = element.get("action_id", "x")
    if not (isinstance(action_id, str) and 0 < len(action_id) <= ACTION_ID_CHARS):
        return False
    for name in ("positive_button", "negative_button"):
        button = element.get(name)
        if not isinstance(button, dict) or set(button) - {"text", "value", "accessibility_label"}:
            return False
        text, value = button.get("text"), button.get("value")
        label = button.get("accessibility_label", "")
        if not (isinstance(label, str) and len(label) <= ACCESSIBILITY_LABEL_CHARS):
            return False
        if not (isinstance(text, dict) and text.get("type") == "plain_text"
                and 0 < len(str(text.get("text", ""))) <= BUTTON_TEXT_CHARS
                and isinstance(value, str) and 0 < len(value) <= BUTTON_VALUE_CHARS):  # fmt: skip
            return False
    return True


def valid_button(element: Any) -> bool:
    if not isinstance(element, dict) or element.get("type") != "button":
        return False
    text, value = element.get("text"), element.get("value", "")
    return (isinstance(text, dict) and text.get("type") == "plain_text"
            and 0 < len(str(text.get("text", ""))) <= BUTTON_TEXT_CHARS
            and isinstance(element.get("action_id"), str)
            and 0 < len(element["action_id"]) <= ACTION_ID_CHARS
            and isinstance(value, str) and len(value) <= BUTTON_VALUE_CHARS)  # fmt: skip


def valid_task(chunk: dict[str, Any]) -> bool:
    if set(chunk) - TASK_KEYS or chunk.get("status") not in TASK_STATUSES:
        return False
    if not (isinstance(chunk.get("id"), str) and chunk["id"]) or not isinstance(
        chunk.get("title"), str
    ):
        return False
    for name in ("details", "output"):
        value = chunk.get(name)
        if value is not None and not (isinstance(value, str) and len(value) <= TASK_TEXT_CHARS):
            return False
    return valid_sources(chunk.get("sources", []))


def valid_sources(sources: Any) -> bool:
    return isinstance(sources, list) and all(
        isinstance(s, dict) and s.get("type") == "url" and set(s) == {"type", "url", "text"}
        and isinstance(s["url"], str) and s["url"].startswith(("http://", "https://"))
        and isinstance(s["text"], str)
        for s in sources
    )  # fmt: skip


def valid_task_card(block: Any) -> bool:
    """A `task_card` block as Slack documents it: `task_id`, `title`, an optional `status`,
    `details` and `output` each one `rich_text`, `sources` as a task chunk's."""
    if not isinstance(block, dict) or block.get("type") != "task_card":
        return False
    if set(block) - {"type", "task_id", "title", "status", "details", "output", "sources",
                     "block_id"}:  # fmt: skip
        return False
    if not (isinstance(block.get("task_id"), str) and block["task_id"]) or not isinstance(
        block.get("title"), str
    ):
        return False
    if block.get("status", "pending") not in TASK_STATUSES:
        return False
    for name in ("details", "output"):
        value = block.get(name)
        if value is not None and not (isinstance(value, dict) and value.get("type") == "rich_text"
                                      and isinstance(value.get("elements"), list)):  # fmt: skip
            return False
    return valid_sources(block.get("sources", []))


def shown_tasks(blocks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The task cards blocks show (alone or in a plan), by id, as a stream's task updates."""
    cards = [b for b in blocks if b.get("type") == "task_card"]
    cards += [t for b in blocks if b.get("type") == "plan" for t in b.get("tasks") or []]
    return {c["task_id"]: {**c, "id": c["task_id"]} for c in cards}


class FakeSlackApi:
    def __init__(
        self,
        token: str = "xoxb-test",
        status_supported: bool = False,
        team: str = TEAM,
        team_name: str = "Acme",
        bot_user: str = BOT_USER,
        bot_id: str = BOT_ID,
        agent: bool = False,
        view: str = "assistant",
    ) -> None:
        self.token = token
        self.view = view  # the manifest's AI surface: "assistant" (assistant_view) or "agent"
        self.agents = AgentSessionsApi(agent=agent or view == "agent")  # agents.sessions.*
        self.agent_view = AgentView()  # what the agent view showed
        self.team, self.team_name = team, team_name
        self.bot_user, self.bot_id = bot_user, bot_id
        self.status_supported = status_supported
        self.messages: list[PostedMessage] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.users: dict[str, str] = {"U1": "alice", "U2": "bob"}  # users.info: id → name
        self.reactions: set[tuple[str, str, str]] = set()
        self.reaction_log: list[tuple[str, str, str]] = []
        self.statuses: list[tuple[str, str, str]] = []
        self._status_now: dict[tuple[str, str], tuple[str, float]] = {}  # thread → status, set at
        self.suggested: list[tuple[str, str, list[dict[str, str]], str | None]] = []
        self.titles: list[tuple[str, str, str]] = []
        self.channels: dict[str, dict[str, Any]] = {}  # conversations.info: id → name, is_member
        self.redundant_updates = 0  # chat.update calls that set what the message showed already
        self.updates: list[tuple[str, str, float]] = []  # chat.update: ts, text, when (monotonic)
        self.chat_log: list[dict[str, Any]] = []  # chat.* calls that took effect: method, ts,
        # text (and a stream's chunks)
        self.deleted: list[str] = []
        self.ephemerals: list[dict[str, str]] = []  # chat.postEphemeral, as it was asked
        self.ephemeral_posted = asyncio.Event()
        self._actions = itertools.count(1)
        self.failures: dict[str, list[Failure | None]] = {}  # None: let one call through
        self.outage: Failure | None = None  # while set, every Web API call gets this answer
        self.holds: dict[str, asyncio.Event] = {}
        self.delays: dict[str, float] = {}
        self.held: dict[str, asyncio.Event] = {}
        self._last_ts = 0.0
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.app_token = "xapp-test"
        self.acks: list[str] = []
        self.ack_payloads: dict[str, Any] = {}
        self.ack_received = asyncio.Event()
        self.sockets: list[web.WebSocketResponse] = []
        self._envelopes = itertools.count(1)
        self.files: dict[str, SharedFile] = {}
        self.downloads: list[str] = []  # file ids whose download was asked with the right token
        self.refused_downloads: list[str] = []  # ... asked without it (got the sign-in page)
        self.timeline: list[str] = []  # "download <id>" as each starts; tests add their own marks
        self.limits: dict[str, tuple[RateLimits, str]] = {}  # method → its buckets, counted over
        self.stream_limit_seconds = STREAM_LIMIT_SECONDS  # Slack ends a stream this long after
        self.clock: Callable[[], float] = time.monotonic  # its start; tests share a fake clock
        self.stream_refusals: list[str] = []  # the errors appends and stops were answered

    # lifecycle --------------------------------------------------------------------------------
    async def start(self, port: int = 0) -> FakeSlackApi:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._handle)
        app.router.add_get("/socket", self._socket)
        app.router.add_get("/files-pri/{team_file}/download/{name}", self._download)
        app.router.add_post("/fake/say", self._say)
        app.router.add_get("/fake/posts", self._posts)
        app.router.add_get("/fake/calls", self._chat_calls)
        app.router.add_get("/fake/log", self._call_log)
        app.router.add_post("/fake/assistant", self._open_assistant)
        app.router.add_post("/fake/messages-tab", self._open_messages_tab)
        app.router.add_post("/fake/outage", self._switch_outage)
        app.router.add_post("/fake/token", self._new_token)
        app.router.add_get("/fake/rate-limits", self._rate_limit_counts)
        app.router.add_post("/fake/press", self._press)
        app.router.add_post("/fake/stop-session", self._stop_session)
        app.router.add_get("/fake/ephemerals", self._ephemerals)
        self._runner, bound = await serve_locally(app, port, access_log=None)
        self.url = f"http://127.0.0.1:{bound}/api/"
        return self

    async def stop(self) -> None:
        for event in self.holds.values():
            event.set()
        for ws in self.sockets:
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # test controls ----------------------------------------------------------------------------
    def fail(self, method: str, failure: Failure, times: int = 1, after: int = 0) -> None:
        """The next `times` calls of `method` fail, once `after` calls have gone through (a
        second part's post fails between parts)."""
        self.failures.setdefault(method, []).extend([None] * after + [failure] * times)

    def enforce_rate_limits(
        self,
        limits: dict[str, tuple[float, float, str]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Refuse calls over Slack's limits (`SLACK_LIMITS` by default) with a 429, as Slack
        does; `clock` is the platform's time (a fake clock's `monotonic` in fake-time tests)."""
        for method, (per_minute, burst, per) in (limits or SLACK_LIMITS).items():
            self.limits[method] = (RateLimits(per_minute, burst, clock), per)

    @property
    def rate_limited(self) -> dict[str, int]:
        """429s answered, by method."""
        return {method: len(limits.refused) for method, (limits, _) in self.limits.items()}

    async def _rate_limit_counts(self, request: web.Request) -> web.Response:
        return web.json_response({"rate_limited": self.rate_limited})

    def _over_limit(self, method: str, args: dict[str, Any]) -> web.Response | None:
        if method not in self.limits:
            return None
        limits, per = self.limits[method]
        wait = limits.spend(self.team if per == "workspace" else str(args.get("channel", "")))
        if wait is None:
            return None
        return web.json_response({"ok": False, "error": "ratelimited"}, status=429,
                                 headers={"Retry-After": whole_seconds(wait)})  # fmt: skip

    def slow(self, method: str, seconds: float) -> None:
        """Calls of `method` take effect at once and answer only after `seconds` (a slow API)."""
        self.delays[method] = seconds

    def hold(self, method: str) -> asyncio.Event:
        """Calls of `method` take effect, then wait until the returned event is set."""
        self.held[method] = asyncio.Event()
        self.holds[method] = asyncio.Event()
        return self.holds[method]

    def end_streams(self) -> None:
        """Slack ends running streams by itself after some minutes: they stop taking appends."""
        for message in self.messages:
            message.streaming = False

    def _end_old_streams(self) -> None:
        """Slack ends a stream `stream_limit_seconds` after its start: from then on the message
        is an ordinary one (appends and stops answer `message_not_in_streaming_state`)."""
        now = self.clock()
        for message in self.messages:
            if message.streaming and now - message.stream_started >= self.stream_limit_seconds:
                message.streaming = False

    def add_user_message(
        self, channel: str, ts: str, text: str, user: str = "U1", thread_ts: str | None = None
    ) -> None:
        """A person's message in Slack's history (sent while no bot listened: no event)."""
        self.messages.append(PostedMessage(channel, ts, text, thread_ts, None, user, None))

    def share_file(
        self, file_id: str, name: str, content: bytes, mimetype: str, size: int | None = None,
        **extra: Any,
    ) -> dict[str, Any]:  # fmt: skip
        """A file someone uploaded: the object Slack puts in a message's `files`. `size` is what
        Slack declares (default: the real size); the bytes are served to the bot token only."""
        self.files[file_id] = SharedFile(name, content, mimetype)
        base = self.url.removesuffix("/api/")
        return {"id": file_id, "name": name, "title": name, "mimetype": mimetype,
                "filetype": name.rsplit(".", 1)[-1], "size": len(content) if size is None else size,
                "url_private": f"{base}/files-pri/{self.team}-{file_id}/{name}",
                "url_private_download": f"{base}/files-pri/{self.team}-{file_id}/download/{name}",
                **extra}  # fmt: skip

    async def _download(self, request: web.Request) -> web.StreamResponse:
        """Like files.slack.com: without the bot token, a 200 sign-in page, not the file."""
        file_id = request.match_info["team_file"].removeprefix(f"{self.team}-")
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if self.refuse_token("files", token) is not None:
            self.refused_downloads.append(file_id)
            return web.Response(text="<html>Sign in to Slack</html>", content_type="text/html")
        self.timeline.append(f"download {file_id}")
        self.downloads.append(file_id)
        shared = self.files.get(file_id)
        if shared is None or shared.name != request.match_info["name"]:
            return web.Response(status=404, text="file not found")
        return web.Response(body=shared.content, content_type=shared.mimetype)

    # by hand (see the module docstring) -------------------------------------------------------
    events: EventSender | None = None

    async def _say(self, request: web.Request) -> web.Response:
        form = await request.post()
        channel, text = str(form["channel"]), str(form["text"])
        user, thread_ts = str(form.get("user", "U1")), form.get("thread_ts")
        ts = self._next_ts()
        self.add_user_message(channel, ts, text, user, str(thread_ts) if thread_ts else None)
        event = {"type": "message", "channel": channel, "user": user, "text": text, "ts": ts,
                 "channel_type": "im" if channel.startswith("D") else "channel",
                 "user_profile": {"display_name": self.users.get(user, user)}}  # fmt: skip
        if thread_ts:
            event["thread_ts"] = str(thread_ts)
        return web.json_response({"ts": ts, "event": await self._deliver_event(event)})

    async def _deliver_event(self, event: dict[str, Any]) -> int | str:
        """By hand: send `event` as Slack would, to the events URL, else over the newest Socket
        Mode connection; what happened to it (the HTTP status, or the envelope id)."""
        try:
            if self.events is not None:
                return await self.events.send(event)
            if self.sockets:
                return await self.push_envelope(event)
        except (aiohttp.ClientError, ConnectionError) as exc:
            return f"event lost: {exc}"
        return "no events url and no Socket Mode connection"

    async def _deliver_interaction(self, payload: dict[str, Any]) -> int | str:
        """By hand: a button press, to the events URL (Slack's interactivity URL is the same),
        else over the newest Socket Mode connection."""
        try:
            if self.events is not None:
                return await self.events.interact(payload)
            if self.sockets:
                return await self.push_interactive(payload)
        except (aiohttp.ClientError, ConnectionError) as exc:
            return f"press lost: {exc}"
        return "no events url and no Socket Mode connection"

    async def _press(self, request: web.Request) -> web.Response:
        """A person presses a button of a bot's message: `button` is `stop`, `approve` or `deny`
        (a button by its label), `up` or `down` (👍 or 👎 of its feedback buttons)."""
        form = await request.post()
        ts, user, button = str(form["ts"]), str(form.get("user", "U1")), str(form["button"])
        found = [m for m in self.posts() if m.ts == ts]
        if not found:
            return web.json_response({"error": f"no bot message {ts}"}, status=404)
        message = found[0]
        labels = {str(b["text"]["text"]).lower(): b["action_id"] for b in message.buttons()}
        if button in labels:
            payload = self.click(message, user, labels[button])
        elif button in ("up", "down") and message.feedback_buttons():
            payload = self.feedback(message, user, positive=button == "up")
        else:
            refused = {"error": f"message {ts} shows no {button} button"}
            return web.json_response(refused, status=409)
        return web.json_response({"press": await self._deliver_interaction(payload)})

    async def _stop_session(self, request: web.Request) -> web.Response:
        """A person presses Slack's Stop on a thread's agent session (`--agent`)."""
        form = await request.post()
        channel, thread = str(form["channel"]), str(form["thread_ts"])
        status = self.agents.sessions.get((channel, thread))
        if status != "processing":  # Slack shows the session's Stop only while it processes
            refused = {"error": f"session {channel}/{thread} shows no Stop (status: {status})"}
            return web.json_response(refused, status=409)
        event = self.stop_session(channel, thread, str(form.get("user", "U1")))
        return web.json_response({"event": await self._deliver_event(event)})

    async def _ephemerals(self, request: web.Request) -> web.Response:
        return web.json_response(self.ephemerals)

    async def _posts(self, request: web.Request) -> web.Response:
        posts = [{"channel": m.channel, "ts": m.ts, "thread_ts": m.thread_ts, "text": m.text,
                  "shows": m.visible, "buttons": _button_names(m)}
                 for m in self.posts()]  # fmt: skip
        return web.json_response(posts)

    async def _chat_calls(self, request: web.Request) -> web.Response:
        return web.json_response(self.chat_log)

    async def _call_log(self, request: web.Request) -> web.Response:
        return web.json_response([{"method": method, "args": args} for method, args in self.calls])

    async def _open_assistant(self, request: web.Request) -> web.Response:
        form = await request.post()
        user, viewing = str(form.get("user", "U1")), str(form.get("viewing", ""))
        channel, thread_ts = self.open_assistant_thread(user)
        status: int | str = "no events url"
        if self.events is not None:
            event = assistant_event("assistant_thread_started", channel, thread_ts, user, viewing)
            try:
                status = await self.events.send(event)
            except aiohttp.ClientError as exc:
                status = f"event lost: {exc}"
        return web.json_response({"channel": channel, "thread_ts": thread_ts, "event": status})

    async def _open_messages_tab(self, request: web.Request) -> web.Response:
        form = await request.post()
        user, viewing = str(form.get("user", "U1")), str(form.get("viewing", ""))
        channel, sent = "D" + user.removeprefix("U"), list[int | str]()
        if self.events is None:
            return web.json_response({"channel": channel, "events": ["no events url"]})
        try:
            if viewing:
                looking = app_context_changed(viewing, self.team)
                viewer = viewer_authorizations(user, self.team)
                sent.append(await self.events.send(looking, authorizations=viewer))
            sent.append(await self.events.send(app_home_opened(user, channel)))
        except aiohttp.ClientError as exc:
            sent.append(f"event lost: {exc}")
        return web.json_response({"channel": channel, "events": sent})

    def open_assistant_thread(self, user: str = "U1") -> tuple[str, str]:
        """A person opens the assistant panel: Slack starts a thread in their DM with the app
        (its root is the person's `assistant_app_thread` message). Returns (channel, thread_ts)."""
        channel, ts = "D" + user.removeprefix("U"), self._next_ts()
        root = PostedMessage(channel, ts, "New Assistant Thread", None, None, user, None,
                             subtype="assistant_app_thread")  # fmt: skip
        self.messages.append(root)
        return channel, ts

    async def _switch_outage(self, request: web.Request) -> web.Response:
        """`on=1`: every Web API call gets the load balancer's plain-text 503 until `on=0`."""
        form = await request.post()
        self.outage = UPSTREAM_DOWN if form.get("on", "1") == "1" else None
        logging.getLogger("fake-slack").warning("outage %s", "on" if self.outage else "off")
        return web.json_response({"outage": self.outage is not None})

    async def _new_token(self, request: web.Request) -> web.Response:
        """The old bot token is revoked and a new one issued, as a reinstall after revoking does."""
        form = await request.post()
        self.token = str(form["token"])
        logging.getLogger("fake-slack").warning("bot token replaced; the old one is revoked")
        return web.json_response({"ok": True})

    def posts(self, channel: str | None = None) -> list[PostedMessage]:
        return [m for m in self.messages if m.bot_id and (channel is None or m.channel == channel)]

    def methods(self) -> list[str]:
        return [name for name, _ in self.calls]

    # the API ----------------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        return await self.answer(method, await api_arguments(request), token)

    def refuse_token(self, method: str, token: str) -> str | None:
        """Slack's error for a call with this token (None: the token is good for it)."""
        expected = self.app_token if method == "apps.connections.open" else self.token
        return None if token == expected else "invalid_auth"

    async def answer(self, method: str, args: dict[str, Any], token: str) -> web.Response:
        """One Web API call with its arguments and bearer token, as Slack answers it."""
        self.calls.append((method, args))
        self._end_old_streams()
        if self.outage is not None:  # the load balancer answers; Slack never sees the call
            return self._failure(self.outage)
        bad_token = self.refuse_token(method, token)
        if bad_token is not None:
            return web.json_response({"ok": False, "error": bad_token})
        if (refused := self._over_limit(method, args)) is not None:
            return refused
        failure = self.failures.get(method, []).pop(0) if self.failures.get(method) else None
        if failure is not None and not failure.lands:
            return self._failure(failure)
        handler = getattr(self, "_" + method.replace(".", "_"), None)
        if handler is None:
            return web.json_response({"ok": False, "error": "unknown_method"}, status=404)
        result: dict[str, Any] = handler(args)
        if method in self.delays:
            await asyncio.sleep(self.delays[method])
        if method in self.holds:
            self.held[method].set()
            await self.holds[method].wait()
        if failure is not None:
            return self._failure(failure)
        return web.json_response({"ok": "error" not in result, **result})

    @staticmethod
    def _failure(failure: Failure) -> web.Response:
        if failure.page is not None:
            return web.Response(
                text=failure.page,
                status=failure.status,
                content_type=failure.content_type,
                headers=failure.headers,
            )
        return web.json_response(
            {"ok": False, "error": failure.error}, status=failure.status, headers=failure.headers
        )

    def _auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"team_id": self.team, "team": self.team_name, "user_id": self.bot_user,
                "user": "burstbot", "bot_id": self.bot_id,
                "url": f"https://{self.team_name.lower()}.slack.com/"}  # fmt: skip

    def _next_ts(self) -> str:
        """A new message's ts: the time, in microseconds, always later than the last one."""
        self._last_ts = max(round(time.time(), 6), round(self._last_ts + 0.000001, 6))
        return f"{self._last_ts:.6f}"

    def _chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        if len(str(args.get("text", ""))) > MAX_TEXT_CHARS:
            return {"error": "msg_too_long"}
        blocks = blocks_argument(args)
        if isinstance(blocks, str):
            return {"error": blocks}
        metadata = args.get("metadata")
        if isinstance(metadata, str):
            metadata = json.loads(metadata)
        ts = self._next_ts()
        message = PostedMessage(
            str(args["channel"]), ts, str(args.get("text", "")), args.get("thread_ts"), metadata,
            self.bot_user, self.bot_id, blocks=blocks or None,
        )  # fmt: skip
        message.tasks = shown_tasks(blocks or [])
        self.messages.append(message)
        self._message_sent(message.channel, message.thread_ts)
        self.chat_log.append({"method": "chat.postMessage", "ts": ts, "text": message.text})
        return {"channel": message.channel, "ts": ts, "message": message.as_api(True)}

    def _own_message(self, args: dict[str, Any]) -> PostedMessage | dict[str, Any]:
        """The bot's message at `channel`/`ts`, or the error Slack gives for it."""
        found = [m for m in self.messages
                 if m.channel == args.get("channel") and m.ts == args.get("ts")]  # fmt: skip
        if not found:
            return {"error": "message_not_found"}
        if found[0].bot_id != self.bot_id:
            return {"error": "cant_update_message"}
        return found[0]

    def _chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        """Slack's chat.update: the bot's own message, text within the limit; metadata replaced
        when given (kept otherwise)."""
        message = self._own_message(args)
        if isinstance(message, dict):
            return message
        if message.streaming:
            return {"error": "cant_update_message"}
        text = str(args.get("text", ""))
        if len(text) > MAX_TEXT_CHARS:
            return {"error": "msg_too_long"}
        blocks = blocks_argument(args)
        if isinstance(blocks, str):
            return {"error": blocks}
        metadata = args.get("metadata")
        if isinstance(metadata, str):
            metadata = json.loads(metadata)
        if (text == message.text and (not metadata or metadata == message.metadata)
                and (blocks is None or (blocks or None) == message.blocks)):  # fmt: skip
            self.redundant_updates += 1  # taken, as Slack does; it changed nothing
        message.text = text
        if metadata:
            message.metadata = metadata
        if blocks is not None:  # not given: the message keeps its blocks (and task cards)
            message.blocks = blocks or None
            message.tasks = shown_tasks(blocks)  # a stream's cards are replaced by the blocks'
        self.updates.append((message.ts, text, time.monotonic()))
        self.chat_log.append({"method": "chat.update", "ts": message.ts, "text": text})
        return {"channel": message.channel, "ts": message.ts, "text": text}

    def _chat_startStream(self, args: dict[str, Any]) -> dict[str, Any]:
        if not args.get("channel") or not args.get("thread_ts"):
            return {"error": "invalid_arguments"}
        chunked = stream_chunks(args)
        if chunked is None or args.get("task_display_mode") not in (None, "timeline", "plan"):
            return {"error": "invalid_arguments"}
        text = str(args.get("markdown_text") or "") + chunked[0]
        if len(text) > MAX_STREAM_CHARS:
            return {"error": "msg_too_long"}
        ts = self._next_ts()
        message = PostedMessage(str(args["channel"]), ts, text, str(args["thread_ts"]), None,
                                self.bot_user, self.bot_id, streaming=True,
                                stream_started=self.clock())  # fmt: skip
        message.tasks.update((task["id"], task) for task in chunked[1])
        self.messages.append(message)
        self._message_sent(message.channel, message.thread_ts)
        self._log_stream("chat.startStream", ts, text, args)
        return {"channel": message.channel, "ts": ts}

    def _log_stream(self, method: str, ts: str, text: str, args: dict[str, Any]) -> None:
        entry: dict[str, Any] = {"method": method, "ts": ts, "text": text}
        if args.get("chunks") is not None:
            chunks = args["chunks"]
            entry["chunks"] = json.loads(chunks) if isinstance(chunks, str) else chunks
        self.chat_log.append(entry)

    def _stream_update(
        self, args: dict[str, Any]
    ) -> tuple[PostedMessage, str, list[dict[str, Any]]] | dict[str, Any]:
        """The streaming message a stream call names, the text it adds and its task updates; or
        the error Slack answers (not the bot's, no longer streaming, malformed chunks)."""
        message = self._own_message(args)
        if isinstance(message, dict):
            return message
        if not message.streaming:
            self.stream_refusals.append("message_not_in_streaming_state")
            return {"error": "message_not_in_streaming_state"}
        chunked = stream_chunks(args)
        if chunked is None:
            return {"error": "invalid_arguments"}
        return message, str(args.get("markdown_text") or "") + chunked[0], chunked[1]

    def _chat_appendStream(self, args: dict[str, Any]) -> dict[str, Any]:
        update = self._stream_update(args)
        if isinstance(update, dict):
            return update
        message, text, tasks = update
        if not text and not tasks:
            return {"error": "invalid_arguments"}
        if len(text) > MAX_STREAM_CHARS:
            return {"error": "msg_too_long"}
        message.text += text
        message.tasks.update((task["id"], task) for task in tasks)
        self._log_stream("chat.appendStream", message.ts, text, args)
        return {"channel": message.channel, "ts": message.ts}

    def _chat_stopStream(self, args: dict[str, Any]) -> dict[str, Any]:
        update = self._stream_update(args)
        if isinstance(update, dict):
            return update
        message, text, tasks = update
        metadata = args.get("metadata")
        if isinstance(metadata, str):
            metadata = json.loads(metadata)
        message.text += text
        message.tasks.update((task["id"], task) for task in tasks)
        message.streaming = False
        if metadata:
            message.metadata = metadata
        self._log_stream("chat.stopStream", message.ts, text, args)
        return {"channel": message.channel, "ts": message.ts, "message": message.as_api(True)}

    def _chat_postEphemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        """A message only `user` sees, in the channel (or thread); it is not kept in history."""
        if not args.get("channel") or not args.get("user") or not args.get("text"):
            return {"error": "invalid_arguments"}
        self.ephemerals.append({"channel": str(args["channel"]), "user": str(args["user"]),
                                "text": str(args["text"]),
                                "thread_ts": str(args.get("thread_ts") or "")})  # fmt: skip
        self.ephemeral_posted.set()
        return {"message_ts": self._next_ts()}

    def click(
        self, message: PostedMessage, user: str = "U1", action_id: str | None = None
    ) -> dict[str, Any]:
        """The `block_actions` payload of `user` pressing the message's button (`action_id`, or
        its only one), as Slack sends it; each call is a new press (its own `action_ts`)."""
        buttons = [b for b in message.buttons() if action_id in (None, b["action_id"])]
        assert len(buttons) == 1, f"no single button to press on {message.ts}: {buttons}"
        button = buttons[0]
        action = {"type": "button", "action_id": button["action_id"], "text": button["text"],
                  "value": button.get("value", "")}  # fmt: skip
        return self._block_actions(message, user, action)

    def feedback(
        self, message: PostedMessage, user: str = "U1", positive: bool = True
    ) -> dict[str, Any]:
        """The `block_actions` payload of `user` pressing the message's 👍 (`positive`) or 👎 of
        its `feedback_buttons`, as Slack sends it: the action names the element, its value is the
        pressed button's; each call is a new press (its own `action_ts`)."""
        [element] = message.feedback_buttons()
        pressed = element["positive_button" if positive else "negative_button"]
        action = {"type": "feedback_buttons", "action_id": element.get("action_id", ""),
                  "value": pressed["value"]}  # fmt: skip
        return self._block_actions(message, user, action)

    def _block_actions(
        self, message: PostedMessage, user: str, action: dict[str, Any]
    ) -> dict[str, Any]:
        n = next(self._actions)
        name = self.users.get(user, user)
        container = {"type": "message", "message_ts": message.ts, "channel_id": message.channel,
                     "is_ephemeral": False}  # fmt: skip
        if message.thread_ts:
            container["thread_ts"] = message.thread_ts
        return {
            "type": "block_actions", "token": "legacy", "api_app_id": "A0001",
            "user": {"id": user, "username": name.lower(), "name": name.lower(),
                     "team_id": self.team},
            "container": container, "trigger_id": f"{n}.{int(time.time())}.abc{n}",
            "team": {"id": self.team, "domain": self.team_name.lower()},
            "enterprise": None, "is_enterprise_install": False,
            "channel": {"id": message.channel, "name": "directmessage"},
            "message": message.as_api(False), "state": {"values": {}},
            "response_url": f"https://hooks.slack.invalid/actions/{self.team}/{n}/x",
            "actions": [{**action, "block_id": f"b{n}", "action_ts": f"{time.time():.6f}"}],
        }  # fmt: skip

    async def push_interactive(self, payload: dict[str, Any]) -> str:
        """Send an interaction (`click`'s payload) over the newest Socket Mode connection."""
        envelope_id = f"env-{next(self._envelopes)}"
        await self.sockets[-1].send_json(
            {"envelope_id": envelope_id, "type": "interactive",
             "accepts_response_payload": False, "payload": payload}
        )  # fmt: skip
        return envelope_id

    def _chat_delete(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self._own_message(args)
        if isinstance(message, dict):
            return message if message["error"] == "message_not_found" else {
                "error": "cant_delete_message"}  # fmt: skip
        self.messages.remove(message)
        self.deleted.append(message.ts)
        self.chat_log.append({"method": "chat.delete", "ts": message.ts, "text": ""})
        return {"channel": message.channel, "ts": message.ts}

    def _conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        """A thread, oldest first (the parent, then the replies)."""
        thread = str(args["ts"])
        found = [
            m
            for m in self.messages
            if m.channel == args["channel"] and (m.ts == thread or m.thread_ts == thread)
        ]
        return self._page(found, args, newest_first=False, default_limit=1000)

    def _conversations_history(self, args: dict[str, Any]) -> dict[str, Any]:
        """Top-level messages (thread replies only when broadcast), newest first."""
        found = [m for m in self.messages if m.channel == args["channel"] and m.top_level]
        return self._page(found, args, newest_first=True, default_limit=100)

    def _page(
        self, found: list[PostedMessage], args: dict[str, Any], newest_first: bool,
        default_limit: int,
    ) -> dict[str, Any]:  # fmt: skip
        """Slack's time range (`oldest`/`latest` exclusive unless `inclusive`) and cursor pages."""
        inclusive = str(args.get("inclusive", "")).lower() in ("1", "true")
        oldest, latest = float(args.get("oldest") or 0), float(args.get("latest") or 1e12)
        with_metadata = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        found = [
            m for m in found
            if (oldest <= float(m.ts) <= latest if inclusive else oldest < float(m.ts) < latest)
        ]  # fmt: skip
        found.sort(key=lambda m: float(m.ts), reverse=newest_first)
        start = int(args.get("cursor") or 0)
        limit = min(int(args.get("limit") or default_limit), 1000)
        page, rest = found[start : start + limit], found[start + limit :]
        out: dict[str, Any] = {
            "messages": [self._with_thread(m, m.as_api(with_metadata)) for m in page],
            "has_more": bool(rest),
        }
        if rest:
            out["response_metadata"] = {"next_cursor": str(start + limit)}
        return out

    def _with_thread(self, message: PostedMessage, out: dict[str, Any]) -> dict[str, Any]:
        """A thread's parent carries its reply count and latest reply, as in Slack's history."""
        replies = [m for m in self.messages if m.channel == message.channel
                   and m.thread_ts == message.ts and m.ts != message.ts]  # fmt: skip
        if replies:
            out.update(thread_ts=message.ts, reply_count=len(replies),
                       latest_reply=max((m.ts for m in replies), key=float))  # fmt: skip
        return out

    def _users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = str(args.get("user", ""))
        if user not in self.users:
            return {"error": "user_not_found"}
        name = self.users[user]
        return {"user": {"id": user, "name": name.lower(), "real_name": name,
                         "profile": {"display_name": name, "real_name": name}}}  # fmt: skip

    def _reactions_add(self, args: dict[str, Any]) -> dict[str, Any]:
        entry = (str(args["channel"]), str(args["timestamp"]), str(args["name"]))
        self.reaction_log.append(("add", entry[1], entry[2]))
        if entry in self.reactions:
            return {"error": "already_reacted"}
        self.reactions.add(entry)
        return {}

    def _reactions_remove(self, args: dict[str, Any]) -> dict[str, Any]:
        entry = (str(args["channel"]), str(args["timestamp"]), str(args["name"]))
        self.reaction_log.append(("remove", entry[1], entry[2]))
        if entry not in self.reactions:
            return {"error": "no_reaction"}
        self.reactions.discard(entry)
        return {}

    def _apps_connections_open(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"url": self.url.replace("http://", "ws://").replace("/api/", "/socket")}

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.sockets.append(ws)
        await ws.send_json({"type": "hello", "num_connections": 1,
                            "connection_info": {"app_id": "A0001"}})  # fmt: skip
        async for frame in ws:
            if frame.type == aiohttp.WSMsgType.TEXT:
                ack = json.loads(frame.data)
                envelope_id = ack.get("envelope_id")
                if envelope_id:
                    self.acks.append(envelope_id)
                    self.ack_payloads[envelope_id] = ack.get("payload")
                    self.ack_received.set()
        return ws

    async def push_envelope(
        self,
        event: dict[str, Any],
        retry_attempt: int = 0,
        authorizations: list[dict[str, Any]] | None = None,
    ) -> str:
        """Send an Events API envelope over the newest Socket Mode connection."""
        envelope_id = f"env-{next(self._envelopes)}"
        payload = event_callback(event, team=self.team, authorizations=authorizations)
        await self.sockets[-1].send_json(
            {
                "envelope_id": envelope_id,
                "type": "events_api",
                "accepts_response_payload": False,
                "retry_attempt": retry_attempt,
                "retry_reason": "timeout" if retry_attempt else "",
                "payload": payload,
            }
        )
        return envelope_id

    async def push_raw(self, frame: str | bytes) -> None:
        """Send one frame as it is over the newest Socket Mode connection (a broken envelope)."""
        if isinstance(frame, bytes):
            await self.sockets[-1].send_bytes(frame)
        else:
            await self.sockets[-1].send_str(frame)

    async def push_command(self, form: dict[str, str]) -> str:
        """Send a slash command (the fields `EventSender.command_form` builds) over the socket."""
        envelope_id = f"env-{next(self._envelopes)}"
        await self.sockets[-1].send_json(
            {"envelope_id": envelope_id, "type": "slash_commands",
             "accepts_response_payload": True, "payload": form}
        )  # fmt: skip
        return envelope_id

    def _assistant_thread(self, args: dict[str, Any]) -> dict[str, Any] | None:
        """The error Slack gives for a call of the assistant surface, or None."""
        if not self.status_supported:
            return {"error": "missing_scope", "needed": "assistant:write"}
        if not args.get("channel_id") or not args.get("thread_ts"):
            return {"error": "invalid_arguments"}
        return None

    def _assistant_threads_setStatus(self, args: dict[str, Any]) -> dict[str, Any]:
        refused = self._assistant_thread(args)
        if refused is not None:
            return refused
        thread = (str(args["channel_id"]), str(args["thread_ts"]))
        self.statuses.append((*thread, args["status"]))
        self._status_now[thread] = (str(args["status"]), self.clock())
        return {}

    def status_shown(self, channel: str, thread_ts: str) -> str:
        """The assistant status a person sees in the thread now ("": none)."""
        status, set_at = self._status_now.get((channel, thread_ts), ("", 0.0))
        return status if self.clock() - set_at < STATUS_TIMEOUT_SECONDS else ""

    def _message_sent(self, channel: str, thread_ts: str | None) -> None:
        """The app sent a message: the thread's status is removed, as Slack does."""
        if thread_ts is not None:
            self._status_now.pop((channel, str(thread_ts)), None)

    def _assistant_threads_setSuggestedPrompts(self, args: dict[str, Any]) -> dict[str, Any]:
        if self.view == "agent":
            if not self.status_supported:
                return {"error": "missing_scope", "needed": "assistant:write"}
            return self.agent_view.set_suggested_prompts(args)
        refused = self._assistant_thread(args)
        if refused is not None:
            return refused
        prompts = args.get("prompts")
        if isinstance(prompts, str):
            prompts = json.loads(prompts)
        if not (
            isinstance(prompts, list)
            and 1 <= len(prompts) <= 4
            and all(isinstance(p, dict) and p.get("title") and p.get("message") for p in prompts)
        ):
            return {"error": "invalid_arguments"}
        title = args.get("title")
        self.suggested.append((str(args["channel_id"]), str(args["thread_ts"]), prompts,
                               None if title is None else str(title)))  # fmt: skip
        return {}

    def _assistant_threads_setTitle(self, args: dict[str, Any]) -> dict[str, Any]:
        refused = self._assistant_thread(args)
        if refused is not None:
            return refused
        if not args.get("title"):
            return {"error": "invalid_arguments"}
        self.titles.append((str(args["channel_id"]), str(args["thread_ts"]), str(args["title"])))
        return {}

    def _agents_sessions_setStatus(self, args: dict[str, Any]) -> dict[str, Any]:
        return self.agents.set_status(args)

    def _agents_sessions_rename(self, args: dict[str, Any]) -> dict[str, Any]:
        return self.agents.rename(args)

    def stop_session(self, channel: str, thread: str, user: str = "U1") -> dict[str, Any]:
        """`user` presses Stop on the thread's agent session (shown while it is `processing`):
        Slack ends the app's streams running in the thread and builds `agent_session_stopped`,
        naming them, for a test to deliver."""
        running = [m for m in self.messages
                   if m.streaming and m.channel == channel and m.thread_ts == thread]  # fmt: skip
        event = self.agents.stop_session(channel, thread, user, tuple(m.ts for m in running))
        for message in running:
            message.streaming = False
        return event

    def _conversations_info(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = str(args.get("channel", ""))
        if channel not in self.channels:
            return {"error": "channel_not_found"}
        return {"channel": {"id": channel, **self.channels[channel]}}


class EventSender:
    """Posts signed Events API requests to a bot's endpoint, as Slack does."""

    def __init__(self, url: str, signing_secret: str, team: str = TEAM) -> None:
        self.url = url
        self.verifier = SignatureVerifier(signing_secret)
        self.team = team
        self._ids = itertools.count(1)

    async def send(
        self,
        event: dict[str, Any],
        retry_num: int | None = None,
        event_id: str | None = None,
        timestamp: int | None = None,
        signature: str | None = None,
        authorizations: list[dict[str, Any]] | None = None,
    ) -> int:
        event_id = event_id or f"Ev{next(self._ids):04d}"
        body = json.dumps(event_callback(event, event_id, self.team, authorizations))
        stamp = str(timestamp if timestamp is not None else int(time.time()))
        headers = {
            "Content-Type": "application/json",
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": signature
            or str(self.verifier.generate_signature(timestamp=stamp, body=body)),
        }
        if retry_num is not None:
            headers["X-Slack-Retry-Num"] = str(retry_num)
            headers["X-Slack-Retry-Reason"] = "http_timeout"
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.url, data=body, headers=headers) as response,
        ):
            await response.read()
            return response.status

    async def _post_form(
        self, fields: dict[str, str], retry_num: int | None = None
    ) -> tuple[int, str]:
        """A signed form-encoded request, as Slack sends interactions and slash commands (a
        `retry_num`: sent again, with Slack's retry headers); the status the bot answered and its
        body."""
        body = urlencode(fields)
        stamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": str(self.verifier.generate_signature(timestamp=stamp, body=body)),
        }
        if retry_num is not None:
            headers["X-Slack-Retry-Num"] = str(retry_num)
            headers["X-Slack-Retry-Reason"] = "http_timeout"
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.url, data=body, headers=headers) as response,
        ):
            return response.status, await response.text()

    async def interact(self, payload: dict[str, Any], retry_num: int | None = None) -> int:
        """A signed interaction request (a form with the JSON `payload`, as Slack sends a button
        press; `retry_num`: a retry of it); the status the bot answered."""
        status, _ = await self._post_form({"payload": json.dumps(payload)}, retry_num)
        return status

    def command_form(
        self, command: str, channel: str, user: str = "U1", text: str = ""
    ) -> dict[str, str]:
        """The fields Slack sends for a slash command."""
        return {
            "token": "legacy", "team_id": self.team, "team_domain": "acme", "channel_id": channel,
            "channel_name": "directmessage" if channel.startswith("D") else "general",
            "user_id": user, "user_name": "alice", "command": command, "text": text,
            "api_app_id": "A0001", "is_enterprise_install": "false",
            "response_url": "https://hooks.slack.invalid/commands/T0001/1/x",
            "trigger_id": f"trigger-{next(self._ids)}",
        }  # fmt: skip

    async def command(
        self, command: str, channel: str, user: str = "U1", text: str = ""
    ) -> tuple[int, dict[str, Any]]:
        """A signed slash-command request (form-encoded, like Slack's); the status and JSON body."""
        status, text_body = await self._post_form(self.command_form(command, channel, user, text))
        return status, json.loads(text_body) if text_body else {}


def _button_names(message: PostedMessage) -> list[str]:
    """The buttons a person sees under a message, by their labels (👍 and 👎 for feedback)."""
    names = [str(b["text"]["text"]) for b in message.buttons()]
    return names + ["👍", "👎"] * len(message.feedback_buttons())


def event_callback(
    event: dict[str, Any],
    event_id: str = "Ev0001",
    team: str = TEAM,
    authorizations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The Events API envelope around one event (with `authorizations` when given)."""
    envelope = {
        "token": "legacy",
        "team_id": team,
        "api_app_id": "A0001",
        "type": "event_callback",
        "event_id": event_id,
        "event_time": int(time.time()),
        "event": {"team": team, "event_ts": event.get("ts"), **event},
    }
    if authorizations is not None:
        envelope["authorizations"] = authorizations
    return envelope


def assistant_event(
    event_type: str, channel: str, thread_ts: str, user: str = "U1", viewing: str = ""
) -> dict[str, Any]:
    """`assistant_thread_started` / `assistant_thread_context_changed`, as Slack sends them."""
    context = {"channel_id": viewing, "team_id": TEAM, "enterprise_id": None} if viewing else {}
    return {"type": event_type,
            "assistant_thread": {"user_id": user, "context": context, "channel_id": channel,
                                 "thread_ts": thread_ts},
            "event_ts": f"{time.time():.6f}"}  # fmt: skip


def dm(ts: str, text: str, user: str = "U1", **extra: Any) -> dict[str, Any]:
    return {"type": "message", "channel": "D1", "channel_type": "im", "user": user,
            "text": text, "ts": ts, "user_profile": {"display_name": "alice"}, **extra}  # fmt: skip


def channel_message(
    ts: str, text: str, channel: str = "C1", user: str = "U1", event_type: str = "message",
    **extra: Any,
) -> dict[str, Any]:  # fmt: skip
    event = {"type": event_type, "channel": channel, "user": user, "text": text, "ts": ts, **extra}
    if event_type == "message":
        event["channel_type"] = "channel"
    return event


async def _serve(
    port: int,
    events_url: str,
    signing_secret: str,
    token: str,
    channels: list[str],
    assistant_scope: bool,
    rate_limits: bool,
    agent: bool,
    agent_view: bool = False,
) -> None:
    view = "agent" if agent_view else "assistant"
    api = FakeSlackApi(token=token, status_supported=assistant_scope, agent=agent, view=view)
    if rate_limits:
        api.enforce_rate_limits()
    await api.start(port)
    for channel in channels:  # ID:name, a channel the bot is a member of
        channel_id, _, name = channel.partition(":")
        api.channels[channel_id] = {"name": name or channel_id.lower(), "is_member": True}
    if events_url:
        api.events = EventSender(events_url, signing_secret)
    logging.getLogger("fake-slack").warning("fake Slack Web API on %s", api.url)
    try:
        await asyncio.Event().wait()
    finally:
        await api.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="A fake Slack Web API on 127.0.0.1")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--events-url", default="", help="where to send each message as an event")
    parser.add_argument("--signing-secret", default="", help="signs those events")
    parser.add_argument("--token", default="xoxb-test", help="the bot token it accepts")
    member = "ID:name of a channel the bot is a member of (repeatable)"
    parser.add_argument("--channel", action="append", default=[], help=member)
    unscoped = "the app lacks assistant:write (assistant.threads.* refused)"
    parser.add_argument("--without-assistant-scope", action="store_true", help=unscoped)
    parser.add_argument("--rate-limits", action="store_true", help="enforce Slack's rate limits")
    agent = "the app is declared an agent (agents.sessions.setStatus, /fake/stop-session)"
    parser.add_argument("--agent", action="store_true", help=agent)
    view = "the app is on the agent view (agent_view; an agent): /fake/messages-tab"
    parser.add_argument("--agent-view", action="store_true", help=view)
    args = parser.parse_args()
    logging.basicConfig(format="%(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.port, args.events_url, args.signing_secret, args.token,
                           args.channel, not args.without_assistant_scope,
                           args.rate_limits, args.agent, args.agent_view))  # fmt: skip


if __name__ == "__main__":
    main()
