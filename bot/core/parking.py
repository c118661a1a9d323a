"""The engine's approval steps (rule 9 of engine.py; the rules: approvals.py): park a burst at a
call that asks, meet a parked burst again, and post cards before the answer that follows them.

Kept apart from the engine's transitions because each is a few store steps around one rule:
parking and every ending are single transactions of the store (storage/approvals.py), and a
card (or its ending) is an outbox row posted like a reply, in commit order (G9)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

from bot.core.approvals import (
    ApprovalNeeded,
    Continuation,
    Parked,
    card_text,
    ended_card,
    outcome_line,
)
from bot.core.burst import Burst
from bot.core.indicator import Indicator
from bot.core.outbox import Outbox
from bot.core.store import BurstStore
from bot.core.streaming import Drafts

log = logging.getLogger("burstbot.engine")

CARD_KINDS = ("card", "card_outcome")


class Parking:
    def __init__(
        self,
        store: BurstStore,
        outbox: Outbox,
        drafts: Drafts,
        indicator: Indicator,
        emit: Callable[..., None],
    ) -> None:
        self.store = store
        self.outbox = outbox
        self.drafts = drafts
        self.indicator = indicator
        self._emit = emit

    async def park(self, burst: Burst, asked: ApprovalNeeded, wait: float) -> int | None:
        """The burst parked behind its card, which is posted; no lease or slot is held until
        someone decides. None: the lease was lost first (nothing recorded; released)."""
        lease, cid, action = burst.lease, burst.lease.conversation_id, asked.action
        await self.drafts.discard(burst)  # the resumed answer gets a draft of its own
        card = card_text(action.server, action.tool, action.arguments, asked.asked_by, wait)
        reply_to = burst.messages[-1].message_id if burst.messages else None
        card_id = await self.store.park(
            action, asked.asked_by, asked.continuation, wait, card, reply_to
        )
        if card_id is None:
            log.warning("conversation %s: lease lost before the call could ask; dropped", cid)
            await self.store.release_lease(cid, lease.token)
            return None
        self._emit("parked", conversation=cid, card=card_id, tool=action.tool)
        self.indicator.clear(burst.key)
        await self.deliver_cards(cid, card_id)
        return card_id

    async def unparked(
        self, burst: Burst, parked: Parked
    ) -> Continuation | Literal["afresh", "waiting"]:
        """The burst's parked call, met again: the continuation to resume from; "afresh" when
        the card was superseded (the newer burst is answered as usual); "waiting" when it still
        waits (parked again, the lease released)."""
        lease, action, now = burst.lease, parked.action, self.outbox.clock.now()
        cid = action.conversation_id
        if action.approval != "waiting":
            await self.deliver_cards(cid)  # a denial's ending shows first
            return parked.continuation
        if lease.version > action.to_version:
            line = outcome_line("superseded", None)
            ending = await self.store.end_approval(
                action, lease.token, "superseded", now, ended_card(action, line)
            )
            self._emit("approval_ended", conversation=cid, ending="superseded")
            await self.deliver_cards(cid, ending)
            return "afresh"
        ending = await self.store.end_approval(
            action, lease.token, "expired", now, ended_card(action, outcome_line("expired", None))
        )
        if ending is not None:
            self._emit("approval_ended", conversation=cid, ending="expired")
            return parked.continuation
        await self.store.keep_waiting(action, lease.token)
        return "waiting"

    async def deliver_cards(self, conversation_id: str, *reply_ids: int | None) -> None:
        """Post the conversation's pending cards and card endings now, in order (G9), so the
        answer that follows them is not held behind them."""
        pending = [r.id for r in await self.outbox.store.replies(conversation_id)
                   if r.state == "pending" and r.kind in CARD_KINDS]  # fmt: skip
        for reply_id in sorted({*pending, *(r for r in reply_ids if r is not None)}):
            await self.outbox.deliver_due(reply_id=reply_id)
