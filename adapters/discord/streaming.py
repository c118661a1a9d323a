"""Discord drafts (the core's `DraftSurface`): one message per burst, sent once, then edited.

The draft is sent with its key as nonce (discord.py sends `enforce_nonce`), so sending it again
after a lost response returns the message Discord already made instead of a copy — within
Discord's nonce window of a few minutes (`nonce_window`, kept below it). Past the window the draft
is looked up in the channel's history from its creation: our message answering the same message.
Every post and edit takes a token of the channel's budget (`bot/core/pacing.py`, the rules in
docs/streaming-limits.md): a reply's posts and final edit ahead of everything, a draft call only
if a token is spare. A draft shows at most the reply's first part, settled and rendered like a
reply: the reply that finishes it posts the rest. A draft carries the Stop button (`stop.py`)
until the reply's final edit removes it (that edit is sent even when the text is the same), and
puts the answer's 👍/👎 buttons in its place where that part is its last (`feedback.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import discord

from adapters.discord.calls import call, delivery_errors, http_status
from adapters.discord.feedback import FeedbackButtons
from adapters.discord.posting import reply_reference, send_part
from adapters.discord.render import nonce_for, split_message, to_discord
from adapters.discord.stop import StopButton
from adapters.markdown import settle_partial
from adapters.showing import Showing, paced_turn
from bot.core.errors import DeliveryError, MessageGone, PermanentDeliveryError, RateLimited
from bot.core.events import ConversationKey, Draft, Reply
from bot.core.frontend import PacedDrafts
from bot.core.pacing import Pacer

log = logging.getLogger("burstbot.discord")


MESSAGES = "messages"  # the pacer's bucket: posts and edits, per channel
WITH_STOP: dict[str, Any] = {"buttons": "stop"}  # what `showing` notes: a draft's buttons
NO_BUTTONS: dict[str, Any] = {"buttons": "none"}  # after the final edit
WITH_FEEDBACK: dict[str, Any] = {"buttons": "feedback"}  # an answer's last part: 👍/👎
CLOCK_MARGIN = 60.0  # seconds a history look-up starts before a draft's creation
LOOKUP_LIMIT = 100


def draft_text(text: str) -> str:
    """What a draft shows of the text so far: rendered whole, one message's worth."""
    return split_message(to_discord(settle_partial(text)))[0] or "…"


@dataclass(eq=False, repr=False)
class DiscordDrafts(PacedDrafts):
    channel_for: Callable[[ConversationKey], discord.abc.Messageable]
    partial_channel: Callable[[ConversationKey], discord.PartialMessageable]
    mentions: discord.AllowedMentions
    bot_id: Callable[[], int | None]
    nonce_window: float
    pacer: Pacer
    showing: Showing = field(default_factory=Showing, init=False)
    """What each message we sent or edited shows now."""

    async def draft_turn(self, key: ConversationKey, posting: bool) -> bool:
        """Posts and edits on the channel's one budget (a reply posted whole: one write instead
        of two or more)."""
        budget = (MESSAGES, key.channel)
        return paced_turn(self.pacer, posting, budget, budget)

    async def final_turn(self, key: ConversationKey) -> None:
        """A reply's post's turn on the channel's budget, ahead of every draft."""
        await self.pacer.take(MESSAGES, key.channel)

    async def post_draft(self, key: ConversationKey, draft: Draft, text: str) -> str:
        reference = reply_reference(draft.reply_to, key.channel)
        channel, shown, stop = self.channel_for(key), draft_text(text), StopButton(key, draft.key)
        message = await send_part(channel, shown, draft.key, reference, self.mentions, stop)
        self.showing.note(str(message.id), shown, WITH_STOP, message.content)
        return str(message.id)

    async def find_draft(self, key: ConversationKey, draft: Draft) -> str | None:
        """Past the nonce window: our message answering the draft's `reply_to`, made after its
        creation (history does not show nonces)."""
        me, target = self.bot_id(), draft.reply_to
        if me is None or target is None:
            return None
        since = max(0.0, draft.created_at - CLOCK_MARGIN)
        after = discord.Object(discord.utils.time_snowflake(datetime.fromtimestamp(since, UTC)))
        channel = self.partial_channel(key)
        with delivery_errors():
            async for message in channel.history(limit=LOOKUP_LIMIT, after=after):
                reference = message.reference
                answers = reference is not None and str(reference.message_id) == target
                if message.author.id == me and answers:
                    return str(message.id)
        return None

    async def edit_draft(self, key: ConversationKey, message_id: str, text: str) -> None:
        """The stream took this edit's token (`draft_turn`): given back if the edit would
        change nothing."""
        if not await self._edit(key, message_id, draft_text(text)):
            self.pacer.refund(MESSAGES, key.channel)

    async def delete_draft(self, key: ConversationKey, message_id: str) -> None:
        message = self.partial_channel(key).get_partial_message(int(message_id))
        try:
            await call(message.delete())
        except PermanentDeliveryError as exc:
            if http_status(exc) != 404:  # gone already (the message or its channel): fine
                raise
        self.showing.forget(message_id)
        self.pacer.settle(MESSAGES, key.channel)  # a deleted draft owes no final edit

    async def finish(self, reply: Reply, text: str, buttons: bool = False) -> str:
        """The reply's first part, shown by editing the draft it finishes (`post_reply`'s
        `first`; sent first if the outbox found it never landed), then read back: a late edit of
        a generation that lost its lease may have overwritten it. A draft a person deleted is
        replaced by a fresh post of the part (the reply's own nonce). The Stop button goes; with
        `buttons` (the answer's last part) the 👍/👎 buttons come (feedback.py)."""
        assert reply.draft is not None
        draft = reply.draft
        feedback = FeedbackButtons(reply) if buttons else None
        shows = WITH_FEEDBACK if buttons else NO_BUTTONS
        if draft.message_id is None:
            await self.final_turn(reply.key)
        message_id = draft.message_id or await self.post_draft(reply.key, draft, text)
        try:
            if self.showing.unchanged(message_id, text, shows) is None:
                await self.final_turn(reply.key)
                await self._edit(reply.key, message_id, text, final=True, feedback=feedback)
            self.pacer.settle(MESSAGES, reply.key.channel)  # the final edit is made: nothing owed
            if await self._shows(reply.key, message_id) not in (None, text):
                log.warning("reply %s: a stale draft edit landed after the final text; restored",
                            reply.id)  # fmt: skip
                self.showing.forget(message_id)  # it shows something else: edit it
                await self.final_turn(reply.key)
                await self._edit(reply.key, message_id, text, final=True, feedback=feedback)
        except MessageGone:
            log.info("reply %s: its draft was deleted; posting the reply anew", reply.id)
            reference = reply_reference(reply.reply_to_message_id, reply.key.channel)
            nonce = nonce_for(reply.id, reply.key.id, 0, text)
            channel = self.channel_for(reply.key)
            sent = await send_part(channel, text, nonce, reference, self.mentions, feedback)
            return str(sent.id)
        return message_id

    async def _edit(
        self,
        key: ConversationKey,
        message_id: str,
        content: str,
        final: bool = False,
        feedback: discord.ui.View | None = None,
    ) -> bool:
        """Edit one message of ours; False (nothing sent) when it shows `content` already (and,
        for the `final` edit, its buttons: the final edit removes the Stop button, and puts the
        answer's `feedback` buttons in its place)."""
        buttons = (NO_BUTTONS if feedback is None else WITH_FEEDBACK) if final else None
        if self.showing.unchanged(message_id, content, buttons) is not None:
            return False
        message = self.partial_channel(key).get_partial_message(int(message_id))
        view: dict[str, Any] = {"view": feedback} if final else {}  # left out: the buttons stay
        try:
            edited = await call(
                message.edit(content=content, allowed_mentions=self.mentions, **view)
            )
        except RateLimited as exc:
            self.pacer.hold(MESSAGES, key.channel, exc.retry_after)  # for everyone there
            raise
        except MessageGone:
            self.showing.forget(message_id)
            self.pacer.settle(MESSAGES, key.channel)  # a deleted draft owes no final edit
            raise
        self.showing.note(message_id, content, buttons, edited.content)
        return True

    async def _shows(self, key: ConversationKey, message_id: str) -> str | None:
        """The text a message of ours shows now (None when it cannot be read back). A message
        that is gone raises `MessageGone`: what it was to show must be posted anew."""
        try:
            message = await call(self.partial_channel(key).fetch_message(int(message_id)))
        except MessageGone:
            raise
        except DeliveryError as exc:
            log.info("message %s: not read back (%s)", message_id, exc)
            return None
        return message.content
