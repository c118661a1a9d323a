"""Neutral replies → Slack posts, idempotently; and the thinking indicator.

Idempotency: every part of a reply is posted with message `metadata` naming the reply id and the
part number. A first attempt posts straight away; any later attempt (a crash or a lost response
between posting and recording) first reads the conversation with `include_all_metadata` and skips
the parts already there. The Web API client has no retry handlers at all: a retry the client made
on its own after a dropped connection could post a part twice behind that check's back. A 429
becomes `RetryableDeliveryError(retry_after=…)`, so the engine's next attempt (which runs the check)
honours `Retry-After`; the workspace's pacer (`bot/core/pacing.py`) holds that method's budget for
every conversation meanwhile, and gives a reply's posts their turn ahead of streamed drafts.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.markdown import cap_parts
from adapters.slack.inbound import Identity, split_message_id
from adapters.slack.mrkdwn import MAX_PART_CHARS, split_mrkdwn, to_mrkdwn
from bot.config import SlackConfig
from bot.core.clock import Clock
from bot.core.errors import DeliveryError, PermanentDeliveryError, RetryableDeliveryError
from bot.core.events import ConversationKey, Reply
from bot.core.pacing import Limit, Pacer

log = logging.getLogger("burstbot.slack")

METADATA_EVENT_TYPE = "burstbot_reply"
POST = "chat.postMessage"  # the pacer's buckets: per channel
UPDATE = "chat.update"  # per workspace
UPDATE_BURST = 20.0  # Tier 3 allows bursts: the pacer starts here, a 429 halves it
LOOKUP_PAGE = 200
LOOKUP_MAX_PAGES = 10
BODY_PREVIEW_CHARS = 80
CLOCK_MARGIN = 60.0  # seconds a look-up starts before a draft's creation (our clock vs Slack's)

PERMANENT_ERRORS = frozenset(
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
STATUS_UNAVAILABLE = frozenset(
    {"missing_scope", "not_allowed_token_type", "unknown_method", "method_deprecated",
     "no_permission", "invalid_auth", "feature_not_enabled"}
)  # fmt: skip


def delivery_error(exc: Exception, what: str) -> DeliveryError:
    """Map a Web API failure to retryable (try later) or permanent (can never succeed).

    Only an error code in Slack's own JSON can be permanent. Anything else is an outage and is
    retried: a 5xx, a body that is not Slack's JSON (a load balancer's plain-text or HTML page),
    a reset connection, a timeout."""
    if isinstance(exc, SlackApiError):
        status = http_status(exc)
        error = slack_error_code(exc)
        if status == 429 or error == "ratelimited":
            return RetryableDeliveryError(f"{what}: rate limited", retry_after=_retry_after(exc))
        if error in PERMANENT_ERRORS:
            return PermanentDeliveryError(f"{what}: {error}")
        return RetryableDeliveryError(f"{what}: {error or _not_slack(exc, status)}")
    return RetryableDeliveryError(f"{what}: {type(exc).__name__}: {exc}")


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


def slack_pacer(config: SlackConfig, clock: Clock) -> Pacer:
    """The workspace's budget: `chat.update` per workspace (Tier 3, with Slack's burst),
    `chat.postMessage` per channel (about one a second). A 429 shrinks either (pacing.py)."""
    updates = Limit(config.updates_per_minute, burst=UPDATE_BURST)
    return Pacer(clock, {UPDATE: updates, POST: Limit(config.posts_per_minute)})


def part_metadata(reply_id: int | str, part: int, key: ConversationKey) -> dict[str, Any]:
    """The message metadata that labels each part we post (a draft's key stands for its reply
    until the reply that finishes it re-labels it)."""
    payload = {"reply_id": reply_id, "part": part, "conversation": key.id}
    return {"event_type": METADATA_EVENT_TYPE, "event_payload": payload}


class Outbound:
    """Posting and the thinking indicator for one workspace (one bot token)."""

    def __init__(
        self,
        client: AsyncWebClient,
        identity: Identity,
        indicator: str = "auto",
        reaction: str = "hourglass_flowing_sand",
        status_text: str = "is thinking…",
        part_chars: int = MAX_PART_CHARS,
        max_parts: int = 10,
        pacer: Pacer | None = None,
    ) -> None:
        self.client = client
        self.pacer = pacer
        self.identity = identity
        self.indicator = indicator
        self.reaction = reaction
        self.status_text = status_text
        self.part_chars = part_chars
        self.max_parts = max_parts
        self.status_available = indicator == "auto"

    # posting ----------------------------------------------------------------------------------
    async def deliver(
        self, reply: Reply, first: Callable[[str], Awaitable[str]] | None = None
    ) -> list[str]:
        """Post the parts not already there; `first` shows part 0 instead of a new post (the
        streamed draft this reply finishes, updated)."""
        parts = split_mrkdwn(to_mrkdwn(reply.text), self.part_chars) or ["…"]
        if len(parts) > self.max_parts:
            log.info("reply %s: %d parts, posting the first %d", reply.id, len(parts),
                     self.max_parts)  # fmt: skip
            parts = cap_parts(parts, self.max_parts, self.part_chars, split_mrkdwn)
        posted = await self.posted_parts(reply, parts_since(reply)) if reply.attempt > 1 else {}
        ids: list[str] = []
        for index, text in enumerate(parts):
            if index in posted:
                ids.append(posted[index])
                continue
            reply.fence.check()  # a delivery whose claim was taken stops before its next part
            if index == 0 and first is not None:
                ids.append(await first(text))
                await reply.fence.posted(index, ids[-1])
                continue
            metadata = part_metadata(reply.id, index, reply.key)
            ids.append(await self.post(reply.key, text, metadata, f"reply {reply.id} part {index}"))
            await reply.fence.posted(index, ids[-1])
        return ids

    async def post(
        self,
        key: ConversationKey,
        text: str,
        metadata: dict[str, Any],
        what: str,
        final: bool | None = True,
    ) -> str:
        """One `chat.postMessage` of ours (labelled by `metadata`, so a lost response is found);
        returns its platform id. It waits for its turn on the channel's budget (a reply's text
        before drafts; `final=None`: the caller took the turn)."""
        if final is not None:
            await self.take(POST, key.channel, final)
        try:
            response = await self.client.chat_postMessage(
                channel=key.channel,
                thread_ts=key.thread or None,
                text=text,
                mrkdwn=True,
                unfurl_links=False,
                unfurl_media=False,
                metadata=metadata,
            )
        except (TimeoutError, SlackClientError, aiohttp.ClientError, OSError) as exc:
            raise self.paced_error(exc, what, POST, key.channel) from exc
        return f"{key.channel}:{response['ts']}"

    async def take(self, method: str, scope: str, final: bool) -> None:
        """Wait for a call's turn on the workspace's budget for `method` in `scope`."""
        if self.pacer is not None:
            await self.pacer.take(method, scope, final)

    def refund(self, method: str, scope: str) -> None:
        """A token taken for a call that was not made after all."""
        if self.pacer is not None:
            self.pacer.refund(method, scope)

    def paced_error(self, exc: Exception, what: str, method: str, scope: str) -> DeliveryError:
        """`delivery_error`, and a 429 holds `method`'s budget for everyone for its Retry-After."""
        error = delivery_error(exc, what)
        rate_limited = isinstance(exc, SlackApiError) and (
            http_status(exc) == 429 or slack_error_code(exc) == "ratelimited"
        )
        if rate_limited and self.pacer is not None and isinstance(error, RetryableDeliveryError):
            self.pacer.hold(method, scope, error.retry_after)
        return error

    async def posted_parts(self, reply: Reply, oldest: str | None = None) -> dict[int, str]:
        """Parts of this reply already in the conversation, found by their metadata (posted after
        `oldest`, by default the message the reply answers)."""
        channel, thread = reply.key.channel, reply.key.thread
        if oldest is None:
            oldest = split_message_id(reply.reply_to_message_id or "")[1] or "0"
        found: dict[int, str] = {}
        cursor = None
        try:
            for _ in range(LOOKUP_MAX_PAGES):
                args: dict[str, Any] = {
                    "channel": channel,
                    "oldest": oldest,
                    "limit": LOOKUP_PAGE,
                    "include_all_metadata": True,
                }
                if cursor:
                    args["cursor"] = cursor
                if thread:
                    page = await self.client.conversations_replies(ts=thread, **args)
                else:
                    page = await self.client.conversations_history(**args)
                for message in page.get("messages") or []:
                    part = self._our_part(message, reply)
                    if part is not None:
                        found[part] = f"{channel}:{message['ts']}"
                cursor = (page.get("response_metadata") or {}).get("next_cursor")
                if not cursor:
                    break
        except (TimeoutError, SlackClientError, aiohttp.ClientError, OSError) as exc:
            raise delivery_error(exc, f"reply {reply.id}: looking for earlier posts") from exc
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

    async def _set_status(self, key: ConversationKey, status: str) -> bool:
        """Set the assistant thread status; False where it is not available (use reactions)."""
        if not (key.thread and self.status_available):
            return False
        try:
            await self.client.assistant_threads_setStatus(
                channel_id=key.channel, thread_ts=key.thread, status=status
            )
        except SlackApiError as exc:
            error = slack_error_code(exc)
            if error in STATUS_UNAVAILABLE or http_status(exc) == 404:
                log.info("assistant.threads.setStatus unavailable (%s); using reactions", error)
                self.status_available = False
                return False
            log.debug("indicator call failed: %s", exc)
        except (TimeoutError, SlackClientError, aiohttp.ClientError) as exc:
            log.debug("indicator call failed: %s", exc)
        return True

    async def _react(self, method: str, platform_id: str) -> None:
        channel, ts = split_message_id(platform_id)
        call = getattr(self.client, method)
        await self._quietly(call(channel=channel, timestamp=ts, name=self.reaction))

    @staticmethod
    async def _quietly(call: Any) -> None:
        try:
            await call
        except (TimeoutError, SlackClientError, aiohttp.ClientError) as exc:
            log.debug("indicator call failed: %s", exc)
