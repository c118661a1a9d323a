"""Failed replies re-queued by hand (`bot/ops/requeue.py`, `burstbot retry`)."""

from __future__ import annotations

from storage.seam import Conn, StoreSeam


class RequeueSteps(StoreSeam[Conn]):
    async def requeue_failed(
        self, reply_id: int | None, conversation_id: str | None, now: float
    ) -> list[int]:
        """One statement: the failed reply `reply_id`, or every failed reply of the conversation,
        pending again and due `now`; the ids re-queued, and a wake-up hint for the deliverers."""
        params = {"id": reply_id, "cid": conversation_id, "now": now}
        async with self._transaction() as db:
            rows = await self._rows("requeue_failed", params, db)
            for platform in sorted({str(r["platform"]) for r in rows}):
                await self._hint(db, f"outbox {platform}")
        return sorted(int(r["id"]) for r in rows)

    async def reply_state(self, reply_id: int) -> str | None:
        row = await self._one("reply_state", {"id": reply_id})
        return None if row is None else str(row[0])
