"""Approvals (`bot.core.approvals.ApprovalStore`) over the shared SQL.

Parking is one transaction fenced by the lease token: the waiting action, its card in the
outbox, the timer parked until the expiry and the lease released. A click is stored and decided
in one transaction (the insert dedupes by the platform's click id, the decision is one
compare-and-swap on the action's row). Every ending queues the card's outcome in the
transaction that decides it."""

from __future__ import annotations

from bot.core.actions import ActionRecord, NewAction
from bot.core.approvals import (
    Approvers,
    Continuation,
    Ending,
    Parked,
    ended_card,
    outcome_line,
)
from bot.core.clicks import Click, ClickOutcome
from bot.core.store import notice_slot
from storage.actions import action_from_row
from storage.rows import Row
from storage.seam import Conn, StoreSeam


def _why_not(state: Row | None) -> ClickOutcome:
    """A decision whose compare-and-swap failed: why, for the clicker's notice."""
    if state is None:
        return "ended"
    if state["approval"] in ("superseded", "expired"):
        return "ended"
    if state["approval"] != "waiting":
        return "already_decided"
    if bool(state["expired"]) or bool(state["moved"]):
        return "ended"
    return "refused"


class ApprovalSteps(StoreSeam[Conn]):
    async def park(
        self, action: NewAction, asked_by: str, continuation: Continuation, wait_seconds: float,
        card: str, reply_to: str | None,
    ) -> int | None:  # fmt: skip
        cid = action.conversation_id
        params = {
            "cid": cid, "key": action.idempotency_key, "from_version": action.from_version,
            "to_version": action.to_version, "token": action.lease_token,
            "server": action.server, "tool": action.tool, "arguments": action.arguments,
            "read_only": action.read_only, "tool_use_id": action.tool_use_id,
            "user_id": action.user_id, "started_at": action.started_at, "now": action.started_at,
            "timeout": wait_seconds, "asked_by": asked_by, "resume": continuation.to_json(),
        }  # fmt: skip
        async with self._transaction() as db:
            await self._rows("lock_answered_version", params, db)  # the row first: the usual order
            parked = await self._one("park_action", params, db)
            if parked is None:
                return None  # fenced out (or recorded already: the lease is not ours to park)
            expires_at = float(parked[0])
            slot = f"card:{action.idempotency_key}:{action.to_version}"
            card_id = await self._card(db, cid, slot, card, "card", None, reply_to,
                                       action.started_at)  # fmt: skip
            assert card_id is not None
            await self._rows("attach_card", {"cid": cid, "key": action.idempotency_key,
                                             "card": card_id}, db)  # fmt: skip
            timer = {"cid": cid, "expires_at": expires_at, "version": action.to_version}
            await self._rows("park_timer", timer, db)
            await self._rows("release_lease", {"cid": cid, "token": action.lease_token}, db)
            await self._hint(db, f"outbox {cid.split('/', 1)[0]}")
        return card_id

    async def _card(
        self, db: Conn, cid: str, slot_name: str, text: str, kind: str, card_id: int | None,
        reply_to: str | None, now: float,
    ) -> int | None:  # fmt: skip
        """A card (or its ending, which names the card it edits) queued in the outbox."""
        params = {
            "cid": cid, "platform": cid.split("/", 1)[0], "slot": notice_slot(slot_name),
            "reply_to_message_id": reply_to, "text": text, "kind": kind, "now": now,
            "draft_key": None if card_id is None else f"r{card_id}",
        }  # fmt: skip
        row = await self._one("insert_card", params, db)
        return None if row is None else int(row[0])

    async def parked(self, conversation_id: str, from_version: int) -> Parked | None:
        params = {"cid": conversation_id, "from_version": from_version}
        row = await self._one("parked_action", params)
        if row is None:
            return None
        return Parked(action_from_row(row), Continuation.from_json(str(row["resume"])))

    async def decide(
        self, click: Click, admin: bool, approvers: Approvers, now: float
    ) -> ClickOutcome:
        params = {
            "click_id": click.click_id, "cid": click.key.id, "kind": click.kind,
            "target": click.target, "clicker_id": click.clicker_id,
            "clicker_name": click.clicker_name, "now": now, "admin": admin,
            "authors": approvers == "authors_and_admins", "card": int(click.target),
            "decision": "approved" if click.kind == "approve" else "denied",
        }  # fmt: skip
        outcome: ClickOutcome
        async with self._transaction(arrival=True) as db:
            if await self._one("insert_click", params, db) is None:
                return "duplicate"
            decided = await self._one("decide_approval", params, db)
            if decided is not None:
                outcome = "approved" if click.kind == "approve" else "denied"
                await self._rows("wake_parked", params, db)
                if outcome == "denied":  # the card ends now; an approved one when its call does
                    action = action_from_row(decided)
                    line = outcome_line("denied", click.clicker_name)
                    await self._ending(db, action, ended_card(action, line), now)
            else:
                outcome = _why_not(await self._one("approval_state", params, db))
            decision = {"click_id": click.click_id, "outcome": outcome, "version": None}
            await self._rows("decide_click", decision, db)
        return outcome

    async def keep_waiting(self, action: ActionRecord, token: int) -> None:
        cid = action.conversation_id
        timer = {"cid": cid, "expires_at": action.approval_expires_at,
                 "version": action.to_version}  # fmt: skip
        async with self._transaction() as db:
            key = {"cid": cid, "key": action.idempotency_key}
            state = await self._one("lock_approval", key, db)
            if state is not None and state["approval"] == "waiting":  # decided: its wake stands
                await self._rows("park_timer", timer, db)
            await self._rows("release_lease", {"cid": cid, "token": token}, db)

    async def claim_approved(self, conversation_id: str, key: str, token: int) -> bool:
        params = {"cid": conversation_id, "key": key, "token": token}
        return await self._one("claim_approved", params) is not None

    async def finish_approved(
        self, action: ActionRecord, result: str, failed: bool, now: float, card: str
    ) -> int | None:
        cid = action.conversation_id
        params = {"cid": cid, "key": action.idempotency_key, "result": result, "now": now,
                  "failed": failed}  # fmt: skip
        async with self._transaction() as db:
            if await self._one("finish_action", params, db) is None:
                return None
            return await self._ending(db, action, card, now)

    async def _ending(self, db: Conn, action: ActionRecord, card: str, now: float) -> int | None:
        if action.card_reply_id is None:
            return None
        cid, card_id = action.conversation_id, action.card_reply_id
        return await self._card(db, cid, f"card-end:{card_id}", card, "card_outcome", card_id,
                                None, now)  # fmt: skip

    async def end_card(self, action: ActionRecord, card: str, now: float) -> int | None:
        async with self._transaction() as db:
            return await self._ending(db, action, card, now)

    async def end_approval(
        self, action: ActionRecord, token: int, ending: Ending, now: float, card: str
    ) -> int | None:
        params = {"cid": action.conversation_id, "key": action.idempotency_key, "token": token,
                  "ending": ending, "now": now}  # fmt: skip
        async with self._transaction() as db:
            if await self._one("end_approval", params, db) is None:
                return None
            return await self._ending(db, action, card, now)
