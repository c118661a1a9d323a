"""The outbox's backlog for health and metrics (`bot/ops/health.py`): a read, nothing pending
changes."""

from __future__ import annotations

from bot.core.store import Backlog
from storage.seam import Conn, StoreSeam


class BacklogSteps(StoreSeam[Conn]):
    async def backlog(self) -> Backlog:
        [row] = await self._rows("backlog", {})
        oldest = None if row["oldest_pending_at"] is None else float(row["oldest_pending_at"])
        return Backlog(int(row["outbox_depth"]), oldest, int(row["outbox_failed"]))
