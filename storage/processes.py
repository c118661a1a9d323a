"""The processes running the bot (`bot.core.processes.ProcessBook`): one row per owner name,
stamped on the database's clock; what is read back crosses to the caller's clock (G12)."""

from __future__ import annotations

from bot.core.processes import ProcessRecord
from storage.rows import from_row
from storage.seam import Conn, StoreSeam


class ProcessSteps(StoreSeam[Conn]):
    async def see_process(self, owner: str, host: str, pid: int, version: str, now: float) -> None:
        params = {"owner": owner, "host": host, "pid": pid, "version": version, "now": now}
        await self._rows("see_process", params)

    async def forget_process(self, owner: str) -> bool:
        return await self._one("forget_process", {"owner": owner}) is not None

    async def prune_processes(self, unseen_for: float, now: float) -> int:
        return len(await self._rows("prune_processes", {"unseen_for": unseen_for, "now": now}))

    async def processes(self, now: float) -> list[ProcessRecord]:
        """Every row, by owner name (the operator's page, `burstbot status`)."""
        rows = await self._rows("all_processes", {"now": now})
        return [from_row(ProcessRecord, row) for row in rows]
