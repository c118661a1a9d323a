"""Every Discord REST call goes through here: whatever raised a failure, it becomes one error of
the core's tree (bot/core/errors.py), so the same failure means the same thing on every path — a
post, an edit, a delete, a history read, a channel look-up, the log-in, a slash command.

    discord.RateLimited, HTTP 429          → RateLimited, with its retry_after (or Retry-After)
    404 Unknown Message (10008)            → MessageGone (a person deleted the message)
    403 Forbidden, other 404s, other 4xx   → PermanentDeliveryError, named by status and message
    5xx (Discord's JSON or a proxy's HTML page), 408
                                           → RetryableDeliveryError
    connection refused or reset, a timeout, any other transport failure
                                           → RetryableDeliveryError

Each becomes one line for the log: Discord's message, never a whole HTML page. discord.py itself
waits out short 429s and retries 500/502/504 a few times before it raises.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Iterator
from typing import TypeVar

import aiohttp
import discord

from bot.core import errors
from bot.core.errors import DeliveryError, FetchError, MessageGone, RateLimited

T = TypeVar("T")

FAILURES = (discord.HTTPException, discord.RateLimited, TimeoutError, aiohttp.ClientError, OSError)
"""What a REST call raises when it fails: Discord's answer, a rate limit discord.py did not wait
out, or the transport (timeouts, refused or reset connections)."""

UNKNOWN_MESSAGE = 10008
BODY_PREVIEW_CHARS = 80


@contextlib.contextmanager
def delivery_errors() -> Iterator[None]:
    """A Discord call's failures as the outbox's delivery errors."""
    try:
        yield
    except FAILURES as exc:
        raise delivery_error(exc) from exc


@contextlib.contextmanager
def fetch_errors() -> Iterator[None]:
    """A read's failures as `FetchError`: the same mapping, with its Retry-After."""
    try:
        yield
    except FAILURES as exc:
        raise FetchError.of(delivery_error(exc)) from exc


async def call(request: Awaitable[T]) -> T:
    """Await one REST call under `delivery_errors`."""
    with delivery_errors():
        return await request


def delivery_error(exc: BaseException) -> DeliveryError:
    """The one mapping (see the module docstring)."""
    if isinstance(exc, discord.RateLimited):
        return RateLimited(f"discord: rate limited for {exc.retry_after:.0f}s",
                           retry_after=exc.retry_after)  # fmt: skip
    if not isinstance(exc, discord.HTTPException):
        return errors.RetryableDeliveryError(f"discord: connection failed ({exc!r})")
    what = f"discord: {exc.status} {_described(exc)}".strip()
    if isinstance(exc, discord.NotFound) and exc.code == UNKNOWN_MESSAGE:
        return MessageGone(what)
    if isinstance(exc, discord.Forbidden | discord.NotFound):
        return errors.PermanentDeliveryError(what)
    if exc.status == 429:
        return RateLimited(what, retry_after=_retry_after(exc))
    if exc.status >= 500 or exc.status == 408:
        return errors.RetryableDeliveryError(what)
    return errors.PermanentDeliveryError(what)


def http_status(error: BaseException) -> int:
    """The HTTP status of Discord's answer behind one of our errors (0: no answer came)."""
    cause = error.__cause__
    return cause.status if isinstance(cause, discord.HTTPException) else 0


def _described(exc: discord.HTTPException) -> str:
    """Discord's message, or the first line of a body that is not Discord's JSON; an HTML page
    (a proxy's error page) is named by its HTTP reason instead of copied into the log."""
    text = exc.text.strip()
    if not text or text.startswith("<"):
        return str(getattr(exc.response, "reason", "") or "")
    return text.splitlines()[0][:BODY_PREVIEW_CHARS]


def _retry_after(exc: discord.HTTPException) -> float | None:
    headers = getattr(exc.response, "headers", None) or {}
    try:
        return float(headers.get("Retry-After", ""))
    except ValueError:
        return None
