"""Step 6 of the pipeline (DESIGN.md §3): deliver committed replies from the outbox.

Rules:

- A row is posted only under a claim: the store hands it to one worker by compare-and-swap (owner
  + expiry), so two workers never post one row at once; an unclaimed or expired `pending` row (a
  crash between commit and post) is claimed again and re-delivered.
- The reply id is the idempotency key the front end posts with (Discord nonce, Slack metadata), so
  re-delivering a row whose post was never recorded posts nothing new.
- A failed post is retried with exponential backoff, never sooner than the platform's Retry-After;
  a permanent error, or `delivery_max_attempts` attempts, marks the row `failed` and logs it.

Two callers: the engine delivers the reply it has just committed inline (`reply_id`), so the answer
goes out before its worker frees the slot; the scheduler's sweep (no `reply_id`) starts one task
per claimed row, so a slow platform never holds up the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from bot.core.clock import Clock
from bot.core.errors import PermanentDeliveryError, RetryableDeliveryError
from bot.core.events import ConversationKey, Reply
from bot.core.frontend import Frontend
from bot.core.indicator import Indicator
from bot.core.settings import EngineSettings
from bot.core.signals import Signals
from bot.core.store import OutboxRow, Store

log = logging.getLogger("burstbot.outbox")

DELIVERY_BATCH = 16


class Outbox:
    """Claims due rows for the platforms this process serves, posts them and records the outcome."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        settings: EngineSettings,
        owner: str,
        frontends: Mapping[str, Frontend],
        indicator: Indicator,
        signals: Signals,
    ) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        self.owner = owner
        self.frontends = frontends
        self.indicator = indicator
        self.signals = signals
        self.running: set[asyncio.Task[None]] = set()

    @property
    def platforms(self) -> list[str]:
        return sorted(self.frontends)

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
                task = asyncio.ensure_future(self._deliver(row))
                self.running.add(task)
                task.add_done_callback(self.running.discard)
        return len(rows)

    async def next_due_at(self) -> float | None:
        """When the earliest pending row of our platforms may be claimed (the scheduler wakes)."""
        return await self.store.next_outbox_at(self.platforms)

    async def waiting(self, conversation_id: str) -> bool:
        """A reply of this conversation is still to be posted (or retried)."""
        return any(r.state == "pending" for r in await self.store.replies(conversation_id))

    async def _deliver(self, row: OutboxRow) -> None:
        key = ConversationKey.parse(row.conversation_id)
        reply = Reply(
            id=f"r{row.id}",
            key=key,
            text=row.text,
            covers_to_version=row.covers_to_version,
            reply_to_message_id=row.reply_to_message_id,
            attempt=row.attempts,
        )
        frontend = self.frontends[row.platform]
        try:
            posted = await frontend.deliver(reply)
        except PermanentDeliveryError as exc:
            await self._failed(row, str(exc))
            return
        except Exception as exc:
            retry_after = exc.retry_after if isinstance(exc, RetryableDeliveryError) else None
            if not isinstance(exc, RetryableDeliveryError):
                log.exception("reply %s: adapter crashed while posting", reply.id)
            if row.attempts >= self.settings.delivery_max_attempts:
                await self._failed(row, f"gave up after {row.attempts} attempts: {exc}")
                return
            delay = self.settings.delivery_backoff_seconds * 2 ** (row.attempts - 1)
            delay = max(delay, retry_after or 0.0)
            await self.store.mark_retry(row.id, self.owner, self.clock.now() + delay, str(exc))
            self.signals.emit("delivery_retry", reply_id=row.id, attempt=row.attempts, delay=delay)
            log.warning("reply %s: delivery failed (%s); retry in %.1fs", reply.id, exc, delay)
            return
        await self.store.mark_sent(row.id, self.owner, posted, self.clock.now())
        self.signals.emit(
            "delivered", reply_id=row.id, conversation=row.conversation_id, parts=posted
        )
        self.indicator.clear(key)

    async def _failed(self, row: OutboxRow, error: str) -> None:
        await self.store.mark_failed(row.id, self.owner, error)
        self.signals.emit("delivery_failed", reply_id=row.id, error=error)
        log.error("reply r%d: permanent delivery failure: %s", row.id, error)
