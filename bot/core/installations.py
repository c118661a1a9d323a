"""Workspaces installed through OAuth: the part of the store a front end is handed for them.

A front end that serves several workspaces of one platform (Slack's "Add to Slack") keeps each
workspace's installation here: who the bot is there and its token, which the front end encrypts
before handing it over (`bot_token` and `refresh_token` are ciphertext to the store). A token
that expires is refreshed by one process at a time: `claim_token_refresh` is one conditional
statement, and `store_refreshed_token` only lands for the claim's owner on the version it saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class InstallationRecord:
    team_id: str
    enterprise_id: str
    team_name: str
    app_id: str
    bot_user_id: str
    bot_id: str
    bot_scopes: str
    installer_id: str
    bot_token: str  # encrypted by the front end
    refresh_token: str | None  # encrypted; None without token rotation
    expires_at: float | None  # the bot token's expiry (None: it does not expire)
    installed_at: float
    token_version: int = 1


class InstallationBook(Protocol):
    async def save_installation(self, record: InstallationRecord, now: float) -> None:
        """Insert or replace the workspace's installation (a reinstall bumps its version)."""
        ...

    async def installation(self, team_id: str) -> InstallationRecord | None: ...

    async def installations(self) -> list[InstallationRecord]: ...

    async def delete_installation(self, team_id: str) -> bool:
        """Its tokens gone; True when there was one."""
        ...

    async def claim_token_refresh(
        self, team_id: str, version: int, owner: str, seconds: float, now: float
    ) -> bool:
        """True for the one caller that may refresh this version's token for `seconds`."""
        ...

    async def store_refreshed_token(
        self,
        team_id: str,
        version: int,
        owner: str,
        token: str,
        refresh_token: str | None,
        expires_at: float | None,
    ) -> int | None:
        """The new version, or None when the claim was lost (another process refreshed)."""
        ...

    async def add_oauth_state(self, state: str, expires_at: float) -> None: ...

    async def consume_oauth_state(self, state: str, now: float) -> bool:
        """True once for a state issued and not expired; False for any other or a second use."""
        ...

    async def workspace_conversations(self, platform: str, workspace: str) -> list[str]: ...

    async def fail_workspace_replies(
        self, platform: str, workspace: str, reason: str, now: float
    ) -> int:
        """Fail the workspace's pending replies nobody is posting now; how many."""
        ...

    async def forget_conversation(self, conversation_id: str) -> dict[str, int]: ...


async def forget_workspace(book: InstallationBook, platform: str, workspace: str) -> dict[str, int]:
    """Erase every stored conversation of the workspace as `burstbot forget --conversation` does
    each; the counts summed, with how many conversations."""
    totals: dict[str, int] = {"conversations": 0}
    for conversation_id in await book.workspace_conversations(platform, workspace):
        totals["conversations"] += 1
        for name, count in (await book.forget_conversation(conversation_id)).items():
            totals[name] = totals.get(name, 0) + count
    return totals
