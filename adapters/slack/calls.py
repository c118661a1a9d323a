"""Every Slack Web API call goes through `call` (or `read`, `check_token`): whatever raised a
failure, it becomes one error of the core's tree (bot/core/errors.py), so the same failure means
the same thing on every path — a post, an update, a delete, a stream, a look-up, a start-up check.

    Slack's JSON `error`, or the HTTP status:
      HTTP 429 or `ratelimited`          → RateLimited, with the `Retry-After` header's seconds
      `message_not_found`                → MessageGone (a person deleted the message)
      a permanent code (`PERMANENT`)     → PermanentDeliveryError, named by the code
      any other code, any 5xx            → RetryableDeliveryError
    a body that is not Slack's JSON      → RetryableDeliveryError, "HTTP 503: <its first words>"
      (a load balancer's or proxy's page)
    connection refused or reset, a timeout, any other transport failure
                                         → RetryableDeliveryError

Only an error code in Slack's own JSON can be permanent: anything else is an outage, retried (G13).
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError

from bot.core.errors import (
    BurstbotError,
    ConfigError,
    DeliveryError,
    FetchError,
    MessageGone,
    PermanentDeliveryError,
    RateLimited,
    RetryableDeliveryError,
)

T = TypeVar("T")

TRANSPORT = (TimeoutError, SlackClientError, aiohttp.ClientError, OSError)
"""What the client raises: Slack's answer (SlackApiError, a SlackClientError), timeouts, refused
or reset connections, a request it could not make."""

BODY_PREVIEW_CHARS = 80
GONE = "message_not_found"
PERMANENT = frozenset(
    {
        "channel_not_found", "not_in_channel", "is_archived", "thread_not_found",
        "msg_too_long", "no_text", "invalid_metadata_format", "invalid_metadata_schema",
        "restricted_action", "restricted_action_read_only_channel",
        "restricted_action_thread_only_channel", "restricted_action_non_threadable_channel",
        "cannot_reply_to_message", "team_access_not_granted", "invalid_auth", "not_authed",
        "account_inactive", "token_revoked", "token_expired", "no_permission", "missing_scope",
        "not_allowed_token_type", "ekm_access_denied", "invalid_blocks", "as_user_not_supported",
        "message_limit_exceeded", "duplicate_message_not_found", "user_is_restricted",
    }
)  # fmt: skip
"""Codes that mean the call can never succeed as made: retrying cannot help."""


async def call(what: str, request: Awaitable[T]) -> T:
    """Await one Web API call; any failure is raised as the core's `DeliveryError` kind."""
    try:
        return await request
    except TRANSPORT as exc:
        raise delivery_error(exc, what) from exc


async def read(what: str, request: Awaitable[T]) -> T:
    """A read (history, a look-up): the same mapping, as a `FetchError`."""
    try:
        return await call(what, request)
    except DeliveryError as exc:
        raise FetchError.of(exc) from exc


async def check_token(request: Awaitable[T], what: str, refused: str, unreachable: str) -> T:
    """A start-up check of a token (`auth.test`, `apps.connections.open`): Slack refusing it is
    the `ConfigError` `refused` with Slack's code; an outage or a rate limit says nothing of the
    token: the `BurstbotError` `unreachable`, with what happened."""
    try:
        return await call(what, request)
    except PermanentDeliveryError as exc:
        raise ConfigError(f"{refused} ({slack_code(exc)})") from exc
    except DeliveryError as exc:
        raise BurstbotError(f"slack: {unreachable} ({exc})") from exc


def delivery_error(exc: BaseException, what: str) -> DeliveryError:
    """The one mapping (see the module docstring)."""
    if not isinstance(exc, SlackApiError):
        return RetryableDeliveryError(f"{what}: {type(exc).__name__}: {exc}")
    status, code = http_status(exc), slack_error_code(exc)
    if status == 429 or code == "ratelimited":
        return RateLimited(f"{what}: rate limited", retry_after=_retry_after(exc))
    if code == GONE:
        return MessageGone(f"{what}: {code}")
    if code in PERMANENT:
        return PermanentDeliveryError(f"{what}: {code}")
    return RetryableDeliveryError(f"{what}: {code or _not_slack(exc, status)}")


def slack_code(error: BaseException) -> str:
    """Slack's `error` code behind one of our errors ("" when Slack gave none)."""
    answer = _answer(error)
    return "" if answer is None else slack_error_code(answer)


def slack_status(error: BaseException) -> int:
    """The HTTP status behind one of our errors (0 when no answer came)."""
    answer = _answer(error)
    return 0 if answer is None else http_status(answer)


def _answer(error: BaseException) -> SlackApiError | None:
    """Slack's answer that one of our errors was raised from, if any."""
    cause = error.__cause__
    while cause is not None and not isinstance(cause, SlackApiError):
        cause = cause.__cause__
    return cause


def slack_error_code(exc: SlackApiError) -> str:
    """The `error` of Slack's JSON answer; "" when the body was something else (a proxy's page,
    or unreadable: slack_sdk then hands over the raw aiohttp response)."""
    data = getattr(exc.response, "data", None)
    return str(data.get("error") or "") if isinstance(data, dict) else ""


def http_status(exc: SlackApiError) -> int:
    status = getattr(exc.response, "status_code", None) or getattr(exc.response, "status", 0)
    return status if isinstance(status, int) else 0


def _not_slack(exc: SlackApiError, status: int) -> str:
    """`HTTP 503: upstream connect error…`: the status and the first words of a foreign body."""
    data = getattr(exc.response, "data", None)
    body = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    first_line = body.strip().splitlines()[0][:BODY_PREVIEW_CHARS] if isinstance(body, str) else ""
    first_line = "" if first_line.startswith("<") else first_line  # an HTML page: its status
    return f"HTTP {status}: {first_line}" if first_line else f"HTTP {status}"


def _retry_after(exc: SlackApiError) -> float | None:
    headers: Mapping[str, Any] = getattr(exc.response, "headers", None) or {}
    for name, value in headers.items():
        if name.lower() == "retry-after":
            raw = value[0] if isinstance(value, list) else value
            try:
                return max(0.0, float(raw))
            except (TypeError, ValueError):
                return None
    return None
