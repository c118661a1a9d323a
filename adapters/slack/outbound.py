"""Neutral replies → Slack posts, idempotently; and the thinking indicator.

Every part of a reply is posted with message `metadata` naming the reply id and the part number.
A first attempt posts straight away; any later attempt (a crash or a lost response between
posting and recording) first reads the conversation with `include_all_metadata` and skips the
parts already there. The Web API client has no retry handlers at all: a retry it made on its own
after a dropped connection could post a part twice behind that check's back. A 429 holds that
method's budget on the workspace's pacer for every conversation (docs/streaming-limits.md), and
the engine's next attempt, which runs the check, waits its Retry-After.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from slack_sdk.web.async_client import AsyncWebClient

from adapters.markdown import cap_parts
from adapters.slack.calls import call, slack_code, slack_status
from adapters.slack.feedback import feedback_blocks
from adapters.slack.inbound import Identity, split_message_id
from adapters.slack.mrkdwn import MAX_PART_CHARS, split_mrkdwn, to_mrkdwn
from bot.config import SlackConfig
from bot.core.clock import Clock, SystemClock
from bot.core.errors import DeliveryError, RateLimited
from bot.core.events import ConversationKey, Reply
from bot.core.pacing import Limit, Pacer

log = logging.getLogger("burstbot.slack")

METADATA_EVENT_TYPE = "burstbot_reply"
POST = "chat.postMessage"  # the pacer's buckets: per channel
UPDATE = "chat.update"  # per workspace
UPDATE_BURST = 20.0  # Tier 3 allows bursts: the pacer starts here, a 429 halves it
SESSION_STATUS = "agents.sessions.setStatus"  # per workspace
SESSION_STATUS_PER_MINUTE = 50.0  # Tier 3, with its bursts, like chat.update
LOOKUP_PAGE = 200
LOOKUP_MAX_PAGES = 10
T = TypeVar("T")
CLOCK_MARGIN = 60.0  # seconds a look-up starts before a draft's creation (our clock vs Slack's)

STATUS_UNAVAILABLE = frozenset(
    {"missing_scope", "not_allowed_token_type", "unknown_method", "method_deprecated",
     "no_permission", "invalid_auth", "feature_not_enabled"}
)  # fmt: skip


def parts_since(reply: Reply) -> str | None:
    """Where a re-delivery looks for a reply's parts: from the message it answers, or from its
    draft's creation where that is older (a draft reused across a supersede was posted before
    the burst's last message, and once made part 0 only the reply's id labels it)."""
    if reply.draft is None:
        return None
    answered = split_message_id(reply.reply_to_message_id or "")[1]
    since = max(0.0, reply.draft.created_at - CLOCK_MARGIN)
    if reply.draft.message_id is not None:
        since = min(since, float(split_message_id(reply.draft.message_id)[1] or since))
    if answered and float(answered) <= since:
        return None
    return f"{since:.6f}"


async def conversation(
    client: AsyncWebClient,
    what: str,
    channel: str,
    thread: str,
    max_pages: int = LOOKUP_MAX_PAGES,
    **args: Any,
) -> AsyncIterator[Mapping[str, Any]]:
    """The messages of a thread (`conversations.replies`, oldest first) or of a channel's top
    level (`conversations.history`, newest first), page by page (`cursor`) up to `max_pages`
    pages, with their metadata; `args` narrow the read (`oldest`, ...)."""
    read = client.conversations_replies if thread else client.conversations_history
    args = {"channel": channel, "limit": LOOKUP_PAGE, "include_all_metadata": True, **args}
    if thread:
        args["ts"] = thread
    cursor = None
    for _ in range(max_pages):
        page = await call(what, read(cursor=cursor, **args))
        for message in page.get("messages") or []:
            yield message
        cursor = (page.get("response_metadata") or {}).get("next_cursor")
        if not cursor:
            return


def slack_pacer(config: SlackConfig, clock: Clock) -> Pacer:
    """The workspace's budget: `chat.update` per workspace (Tier 3, with Slack's burst),
    `chat.postMessage` per channel (about one a second), an agent session's status per workspace
    (Tier 3). A 429 shrinks any of them (pacing.py)."""
    updates = Limit(config.updates_per_minute, burst=UPDATE_BURST)
    statuses = Limit(SESSION_STATUS_PER_MINUTE, burst=UPDATE_BURST)
    limits = {UPDATE: updates, POST: Limit(config.posts_per_minute), SESSION_STATUS: statuses}
    return Pacer(clock, limits)


def part_metadata(reply_id: int | str, part: int, key: ConversationKey) -> dict[str, Any]:
    """The message metadata that labels each part we post (a draft's key stands for its reply
    until the reply that finishes it re-labels it)."""
    payload = {"reply_id": reply_id, "part": part, "conversation": key.id}
    return {"event_type": METADATA_EVENT_TYPE, "event_payload": payload}


@dataclass(eq=False, repr=False)
class Outbound:
    """Posting and the thinking indicator for one workspace (one bot token)."""

    client: AsyncWebClient
    identity: Identity
    indicator: str = "auto"
    reaction: str = "hourglass_flowing_sand"
    status_text: str = "is thinking…"
    max_parts: int = 10
    pacer: Pacer = field(default_factory=lambda: Pacer(SystemClock(), {}))  # none: no limits
    status_available: bool = field(init=False)

    def __post_init__(self) -> None:
        self.status_available = self.indicator == "auto"

    # posting ----------------------------------------------------------------------------------
    async def deliver(
        self, reply: Reply, first: Callable[[str, bool], Awaitable[str]] | None = None
    ) -> list[str]:
        """Post the parts not already there; `first` shows part 0 instead of a new post (the
        streamed draft this reply finishes, updated; told whether it carries the 👍/👎 buttons).
        An answer with `feedback` has the buttons on its last part (feedback.py)."""
        parts = split_mrkdwn(to_mrkdwn(reply.text)) or ["…"]
        if len(parts) > self.max_parts:
            log.info("reply %s: %d parts, posting the first %d", reply.id, len(parts),
                     self.max_parts)  # fmt: skip
            parts = cap_parts(parts, self.max_parts, MAX_PART_CHARS, split_mrkdwn)
        posted = await self.posted_parts(reply, parts_since(reply)) if reply.attempt > 1 else {}
        ids: list[str] = []
        for index, text in enumerate(parts):
            if index in posted:
                ids.append(posted[index])
                continue
            reply.fence.check()  # a delivery whose claim was taken stops before its next part
            buttons = reply.feedback and index == len(parts) - 1
            if index == 0 and first is not None:
                ids.append(await first(text, buttons))
                await reply.fence.posted(index, ids[-1])
                continue
            metadata = part_metadata(reply.id, index, reply.key)
            blocks = feedback_blocks(text, reply.id, reply.key) if buttons else None
            what = f"reply {reply.id} part {index}"
            ids.append(await self.post(reply.key, text, metadata, what, blocks=blocks))
            await reply.fence.posted(index, ids[-1])
        return ids

    async def post(
        self,
        key: ConversationKey,
        text: str,
        metadata: dict[str, Any],
        what: str,
        taken: bool = False,
        blocks: list[dict[str, Any]] | None = None,
    ) -> str:
        """One `chat.postMessage` of ours (labelled by `metadata`, so a lost response is found);
        returns its platform id. It waits for its turn on the channel's budget, ahead of every
        draft, unless the caller has `taken` it (the stream's `draft_turn`). With `blocks` (a
        draft's, with its Stop button; an answer's last part, with its 👍/👎 buttons) `text` is
        the notification fallback."""
        if not taken:
            await self.pacer.take(POST, key.channel)
        response = await self.paced(
            POST,
            key.channel,
            what,
            self.client.chat_postMessage(
                channel=key.channel,
                thread_ts=key.thread or None,
                text=text,
                mrkdwn=True,
                unfurl_links=False,
                unfurl_media=False,
                metadata=metadata,
                blocks=blocks,
            ),
        )
        return f"{key.channel}:{response['ts']}"

    async def paced(self, method: str, scope: str, what: str, request: Awaitable[T]) -> T:
        """`call`, and a 429 holds `method`'s budget for everyone for its Retry-After."""
        try:
            return await call(what, request)
        except RateLimited as exc:
            self.pacer.hold(method, scope, exc.retry_after)
            raise

    async def posted_parts(self, reply: Reply, oldest: str | None = None) -> dict[int, str]:
        """Parts of this reply already in the conversation, found by their metadata (posted after
        `oldest`, by default the message the reply answers)."""
        if oldest is None:
            oldest = split_message_id(reply.reply_to_message_id or "")[1] or "0"
        found: dict[int, str] = {}
        what = f"reply {reply.id}: looking for earlier posts"
        channel, thread = reply.key.channel, reply.key.thread
        async for message in conversation(self.client, what, channel, thread, oldest=oldest):
            part = self._our_part(message, reply)
            if part is not None:
                found[part] = f"{channel}:{message['ts']}"
        if found:
            log.info("reply %s: %d part(s) already posted; not posting them again", reply.id,
                     len(found))  # fmt: skip
        return found

    def _our_part(self, message: Mapping[str, Any], reply: Reply) -> int | None:
        metadata = message.get("metadata") or {}
        payload = metadata.get("event_payload") or {}
        if metadata.get("event_type") != METADATA_EVENT_TYPE or payload.get("reply_id") != reply.id:
            return None
        if payload.get("conversation", reply.key.id) != reply.key.id:
            return None
        if self.identity.bot_id and message.get("bot_id") not in (None, self.identity.bot_id):
            return None
        part = payload.get("part")
        return part if isinstance(part, int) else None

    # thinking indicator -----------------------------------------------------------------------
    async def show_busy(self, key: ConversationKey, busy: bool, message_id: str) -> None:
        """The assistant thread status where the app has it, else a reaction on `message_id`.
        "Off" may come from another process than "on" (bot/core/indicator.py), so it cannot
        know which of the two was shown: where the status is available it clears the status
        (a reply in the thread clears it anyway); elsewhere it removes the reaction."""
        if self.indicator == "off":
            return
        try:
            if not await self._set_status(key, self.status_text if busy else ""):
                await self._react("reactions_add" if busy else "reactions_remove", message_id)
        except Exception as exc:  # best effort: the indicator never fails a burst
            log.debug("thinking indicator for %s failed: %s", key.id, exc)

    def shows_status(self, key: ConversationKey) -> bool:
        """The assistant thread status is what shows this conversation's indicator."""
        return self.indicator != "off" and bool(key.thread) and self.status_available

    async def refresh_status(self, key: ConversationKey) -> None:
        """Set the status again: Slack removes it two minutes after it was set if no message was
        sent (a failure is the caller's to log)."""
        await self._set_status(key, self.status_text)

    async def _set_status(self, key: ConversationKey, status: str) -> bool:
        """Set the assistant thread status; False where it is not available (use reactions)."""
        if not (key.thread and self.status_available):
            return False
        method = "assistant.threads.setStatus"
        try:
            await call(method, self.client.assistant_threads_setStatus(
                channel_id=key.channel, thread_ts=key.thread, status=status
            ))  # fmt: skip
        except DeliveryError as exc:
            error = slack_code(exc)
            if error in STATUS_UNAVAILABLE or slack_status(exc) == 404:
                log.info("%s unavailable (%s); using reactions", method, error)
                self.status_available = False
                return False
            log.debug("indicator call failed: %s", exc)
        return True

    async def _react(self, method: str, platform_id: str) -> None:
        channel, ts = split_message_id(platform_id)
        request = getattr(self.client, method)(channel=channel, timestamp=ts, name=self.reaction)
        await call(method, request)  # a failure is show_busy's to log
