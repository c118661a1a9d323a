"""Step 6 of the pipeline: deliver committed replies from the outbox.

Rules:

- A row is posted only under a claim, fenced like a generation's lease: each claim bumps the row's
  claim token, the claim is renewed every ttl/3 while parts are posted, and every renewal and mark
  is a conditional statement on that token. A delivery that loses its claim (a renewal finds the
  token moved, or the claim runs out before it could be renewed) stops before its next part; its
  marks would change nothing anyway.
- In order (G9): the store hands out a conversation's replies one at a time, in commit order; a
  Retry-After on one reply holds back that conversation only.
- A process never runs two deliveries of one reply: a row claimed again while an older delivery
  of it still runs here stops the older one first.
- The reply id is the idempotency key the front end posts with (Discord nonce, Slack metadata), so
  re-delivering a row whose post was never recorded posts nothing new.
- A reply that finishes a streamed draft edits it (its first part) under this claim: the commit
  never waits on a rate-limited edit. A draft whose post outcome is unknown is found first
  (`locate_draft`): this process's own post of it is awaited; otherwise the row waits while
  that post may still land unseen.
- No silent give-up (G13, docs/delivery.md#when-the-platform-fails): a transient failure is
  retried with jittered backoff, capped so a reply goes out soon after the platform recovers, for
  `delivery_give_up_hours` from the reply's first failure; a rate limit waits its Retry-After.
  Only a permanent error, or the horizon running out, marks the row `failed`, with its reason.
- `attempts` counts failures only: a claim (a restart, a claim lost and taken again) and a rate
  limit are not attempts. Each failure is one warning line; only an adapter bug (an exception
  outside the error tree) logs a traceback.

Each delivery is a task of its own: the reply the engine has just committed
(`deliver_committed`), so the worker frees its generation slot at the commit and a final edit
waiting for the platform's budget never holds one; and each row the scheduler's sweep claims, so
a slow platform never holds up the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.core.backoff import Backoff
from bot.core.clock import Clock, cancel_all, trusted_until
from bot.core.draft_lookup import DraftPosts, locate_draft
from bot.core.errors import ClaimLost, PermanentDeliveryError, RetryableDeliveryError, StoreError
from bot.core.events import ConversationKey, Draft, Reply
from bot.core.frontend import Frontend, drafts_of
from bot.core.indicator import Indicator
from bot.core.settings import EngineSettings
from bot.core.signals import Signals
from bot.core.store import ClaimRequest, Committed, OutboxRow, OutboxStore

log = logging.getLogger("burstbot.outbox")

DELIVERY_BATCH = 16
HOUR = 3600.0


class ClaimFence:
    """This process's view of one delivery claim: open until renewals stop succeeding.

    The claim is trusted until a third of the TTL before the expiry the database stamped on it
    (at the claim, then at each renewal), counted down on the monotonic clock (`trusted_until`),
    so a process that stalled past that stops before posting again even if its renewal task has
    not run yet, and a claim that took long to come back is trusted for less, not for longer.
    A row without a claim expiry is not trusted at all.
    """

    def __init__(self, clock: Clock, ttl: float, store: OutboxStore, row: OutboxRow) -> None:
        self.clock = clock
        self.ttl = ttl
        self.store = store
        self.row = row
        self.parts = dict(enumerate(row.platform_message_ids))
        self.lost = False
        self.valid_until = -math.inf
        if row.claim_expires_at is not None:
            self.renewed(row.claim_expires_at)

    def renewed(self, expires_at: float) -> None:
        """The claim now expires at `expires_at` (the renewal's answer, on our clock)."""
        self.valid_until = trusted_until(self.clock, expires_at, self.ttl)

    def renewal_due_in(self) -> float:
        """Seconds until the claim has two thirds of the TTL left: when to renew it."""
        return max(0.0, self.valid_until - self.ttl / 3 - self.clock.monotonic())

    def check(self) -> None:
        if self.lost or self.clock.monotonic() >= self.valid_until:
            self.lost = True
            raise ClaimLost("the delivery claim was taken or ran out")

    async def posted(self, part: int, platform_id: str) -> None:
        self.parts[part] = platform_id
        done = [self.parts[i] for i in range(len(self.parts)) if i in self.parts]
        try:
            if not await self.store.record_parts(self.row.id, self.row.claim_token, done):
                self.lost = True  # the claim moved on: the next check stops this delivery
        except StoreError as exc:  # the platform's own idempotency key still guards a retry
            log.warning("reply r%d: posted parts not recorded (%s)", self.row.id, exc)


@dataclass(eq=False, repr=False)
class Outbox:
    """Claims due rows for the platforms this process serves, posts them and records the outcome."""

    store: OutboxStore
    clock: Clock
    settings: EngineSettings
    owner: str
    frontends: Mapping[str, Frontend]
    indicator: Indicator
    signals: Signals
    on_settled: Callable[[], None] = lambda: None
    """A row settled: the next one of its conversation may go."""
    draft_posts: DraftPosts = field(default_factory=DraftPosts)
    """This process's draft posts, shared with the streams (`locate_draft` awaits its own)."""
    running: set[asyncio.Task[Any]] = field(default_factory=set, init=False)
    _posting: dict[int, asyncio.Task[list[str]]] = field(default_factory=dict, init=False)

    @property
    def platforms(self) -> list[str]:
        return sorted(self.frontends)

    @property
    def claim(self) -> ClaimRequest | None:
        """What a commit claims for this process in its own transaction (`deliver_committed`)."""
        if not self.frontends:
            return None
        return ClaimRequest(self.owner, self.settings.lease_ttl_seconds, tuple(self.platforms))

    async def deliver_committed(self, done: Committed) -> None:
        """Start posting the reply a commit made (a task, awaited by `running`): at once if the
        commit claimed it, else as `deliver_due` would (it may wait behind an earlier reply of
        its conversation, G9)."""
        if done.reply is None:
            return
        if done.claimed:
            self._start(self._deliver(done.reply))
        else:
            self._start(self.deliver_due(reply_id=done.reply.id))

    def _start(self, delivery: Coroutine[Any, Any, object]) -> None:
        task = asyncio.create_task(delivery)
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    async def deliver_due(self, reply_id: int | None = None) -> int:
        """Claim due rows (only `reply_id`, if given) and post them; returns how many were claimed.

        With `reply_id` the posts are awaited here; without, each runs as a task of its own."""
        if not self.frontends:
            return 0
        rows = await self.store.claim_replies(
            self.owner,
            self.clock.now(),
            self.settings.lease_ttl_seconds,
            self.platforms,
            DELIVERY_BATCH,
            reply_id,
        )
        if reply_id is not None:
            for row in rows:
                await self._deliver(row)
        else:
            for row in rows:
                self._start(self._deliver(row))
        return len(rows)

    async def next_due_at(self) -> float | None:
        """When the earliest claimable row of our platforms may be claimed (the scheduler wakes)."""
        return await self.store.next_outbox_at(self.platforms, self.clock.now())

    async def waiting(self, conversation_id: str) -> bool:
        """A reply of this conversation is still to be posted (or retried)."""
        return any(r.state == "pending" for r in await self.store.replies(conversation_id))

    async def _deliver(self, row: OutboxRow) -> None:
        stale = self._posting.get(row.id)
        if stale is not None:  # our own older delivery of this row outlived its claim: stop it
            await cancel_all([stale])
        fence = ClaimFence(self.clock, self.settings.lease_ttl_seconds, self.store, row)
        key = ConversationKey.parse(row.conversation_id)
        self.signals.emit("delivering", reply_id=row.id, conversation=row.conversation_id,
                          platform=row.platform, edit=row.draft is not None,
                          attempt=row.claim_token)  # fmt: skip
        post = asyncio.ensure_future(self._post(row, key, fence))
        self._posting[row.id] = post
        keeper = asyncio.ensure_future(self._keep_claim(row, fence, post))
        try:
            posted = await post
        except ClaimLost:
            self._claim_lost(row)
            return
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if not fence.lost or (me is not None and me.cancelling()):
                raise  # we are being cancelled ourselves (shutdown), not stopped by the keeper
            self._claim_lost(row)
            return
        except PermanentDeliveryError as exc:
            await self._failed(row, str(exc))
            return
        except Exception as exc:
            await self._retry(row, exc)
            return
        finally:
            post.cancel()  # a no-op once it is done; otherwise our own cancellation ends it too
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            if self._posting.get(row.id) is post:
                del self._posting[row.id]
        sent = await self.store.mark_sent(row.id, row.claim_token, posted, self.clock.now())
        if sent is not None:
            self.signals.emit(
                "delivered", reply_id=row.id, conversation=row.conversation_id, parts=posted
            )
            if row.kind != "notice":  # a refused message's: the pending burst's indicator stays
                self.indicator.sent(key, sent.indicator_at)
        else:
            self._claim_lost(row)
        self.on_settled()

    async def _post(self, row: OutboxRow, key: ConversationKey, fence: ClaimFence) -> list[str]:
        reply = Reply(
            id=f"r{row.id}",
            key=key,
            text=row.text,
            covers_to_version=row.covers_to_version,
            reply_to_message_id=row.reply_to_message_id,
            attempt=row.claim_token,  # > 1: an earlier claim may have posted parts
            already_posted=row.platform_message_ids,  # parts a failed attempt got out
            fence=fence,
            draft=await self._draft_of(row, key),
            feedback=row.feedback,
            card=str(row.id) if row.kind == "card" else None,
            ends_card=await self._card_of(row),
        )
        return await self.frontends[row.platform].deliver(reply)

    async def _draft_of(self, row: OutboxRow, key: ConversationKey) -> Draft | None:
        """The draft the reply finishes, its message found first if its post's outcome is
        unknown (`locate_draft`: a post of it from this process is awaited; else this raises,
        and the row is retried, while that post may still land unseen)."""
        draft = row.draft
        if row.kind == "card_outcome":
            return None  # it edits its card (`ends_card`), not a draft
        if draft is None or draft.message_id is not None or row.platform_message_ids:
            return draft
        surface = drafts_of(self.frontends[row.platform])
        if surface is None:
            return draft
        ttl = self.settings.lease_ttl_seconds
        found = await locate_draft(surface, key, draft, self.clock, ttl, self.draft_posts)
        return Draft(draft.key, found, draft.created_at, draft.reply_to)

    async def _card_of(self, row: OutboxRow) -> str | None:
        """The platform id of the approval card a card's ending edits (the ending's draft key is
        the card's reply id): in commit order it was posted first; one that never got out
        (failed) leaves the ending to be posted as a message of its own."""
        if row.kind != "card_outcome" or row.draft_key is None:
            return None
        cards = await self.store.replies(row.conversation_id)
        card = next((r for r in cards if f"r{r.id}" == row.draft_key), None)
        if card is None or not card.platform_message_ids:
            return None
        return card.platform_message_ids[0]

    async def _keep_claim(
        self, row: OutboxRow, fence: ClaimFence, post: asyncio.Future[list[str]]
    ) -> None:
        """Renew the claim every ttl/3 while posting (the first time when two thirds of the TTL
        are left of the expiry the claim was given); a lost claim stops the post at once."""
        ttl = self.settings.lease_ttl_seconds
        wait = fence.renewal_due_in()
        while not post.done():
            await self.clock.sleep(wait)
            wait = ttl / 3
            try:
                expires_at = await self.store.renew_claim(
                    row.id, row.claim_token, self.clock.now(), ttl
                )
                if expires_at is not None:
                    fence.renewed(expires_at)
                    continue
                fence.lost = True
            except StoreError as exc:  # still ours until it runs out; try again
                log.warning("reply r%d: cannot renew the delivery claim (%s)", row.id, exc)
                with contextlib.suppress(ClaimLost):
                    fence.check()
            if fence.lost:
                post.cancel()
                return

    def _claim_lost(self, row: OutboxRow) -> None:
        self.signals.emit("delivery_claim_lost", reply_id=row.id, conversation=row.conversation_id)
        log.warning("reply r%d: delivery claim lost; stopped (its new holder delivers it)", row.id)

    async def _retry(self, row: OutboxRow, exc: Exception) -> None:
        if not isinstance(exc, RetryableDeliveryError):
            log.error("reply r%d: adapter crashed while posting", row.id, exc_info=exc)
        retry_after = exc.retry_after if isinstance(exc, RetryableDeliveryError) else None
        now = self.clock.now()
        failing_since = now if row.failing_since is None else row.failing_since
        horizon = self.settings.delivery_give_up_hours
        if now - failing_since >= horizon * HOUR:
            await self._failed(row, f"gave up after {horizon:g} h of failures: {exc}")
            return
        rate_limited = retry_after is not None  # the platform pacing us: not a failed attempt
        attempts = row.attempts + (0 if rate_limited else 1)
        settings = self.settings
        backoff = Backoff(settings.delivery_backoff_seconds, settings.delivery_backoff_max_seconds,
                          jitter=settings.backoff_jitter)  # fmt: skip
        delay = retry_after if retry_after is not None else backoff.delay(attempts)
        if await self.store.mark_retry(
            row.id, row.claim_token, now + delay, str(exc), now, counts=not rate_limited
        ):
            self.signals.emit("delivery_retry", reply_id=row.id, attempt=attempts, delay=delay,
                              conversation=row.conversation_id, error=str(exc))  # fmt: skip
            log.warning("reply r%d: delivery failed (%s); retry in %.1fs (%d failed attempt(s) "
                        "in %.0fs)", row.id, exc, delay, attempts, now - failing_since)  # fmt: skip
        else:
            self._claim_lost(row)

    async def _failed(self, row: OutboxRow, error: str) -> None:
        if not await self.store.mark_failed(row.id, row.claim_token, error):
            self._claim_lost(row)
            return
        self.signals.emit("delivery_failed", reply_id=row.id, error=error,
                          conversation=row.conversation_id)  # fmt: skip
        log.error("reply r%d: delivery failed for good: %s (`burstbot retry r%d` re-queues it)",
                  row.id, error, row.id)  # fmt: skip
        self.indicator.clear(ConversationKey.parse(row.conversation_id))
        self.on_settled()
