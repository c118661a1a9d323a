"""The Messages API's limits shared by every process on one database (`bot.core.admission`):
one row per API key's name, read with its age on the database's clock and replaced only by a
save that finds the version it read (a compare-and-swap; the loser reads again)."""

from __future__ import annotations

from bot.core.admission import Limits, SharedLimits
from storage.rows import Row
from storage.seam import Conn, StoreSeam


def _shared(row: Row) -> SharedLimits:
    limits = Limits.from_json(str(row["state"]))
    return SharedLimits(limits, float(row["age"]), int(row["version"]))


class ApiLimitSteps(StoreSeam[Conn]):
    async def api_limits(self, scope: str, now: float) -> SharedLimits | None:
        row = await self._one("api_limits", {"scope": scope, "now": now})
        return None if row is None else _shared(row)

    async def all_api_limits(self, now: float) -> list[tuple[str, SharedLimits]]:
        """Every key's limits (`burstbot status`)."""
        rows = await self._rows("all_api_limits", {"now": now})
        return [(str(r["scope"]), _shared(r)) for r in rows]

    async def save_api_limits(
        self, scope: str, limits: Limits, version: int | None, now: float
    ) -> bool:
        params = {"scope": scope, "state": limits.to_json(), "now": now}
        if version is None:
            return await self._one("insert_api_limits", params) is not None
        return await self._one("save_api_limits", {**params, "version": version}) is not None
