"""Posting one reply to Discord, and mapping discord.py's errors into ours.

Parts go out in order; the first replies to the burst's last message (Discord posts it plainly if
that message is gone; a refused reference, or a 403 for lacking Read Message History, is retried
once without it). Each part's
nonce is stable, so posting a part again after a crash returns the earlier message instead of a
copy. `posted` (part index → message id) lets a retry after a partial failure skip what is done.

    RateLimited, 429                      → RetryableDeliveryError (retry_after when known)
    5xx (JSON or a proxy's HTML page), 408,
    connection errors, timeouts           → RetryableDeliveryError
    Forbidden, NotFound, other 4xx        → PermanentDeliveryError

Each becomes one line for the log: Discord's message, never a whole HTML page.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator

import aiohttp
import discord

from adapters.discord.render import MESSAGE_LIMIT, nonce_for, split_message, to_discord
from adapters.markdown import cap_parts
from bot.core.errors import DeliveryError, PermanentDeliveryError, RetryableDeliveryError
from bot.core.events import Reply

log = logging.getLogger("burstbot.discord")

UNKNOWN_MESSAGE = 10008
BODY_PREVIEW_CHARS = 80


async def post_reply(
    channel: discord.abc.Messageable,
    reply: Reply,
    posted: dict[int, str],
    mentions: discord.AllowedMentions,
    max_parts: int = 10,
    first: Callable[[str], Awaitable[str]] | None = None,
    turn: Callable[[], Awaitable[None]] | None = None,
) -> list[str]:
    """Post every part not yet in `posted` (at most `max_parts`, the last one then saying the
    reply was truncated); return the message ids of all parts. `first` shows the first part
    instead of a new post (the streamed draft this reply finishes, edited); `turn` waits for
    each post's turn on the channel's budget (a final's: ahead of drafts)."""
    parts = split_message(to_discord(reply.text))
    if len(parts) > max_parts:
        log.info("reply %s: %d parts, posting the first %d", reply.id, len(parts), max_parts)
        parts = cap_parts(parts, max_parts, MESSAGE_LIMIT, split_message)
    for index, text in enumerate(parts):
        if index in posted:
            continue
        reply.fence.check()  # a delivery whose claim was taken stops before its next part
        if index == 0 and first is not None:
            posted[index] = await first(text)
            await reply.fence.posted(index, posted[index])
            continue
        target = reply.reply_to_message_id if index == 0 else None
        reference = reply_reference(target, reply.key.channel)
        nonce = nonce_for(reply.id, reply.key.id, index, text)
        if turn is not None:
            await turn()
        message = await send_part(channel, text, nonce, reference, mentions)
        posted[index] = str(message.id)
        await reply.fence.posted(index, posted[index])
    return [posted[index] for index in range(len(parts))]


def reply_reference(target: str | None, channel_id: str) -> discord.MessageReference | None:
    """A reference to the message a reply answers (none for an id that is not Discord's)."""
    if target is None or not target.isdigit():
        return None
    return discord.MessageReference(
        message_id=int(target), channel_id=int(channel_id), fail_if_not_exists=False
    )


@contextlib.contextmanager
def as_delivery_errors() -> Iterator[None]:
    """A Discord call's failures as the outbox's delivery errors."""
    try:
        yield
    except (discord.HTTPException, discord.RateLimited) as exc:
        raise delivery_error(exc) from exc
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raise RetryableDeliveryError(f"discord: connection failed ({exc!r})") from exc


async def send_part(
    channel: discord.abc.Messageable,
    text: str,
    nonce: str,
    reference: discord.MessageReference | None,
    mentions: discord.AllowedMentions,
) -> discord.Message:
    try:
        if reference is None:
            return await channel.send(text, nonce=nonce, allowed_mentions=mentions)
        return await channel.send(text, nonce=nonce, reference=reference, allowed_mentions=mentions)
    except discord.HTTPException as exc:
        if reference is not None and _reference_refused(exc):
            log.info("discord: the replied-to message is gone; posting without a reference")
            return await send_part(channel, text, nonce, None, mentions)
        raise delivery_error(exc) from exc
    except discord.RateLimited as exc:
        raise delivery_error(exc) from exc
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raise RetryableDeliveryError(f"discord: connection failed ({exc!r})") from exc


def _reference_refused(exc: discord.HTTPException) -> bool:
    """The reply part was the problem: the target is gone, or replying needs Read Message History
    (a 403 then); a plain post may still work, and a second refusal is final."""
    if exc.code == UNKNOWN_MESSAGE or exc.status == 403:
        return True
    return exc.status == 400 and "message_reference" in exc.text


def delivery_error(exc: discord.HTTPException | discord.RateLimited) -> DeliveryError:
    if isinstance(exc, discord.RateLimited):
        return RetryableDeliveryError(f"discord: rate limited for {exc.retry_after:.0f}s",
                                      retry_after=exc.retry_after)  # fmt: skip
    what = f"discord: {exc.status} {_described(exc)}".strip()
    if isinstance(exc, discord.Forbidden | discord.NotFound):
        return PermanentDeliveryError(what)
    if exc.status == 429:
        return RetryableDeliveryError(what, retry_after=_retry_after(exc))
    if exc.status >= 500 or exc.status == 408:
        return RetryableDeliveryError(what)
    return PermanentDeliveryError(what)


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
