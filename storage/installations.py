"""The store's installations and OAuth states (`bot.core.installations.InstallationBook`).

Tokens arrive encrypted and leave as they came: encryption is the Slack adapter's
(adapters/slack/token_box.py), so neither this file nor the database holds a key.
"""

from __future__ import annotations

from dataclasses import asdict

from bot.core.installations import InstallationRecord
from storage.rows import from_row
from storage.seam import Conn, StoreSeam


def _like(platform: str, workspace: str) -> str:
    """Every conversation id of the workspace (ids never hold '/' inside a part; '%' and '_'
    are escaped by refusing them: Slack team ids are letters and digits)."""
    if not workspace.isalnum():
        raise ValueError(f"not a workspace id: {workspace!r}")
    return f"{platform}/{workspace}/%"


class InstallationSteps(StoreSeam[Conn]):
    async def save_installation(self, record: InstallationRecord, now: float) -> None:
        await self._rows("save_installation", {**asdict(record), "now": now})

    async def installation(self, team_id: str) -> InstallationRecord | None:
        row = await self._one("installation", {"team": team_id})
        return None if row is None else from_row(InstallationRecord, row)

    async def installations(self) -> list[InstallationRecord]:
        rows = await self._rows("all_installations", {})
        return [from_row(InstallationRecord, row) for row in rows]

    async def delete_installation(self, team_id: str) -> bool:
        return await self._one("delete_installation", {"team": team_id}) is not None

    async def claim_token_refresh(
        self, team_id: str, version: int, owner: str, seconds: float, now: float
    ) -> bool:
        params = {"team": team_id, "version": version, "owner": owner, "now": now}
        return await self._one("claim_token_refresh", {**params, "seconds": seconds}) is not None

    async def store_refreshed_token(
        self,
        team_id: str,
        version: int,
        owner: str,
        token: str,
        refresh_token: str | None,
        expires_at: float | None,
    ) -> int | None:
        fence = {"team": team_id, "version": version, "owner": owner}
        params = {**fence, "token": token, "refresh": refresh_token, "expires_at": expires_at}
        row = await self._one("store_refreshed_token", params)
        return None if row is None else int(row[0])

    async def add_oauth_state(self, state: str, expires_at: float) -> None:
        await self._rows("add_oauth_state", {"state": state, "expires_at": expires_at})

    async def consume_oauth_state(self, state: str, now: float) -> bool:
        await self._rows("prune_oauth_states", {"now": now})
        row = await self._one("consume_oauth_state", {"state": state})
        return row is not None and float(row[0]) >= now

    async def workspace_conversations(self, platform: str, workspace: str) -> list[str]:
        rows = await self._rows("workspace_conversations", {"prefix": _like(platform, workspace)})
        return [str(row[0]) for row in rows]

    async def fail_workspace_replies(
        self, platform: str, workspace: str, reason: str, now: float
    ) -> int:
        params = {"prefix": _like(platform, workspace), "error": reason, "now": now}
        return len(await self._rows("fail_workspace_replies", params))
