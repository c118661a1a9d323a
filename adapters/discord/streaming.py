"""Discord drafts (the core's `DraftSurface`): one message per burst, sent once, then edited.

The draft is sent with its key as nonce (discord.py sends `enforce_nonce`), so sending it again
after a lost response returns the message Discord already made instead of a copy — within
Discord's nonce window of a few minutes, which a lease takeover falls well inside. Edits are
PATCHes of that message; discord.py waits out 429s by their rate-limit headers itself, and the
engine spaces edits by `streaming.interval_seconds` (Discord allows about five edits per five
seconds in a channel). Partial text is settled (`settle_partial`) and rendered like a reply, and
a draft shows at most the reply's first part: the reply that finishes it posts the rest.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import discord

from adapters.discord.posting import as_delivery_errors, reply_reference, send_part
from adapters.discord.render import split_message, to_discord
from adapters.markdown import settle_partial
from bot.core.events import ConversationKey, Draft, Reply


def draft_text(text: str) -> str:
    """What a draft shows of the text so far: rendered whole, one message's worth."""
    return split_message(to_discord(settle_partial(text)))[0] or "…"


class DiscordDrafts:
    def __init__(
        self,
        channel_for: Callable[[ConversationKey], discord.abc.Messageable],
        partial_channel: Callable[[ConversationKey], discord.PartialMessageable],
        mentions: discord.AllowedMentions,
    ) -> None:
        self.channel_for = channel_for
        self.partial_channel = partial_channel
        self.mentions = mentions

    async def post_draft(
        self, key: ConversationKey, draft_key: str, text: str, reply_to: str | None, lost: bool
    ) -> str:
        """`lost` needs nothing more: the same nonce finds the message an earlier send made."""
        reference = reply_reference(reply_to, key.channel)
        channel = self.channel_for(key)
        message = await send_part(channel, draft_text(text), draft_key, reference, self.mentions)
        return str(message.id)

    async def edit_draft(self, key: ConversationKey, message_id: str, text: str) -> None:
        await self._edit(key, message_id, draft_text(text))

    async def delete_draft(self, key: ConversationKey, draft: Draft) -> None:
        message_id = draft.message_id or await self.post_draft(key, draft.key, "…", None, True)
        message = self.partial_channel(key).get_partial_message(int(message_id))
        with as_delivery_errors(), contextlib.suppress(discord.NotFound):  # gone already: fine
            await message.delete()

    async def finish(self, reply: Reply, text: str) -> str:
        """The reply's first part, shown by editing the draft it finishes (`post_reply`'s
        `first`): found by its nonce if its id was lost, sent first if it never landed."""
        assert reply.draft is not None
        message_id = reply.draft.message_id or await self.post_draft(
            reply.key, reply.draft.key, text, reply.reply_to_message_id, lost=True
        )
        await self._edit(reply.key, message_id, text)
        return message_id

    async def _edit(self, key: ConversationKey, message_id: str, content: str) -> None:
        message = self.partial_channel(key).get_partial_message(int(message_id))
        with as_delivery_errors():
            await message.edit(content=content, allowed_mentions=self.mentions)
