"""The HTTP-mode endpoint: verify the signature over the raw body, then hand the request to Bolt.

Anyone on the network can reach this endpoint, so nothing parses a request before its signature
is checked (Bolt parses the body and the timestamp header first, and answers junk with a 500 and
a traceback): the body is read as bytes, then slack_sdk's `SignatureVerifier` checks Slack's v0
signature within five minutes (`verify`), behind guards for what the SDK would raise on (a
timestamp that is not a number, a body that is not UTF-8, a signature that is not ASCII). A
signed request this app cannot use (`signed_problem`) gets a 200, so Slack does not retry it;
only a store failure answers 500 (docs/slack.md lists the statuses). Each refused or ignored
request is one WARNING line naming the reason, never a traceback; that includes requests aiohttp
itself refuses as malformed HTTP (`server_log`).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.signature import Clock, SignatureVerifier

from adapters.slack.approval_cards import APPROVE_ACTION, DENY_ACTION
from adapters.slack.events import RESET_COMMAND
from adapters.slack.feedback import FEEDBACK_ACTION
from adapters.slack.inbound import list_of_objects
from adapters.slack.stop_button import STOP_ACTION

log = logging.getLogger("burstbot.slack")
BUTTONS = frozenset({STOP_ACTION, FEEDBACK_ACTION, APPROVE_ACTION, DENY_ACTION})
"""The `action_id`s of this app's buttons: a press of any other is not ours."""

MAX_BODY_BYTES = 1024 * 1024
MAX_CLOCK_SKEW_SECONDS = 300
HANDLED_EVENTS = frozenset(
    {"message", "app_mention", "assistant_thread_started", "assistant_thread_context_changed",
     "app_home_opened", "app_context_changed", "agent_session_stopped", "app_uninstalled",
     "tokens_revoked"}
)  # fmt: skip
_TIMESTAMP = re.compile(r"[0-9]{1,15}")


class _MalformedHttpInOneLine(logging.Filter):
    """aiohttp logs a request it cannot parse (a bad Content-Length, chunk size or header) with a
    traceback at ERROR: several lines a request, for anyone to trigger. One WARNING line instead;
    any other error keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            peer = re.search(r" from (\S+)", record.getMessage())
            detail = (error.message or "").strip().splitlines() or [type(error).__name__]
            record.msg = "slack: refused a malformed HTTP request from %s: %s (HTTP %d)"
            record.args = (peer.group(1) if peer else "?", detail[0].rstrip(":"), error.code)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info, record.exc_text = None, None
        return True


server_log = logging.getLogger("burstbot.slack.http")
"""The logger aiohttp's server uses for the endpoint (see `_MalformedHttpInOneLine`)."""
server_log.addFilter(_MalformedHttpInOneLine())


class Rejection(NamedTuple):
    status: int
    reason: str


class _At(Clock):
    """The SDK verifier's clock, fixed at the request's arrival."""

    def __init__(self, now: float) -> None:
        self._now = now

    def now(self) -> float:
        return self._now


def verify(
    headers: Mapping[str, str], body: bytes, signing_secret: str, now: float
) -> Rejection | None:
    """Why an unsigned or wrongly signed request is refused (None: Slack signed it)."""
    timestamp = headers.get("X-Slack-Request-Timestamp")
    signature = headers.get("X-Slack-Signature")
    if timestamp is None or signature is None:
        return Rejection(401, "no signature headers")
    if not _TIMESTAMP.fullmatch(timestamp):
        return Rejection(400, "malformed timestamp header")
    if not signature.isascii():
        return Rejection(401, "bad signature")
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:  # the SDK decodes the body before hashing it
        return Rejection(400, "body is not UTF-8")
    if abs(now - int(timestamp)) > MAX_CLOCK_SKEW_SECONDS:
        return Rejection(401, "timestamp too old or in the future")
    verifier = SignatureVerifier(signing_secret, clock=_At(now))
    if not verifier.is_valid(body=body, timestamp=timestamp, signature=signature):
        return Rejection(401, "bad signature")
    return None


def signed_problem(body: Any) -> str | None:
    """Why a signed body, as Bolt parsed it, is not one this app can handle (None: dispatch)."""
    if not isinstance(body, dict):
        return "body is not a JSON object"
    kind = body.get("type")
    if kind == "url_verification":
        return None if isinstance(body.get("challenge"), str) else "URL check without a challenge"
    if "ssl_check" in body:
        return None
    if "command" in body:
        command = body.get("command")
        return None if command == RESET_COMMAND else "a slash command this app does not have"
    if kind == "block_actions":
        return _actions_problem(body)
    if kind != "event_callback":
        return "neither an event, an action, a slash command nor a URL check"
    for field in ("team_id", "api_app_id", "event_id", "enterprise_id"):
        if body.get(field) is not None and not isinstance(body[field], str):
            return f"{field} is not a string"
    if not list_of_objects(body.get("authorizations")):
        return "authorizations is not a list of objects"
    event = body.get("event")
    if not isinstance(event, dict):
        return "event is not an object"
    if event.get("type") not in HANDLED_EVENTS:
        return "an event type this app does not subscribe to"
    return None


def _actions_problem(body: dict[str, Any]) -> str | None:
    """Why a signed `block_actions` payload is not a press of a button this app has."""
    for field in ("team", "user", "container"):
        if not isinstance(body.get(field), dict):
            return f"{field} is not an object"
    actions = body.get("actions")
    if not (isinstance(actions, list) and actions and list_of_objects(actions)):
        return "actions is not a list of objects"
    if not any(action.get("action_id") in BUTTONS for action in actions):
        return "an action this app does not have"
    return None


def endpoint(
    bolt: AsyncApp, signing_secret: str, accepting: Callable[[], bool]
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        if not accepting():  # stopping: Slack retries the event elsewhere or later
            return web.Response(status=503, text="shutting down")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _refused(request, Rejection(413, "body too large"))
        rejection = verify(request.headers, body, signing_secret, time.time())
        if rejection is not None:
            return _refused(request, rejection)
        try:
            raw = body.decode("utf-8")
        except UnicodeDecodeError:
            return _ignored("body is not UTF-8")
        try:  # Bolt parses the body (JSON or a form) and reads its context here
            bolt_request = AsyncBoltRequest(
                body=raw, query=request.query_string, headers=dict(request.headers)
            )
        except (ValueError, RecursionError):
            return _ignored("body is not valid JSON")
        except Exception as exc:
            return _ignored(f"Bolt could not read it ({type(exc).__name__})")
        problem = signed_problem(bolt_request.body)
        if problem is not None:
            return _ignored(problem)
        try:
            return await to_aiohttp_response(await bolt.async_dispatch(bolt_request))
        except Exception as exc:  # a payload shape Bolt trips over; retrying cannot help
            return _ignored(f"Bolt could not read it ({type(exc).__name__})")

    return handle


def oauth_page(
    handle: Callable[[AsyncBoltRequest], Awaitable[BoltResponse]],
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A GET of the OAuth flow (the install page, the redirect back from Slack) for Bolt: the
    query and the headers (the state cookie) are all it reads."""

    async def page(request: web.Request) -> web.StreamResponse:
        bolt_request = AsyncBoltRequest(
            body="", query=request.query_string, headers=dict(request.headers)
        )
        return await to_aiohttp_response(await handle(bolt_request))

    return page


def _refused(request: web.Request, rejection: Rejection) -> web.Response:
    log.warning("slack: refused a request from %s: %s (HTTP %d)", request.remote,
                rejection.reason, rejection.status)  # fmt: skip
    return web.Response(status=rejection.status, text=rejection.reason)


def _ignored(problem: str) -> web.Response:
    log.warning("slack: ignored a signed request: %s", problem)
    return web.Response(status=200)
