"""Slack drafts (the core's `DraftSurface`): `chat.postMessage` once, then `chat.update`.

The draft is posted with message `metadata` naming its key (as reply parts name their reply), so a
post whose response was lost is found by reading the conversation back before posting again. The
engine spaces updates by `streaming.interval_seconds`; a 429 becomes `RetryableDeliveryError`
with the Retry-After, which the stream waits out. The reply that finishes a draft updates it to
its first part and re-labels its metadata with the reply's id, so a re-delivery of that reply
finds part 0 like any posted part. Partial text is settled (`settle_partial`) and rendered like a
reply; a draft shows at most the reply's first part.

`chat.update` is the path every workspace supports (threads, channels, DMs); Slack's native
`chat.startStream` is not used yet.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError

from adapters.markdown import settle_partial
from adapters.slack.inbound import split_message_id
from adapters.slack.mrkdwn import split_mrkdwn, to_mrkdwn
from adapters.slack.outbound import Outbound, delivery_error, part_metadata, slack_error_code
from bot.core.events import ConversationKey, Draft, Reply

GONE = frozenset({"message_not_found", "cant_delete_message"})


class SlackDrafts:
    def __init__(self, outbound: Outbound) -> None:
        self.outbound = outbound
        self.client = outbound.client

    def draft_text(self, text: str) -> str:
        """What a draft shows of the text so far: rendered whole, one part's worth."""
        parts = split_mrkdwn(to_mrkdwn(settle_partial(text)), self.outbound.part_chars)
        return parts[0] if parts and parts[0].strip() else "…"

    async def post_draft(
        self, key: ConversationKey, draft_key: str, text: str, reply_to: str | None, lost: bool
    ) -> str:
        found = await self._find(key, draft_key, reply_to) if lost else None
        if found is not None:
            return found
        metadata = part_metadata(draft_key, 0, key)
        return await self.outbound.post(key, self.draft_text(text), metadata, f"draft {draft_key}")

    async def edit_draft(self, key: ConversationKey, message_id: str, text: str) -> None:
        await self._update(message_id, self.draft_text(text))

    async def delete_draft(self, key: ConversationKey, draft: Draft) -> None:
        message_id = draft.message_id or await self._find(key, draft.key, None)
        if message_id is None:
            return
        channel, ts = split_message_id(message_id)
        try:
            await self.client.chat_delete(channel=channel, ts=ts)
        except SlackApiError as exc:
            if slack_error_code(exc) not in GONE:
                raise delivery_error(exc, f"draft {draft.key}: delete") from exc
        except (TimeoutError, SlackClientError, aiohttp.ClientError) as exc:
            raise delivery_error(exc, f"draft {draft.key}: delete") from exc

    async def finish(self, reply: Reply, text: str) -> str:
        """The reply's first part, shown by updating the draft it finishes (found by its key if
        its id was lost, posted first if it never landed)."""
        assert reply.draft is not None
        draft = reply.draft
        message_id = draft.message_id or await self.post_draft(
            reply.key, draft.key, text, reply.reply_to_message_id, lost=True
        )
        await self._update(message_id, text, part_metadata(reply.id, 0, reply.key))
        return message_id

    async def _update(
        self, message_id: str, text: str, metadata: dict[str, Any] | None = None
    ) -> None:
        channel, ts = split_message_id(message_id)
        extra: dict[str, Any] = {} if metadata is None else {"metadata": metadata}
        try:
            await self.client.chat_update(channel=channel, ts=ts, text=text, **extra)
        except (TimeoutError, SlackClientError, aiohttp.ClientError) as exc:
            raise delivery_error(exc, f"message {message_id}: update") from exc

    async def _find(self, key: ConversationKey, draft_key: str, reply_to: str | None) -> str | None:
        """The draft's message, if a post of it landed: read back by its metadata."""
        probe = Reply(draft_key, key, "", 0, reply_to_message_id=reply_to, attempt=2)
        return (await self.outbound.posted_parts(probe)).get(0)
