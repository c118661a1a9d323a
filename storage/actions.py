"""Durable tool actions (`bot.core.actions.ActionLog`) over the shared SQL.

`begin_action` is one fenced insert (the lease token must still be current) that does nothing
when the burst already recorded the key; then the key's row is read in the same transaction, so
of two generations making one call exactly one records it and both see the same record.
"""

from __future__ import annotations

from dataclasses import asdict

from bot.core.actions import ActionRecord, Began, NewAction
from storage.rows import Row, from_row
from storage.seam import Conn, StoreSeam


def action_from_row(r: Row) -> ActionRecord:
    """SQLite returns its booleans as integers."""
    return from_row(ActionRecord, r, read_only=bool(r["read_only"]), failed=bool(r["failed"]))


class ActionSteps(StoreSeam[Conn]):
    async def begin_action(self, action: NewAction) -> Began | None:
        params = asdict(action)
        params["cid"], params["key"] = params.pop("conversation_id"), action.idempotency_key
        params["token"] = params.pop("lease_token")
        async with self._transaction() as db:
            created = await self._one("begin_action", params, db) is not None
            row = await self._one("action", params, db)
        if row is None:
            return None  # fenced out: the lease is another worker's now
        record = action_from_row(row)
        if not created and record.from_version != action.from_version:
            return None  # a key of another burst: cannot happen with derived keys
        return Began(record, created)

    async def finish_action(
        self, conversation_id: str, idempotency_key: str, result: str, failed: bool, now: float
    ) -> bool:
        params = {"cid": conversation_id, "key": idempotency_key, "result": result, "now": now}
        return await self._one("finish_action", {**params, "failed": failed}) is not None

    async def actions(
        self, conversation_id: str, from_version: int | None = None
    ) -> list[ActionRecord]:
        params = {"cid": conversation_id, "from_version": from_version}
        return [action_from_row(r) for r in await self._rows("actions", params)]

    async def action(self, conversation_id: str, idempotency_key: str) -> ActionRecord | None:
        row = await self._one("action", {"cid": conversation_id, "key": idempotency_key})
        return None if row is None else action_from_row(row)

    async def actions_since(self, since: float) -> list[ActionRecord]:
        """Every conversation's actions begun since `since` (usage reports)."""
        return [action_from_row(r) for r in await self._rows("actions_since", {"since": since})]
