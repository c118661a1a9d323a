"""What the composition root decides at arrival, before the engine: access rules, the arrival
guards (size, rate) with their notices, and `/reset`. Nothing refused is stored; a refusal's
notice is an outbox row (`SqlStore.queue_notice`), so it is durable, posted once and in order, by
whichever process delivers the conversation's replies."""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.core.clock import Clock
from bot.core.engine import Engine
from bot.core.events import Event, IncomingMessage, ResetConversation
from bot.core.signals import Signals
from bot.core.store import IngestResult
from bot.core.wakeup import Wakeup
from bot.ops.access import AccessPolicy
from bot.ops.guards import CostGuards

if TYPE_CHECKING:
    from storage.sql_store import SqlStore

log = logging.getLogger("burstbot")


@dataclass(eq=False)
class Arrival:
    engine: Engine
    platforms: Collection[str]  # the front ends a notice can go out through
    access: AccessPolicy
    guards: CostGuards | None  # None: no limit is on
    signals: Signals
    store: SqlStore[Any]  # a refusal's notice, `/reset`'s history floor
    clock: Clock
    wakeup: Wakeup  # the scheduler's sweep posts a notice

    async def ingest(self, event: Event) -> IngestResult:
        """Access rules and arrival guards first (nothing refused is stored), then the engine."""
        if isinstance(event, ResetConversation):
            return self._refused_access(event) or await self._reset(event)
        if isinstance(event, IncomingMessage) and not event.author_is_bot:
            refused = self._refused_access(event)
            if refused is None and self.guards is not None:
                refused = await self._guarded(event, self.guards)
            if refused is not None:
                return refused
        return await self.engine.ingest(event)

    def _refused_access(self, event: IncomingMessage | ResetConversation) -> IngestResult | None:
        reason = self.access.refusal(event.key, event.author_id, event.is_dm)
        if reason is None:
            return None
        what = "/reset" if isinstance(event, ResetConversation) else "message"
        log.info("conversation %s: %s refused (%s)", event.key.id, what, reason)
        self.signals.emit("refused", conversation=event.key.id, stage="access", reason=reason)
        return IngestResult("ignored", event.key.id, 0)

    async def _guarded(self, event: IncomingMessage, guards: CostGuards) -> IngestResult | None:
        key = event.key
        refusal = await guards.check_message(event, self.clock.now())
        if refusal is None:
            return None
        if refusal.repeat:
            log.debug("conversation %s: repeat of refused message %s dropped", key.id,
                      event.message_id)  # fmt: skip
            self.signals.emit("duplicate", conversation=key.id, version=0)
            return IngestResult("duplicate", key.id, 0)
        already = "" if refusal.notice else "; notice already sent"
        log.warning("conversation %s: message from %s refused (%s)%s", key.id, event.author_id,
                    refusal.reason, already)  # fmt: skip
        self.signals.emit("refused", conversation=key.id, stage="guard", reason=refusal.reason)
        if refusal.notice is not None and key.platform in self.platforms:
            now = self.clock.now()
            await self.store.queue_notice(key.id, refusal.notice, event.message_id, now)
            self.wakeup.wake()
        return IngestResult("ignored", key.id, 0)

    async def _reset(self, event: ResetConversation) -> IngestResult:
        cid = event.key.id
        floor = await self.store.reset_history(cid)
        log.info("conversation %s: history cleared by %s", cid, event.author_id or "a user")
        self.signals.emit("reset", conversation=cid, floor=floor)
        return IngestResult("history", cid, floor or 0)
