"""The Messages API's limits shared by every process on one database (`bot.core.admission`):
one row per API key's name, read with its age on the database's clock and replaced only by a
save that finds the version it read (a compare-and-swap; the loser reads again)."""

from __future__ import annotations

from bot.core.admission import Limits, SharedLimits
from storage.seam import Conn, StoreSeam


class ApiLimitSteps(StoreSeam[Conn]):
    async def api_limits(self, scope: str, now: float) -> SharedLimits | None:
        row = await self._one("api_limits", {"scope": scope, "now": now})
        if row is None:
            return None
        return SharedLimits(
            Limits.from_json(str(row["state"])), float(row["age"]), int(row["version"])
        )

    async def save_api_limits(
        self, scope: str, limits: Limits, version: int | None, now: float
    ) -> bool:
        params = {"scope": scope, "state": limits.to_json(), "now": now}
        if version is None:
            return await self._one("insert_api_limits", params) is not None
        return await self._one("save_api_limits", {**params, "version": version}) is not None
