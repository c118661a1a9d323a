"""Posting one reply to Discord.

Parts go out in order; the first replies to the burst's last message (Discord posts it plainly if
that message is gone; a refused reference, or a 403 for lacking Read Message History, is retried
once without it). Each part's nonce is stable, so posting a part again after a crash returns the
earlier message instead of a copy. `posted` (part index → message id) lets a retry after a
partial failure skip what is done. A failed post is one of the core's delivery errors (calls.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import discord

from adapters.discord.calls import UNKNOWN_MESSAGE, delivery_errors
from adapters.discord.feedback import FeedbackButtons
from adapters.discord.render import MESSAGE_LIMIT, nonce_for, split_message, to_discord
from adapters.markdown import cap_parts
from bot.core.events import Reply

log = logging.getLogger("burstbot.discord")


async def post_reply(
    channel: discord.abc.Messageable,
    reply: Reply,
    posted: dict[int, str],
    mentions: discord.AllowedMentions,
    max_parts: int,
    first: Callable[[str, bool], Awaitable[str]] | None,
    turn: Callable[[], Awaitable[None]],
) -> list[str]:
    """Post every part not yet in `posted` (at most `max_parts`, the last one then saying the
    reply was truncated); return the message ids of all parts. `first` shows the first part
    instead of a new post (the streamed draft this reply finishes, edited; told whether it
    carries the 👍/👎 buttons); `turn` waits for each post's turn on the channel's budget (a
    final's: ahead of drafts). An answer with `feedback` has the buttons on its last part."""
    parts = split_message(to_discord(reply.text))
    if len(parts) > max_parts:
        log.info("reply %s: %d parts, posting the first %d", reply.id, len(parts), max_parts)
        parts = cap_parts(parts, max_parts, MESSAGE_LIMIT, split_message)
    for index, text in enumerate(parts):
        if index in posted:
            continue
        reply.fence.check()  # a delivery whose claim was taken stops before its next part
        buttons = reply.feedback and index == len(parts) - 1
        if index == 0 and first is not None:
            posted[index] = await first(text, buttons)
            await reply.fence.posted(index, posted[index])
            continue
        target = reply.reply_to_message_id if index == 0 else None
        reference = reply_reference(target, reply.key.channel)
        nonce = nonce_for(reply.id, reply.key.id, index, text)
        await turn()
        view = FeedbackButtons(reply) if buttons else None
        message = await send_part(channel, text, nonce, reference, mentions, view)
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


async def send_part(
    channel: discord.abc.Messageable,
    text: str,
    nonce: str,
    reference: discord.MessageReference | None,
    mentions: discord.AllowedMentions,
    view: discord.ui.View | None = None,
) -> discord.Message:
    """One message (`view`: its buttons, e.g. a draft's Stop, an answer's 👍/👎)."""
    buttons: dict[str, Any] = {} if view is None else {"view": view}
    with delivery_errors():
        if reference is not None:
            try:
                return await channel.send(
                    text, nonce=nonce, reference=reference, allowed_mentions=mentions, **buttons
                )
            except discord.HTTPException as exc:
                if not _reference_refused(exc):
                    raise
            log.info("discord: the replied-to message is gone; posting without a reference")
        return await channel.send(text, nonce=nonce, allowed_mentions=mentions, **buttons)


def _reference_refused(exc: discord.HTTPException) -> bool:
    """The reply part was the problem: the target is gone, or replying needs Read Message History
    (a 403 then); a plain post may still work, and a second refusal is final."""
    if exc.code == UNKNOWN_MESSAGE or exc.status == 403:
        return True
    return exc.status == 400 and "message_reference" in exc.text
