"""Fair shares read from every process's rows (`bot.core.shares`): the live leases
and the due timers, each with the person its burst counts against, in one query."""

from __future__ import annotations

from bot.core.store import Share
from storage.seam import Conn, StoreSeam


class ShareSteps(StoreSeam[Conn]):
    async def shares(self, now: float) -> list[Share]:
        rows = await self._rows("shares", {"now": now})
        return [
            Share(str(r["conversation_id"]), str(r["person"]), bool(r["generating"])) for r in rows
        ]
