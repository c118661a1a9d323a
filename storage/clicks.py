"""Clicks (`bot.core.clicks`) over the shared SQL.

A click is inserted and decided in one transaction: the insert dedupes by the platform's click
id (a second delivery decides nothing), the decision is one conditional statement against the
conversation's row, and the click's row keeps the outcome (`explain`, and the kinds to come)."""

from __future__ import annotations

from bot.core.clicks import Click, ClickOutcome, ClickRecord, StopRequest
from storage.rows import Row, from_row
from storage.seam import Conn, StoreSeam


def _why_not(state: Row | None) -> ClickOutcome:
    """A stop whose compare-and-swap failed: why, for the clicker's notice."""
    if state is None or int(state["answered_version"]) >= int(state["version"]):
        return "ended"
    if not int(state["names_pending"]):
        return "ended"  # its answer was posted (or deleted); another burst is pending now
    if (state["stop_version"] or 0) > int(state["answered_version"]):
        return "already_stopped"
    return "refused"


class ClickSteps(StoreSeam[Conn]):
    async def stop(self, click: Click, admin: bool, now: float) -> ClickOutcome:
        params = {
            "click_id": click.click_id,
            "cid": click.key.id,
            "kind": click.kind,
            "target": click.target,
            "clicker_id": click.clicker_id,
            "clicker_name": click.clicker_name,
            "now": now,
            "admin": admin,
        }
        outcome: ClickOutcome
        async with self._transaction(arrival=True) as db:
            if await self._one("insert_click", params, db) is None:
                return "duplicate"
            decided = await self._one("decide_stop", params, db)
            version = None if decided is None else int(decided[0])
            if version is not None:
                outcome = "stopped"
                await self._rows("arm_stop_timer", {**params, "version": version}, db)
                await self._hint(db, f"stop {click.key.id}")  # the generating process looks now
            else:
                outcome = _why_not(await self._one("stop_state", params, db))
            decision = {"click_id": click.click_id, "outcome": outcome, "version": version}
            await self._rows("decide_click", decision, db)
        return outcome

    async def pending_stop(self, conversation_id: str) -> StopRequest | None:
        row = await self._one("pending_stop", {"cid": conversation_id})
        return None if row is None else from_row(StopRequest, row, version=int(row["version"]))

    async def clicks(self, conversation_id: str) -> list[ClickRecord]:
        return [
            from_row(ClickRecord, r) for r in await self._rows("clicks", {"cid": conversation_id})
        ]
