"""Each Slack workspace the front end serves, with its own token: one stack per workspace.

A workspace's stack is what one bot token can do there — posting (outbound.py), drafts
(streaming.py), reads (history.py), assistant threads (assistant.py) — built once per workspace
over one shared HTTP session and the shared pacer (whose budgets are per team already). Every Web
API call of a conversation goes through its workspace's stack, so it carries that workspace's
token (G15).

An installed workspace is opened on first use, its token decrypted (token_box.py) and kept in
memory only. A token about to expire is refreshed by the one process whose claim in the store
succeeds (`claim_token_refresh`); the others keep using the current token, still valid, and read
the new one from the store on their next use after it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.agent_sessions import AgentSessions
from adapters.slack.assistant import AssistantThreads
from adapters.slack.calls import call
from adapters.slack.history import History
from adapters.slack.inbound import Identity
from adapters.slack.outbound import Outbound
from adapters.slack.streaming import SlackDrafts
from adapters.slack.token_box import TokenBox, remember_tokens
from bot.core.clock import Clock
from bot.core.errors import DeliveryError
from bot.core.events import ConversationKey, Draft
from bot.core.frontend import PacedDrafts
from bot.core.installations import InstallationBook, InstallationRecord

log = logging.getLogger("burstbot.slack")

REFRESH_CLAIM_SECONDS = 30.0
REFRESH_BEFORE_SECONDS = 300.0  # Slack's tokens live 12 hours; refresh in their last 5 minutes
STORE_RECHECK_SECONDS = 5.0  # how often a process re-reads a token another one may refresh
NOT_INSTALLED = "workspace_not_installed"
"""The reason a reply of an uninstalled workspace fails with (Slack's event in parentheses)."""


@dataclass(eq=False)
class Workspace:
    identity: Identity
    client: AsyncWebClient
    outbound: Outbound
    drafts: SlackDrafts
    history: History
    assistant: AssistantThreads
    sessions: AgentSessions
    token_version: int = 0
    expires_at: float | None = None
    lifetime: float = 0.0  # how long its last token was valid for (its refresh margin's base)
    checked_at: float = 0.0


StackBuilder = Callable[[AsyncWebClient, Identity], Workspace]
"""The front end builds a workspace's stack from its client and identity (app.py)."""


@dataclass(eq=False)
class SingleWorkspace:
    """`install = "token"`: one workspace, whatever team an event names."""

    workspace: Workspace

    async def get(self, team: str) -> Workspace | None:
        return self.workspace

    async def all(self) -> list[Workspace]:
        return [self.workspace]

    def opened(self) -> list[Workspace]:
        return [self.workspace]

    def forget(self, team: str) -> None:
        """A single workspace cannot be uninstalled while running (the process restarts)."""


@dataclass(eq=False, repr=False)
class InstalledWorkspaces:
    """`install = "oauth"`: every workspace installed, from the store."""

    book: InstallationBook
    box: TokenBox
    client: AsyncWebClient  # no token: oauth.v2.access, and the template of each workspace's
    build: StackBuilder
    client_id: str
    client_secret: str
    owner: str
    clock: Clock
    _open: dict[str, Workspace] = field(default_factory=dict, init=False)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict, init=False)

    async def check_key(self) -> int:
        """At start: every stored token decrypts with the key (else one line, exit 2) and is
        re-encrypted under the newest key; how many workspaces are installed."""
        records = await self.book.installations()
        for record in records:
            sealed = self.box.reseal(record.bot_token)
            refresh = (
                None if record.refresh_token is None else self.box.reseal(record.refresh_token)
            )
            if (sealed, refresh) != (record.bot_token, record.refresh_token):
                resealed = replace(record, bot_token=sealed, refresh_token=refresh)
                await self.book.save_installation(resealed, record.installed_at)
        return len(records)

    async def get(self, team: str) -> Workspace | None:
        """The workspace's stack with a valid token, or None when it is not installed."""
        async with self._locks.setdefault(team, asyncio.Lock()):
            workspace = self._open.get(team)
            now = self.clock.now()
            if workspace is not None and not self._stale(workspace, now):
                return workspace
            record = await self.book.installation(team)
            if record is None:
                self.forget(team)
                return None
            if workspace is None or record.token_version != workspace.token_version:
                workspace = self._opened(record, workspace)
            workspace.checked_at = now
            if self._expiring(workspace, now):
                await self._refresh(workspace, record)
            return workspace

    async def all(self) -> list[Workspace]:
        """Every installed workspace, opened (catch-up walks each)."""
        found = [await self.get(r.team_id) for r in await self.book.installations()]
        return [workspace for workspace in found if workspace is not None]

    def opened(self) -> list[Workspace]:
        return list(self._open.values())

    def forget(self, team: str) -> None:
        """Uninstalled: the stack (and the token in it) is dropped."""
        workspace = self._open.pop(team, None)
        if workspace is not None:
            workspace.client.token = None

    # plumbing --------------------------------------------------------------------------------
    def _stale(self, workspace: Workspace, now: float) -> bool:
        """Read the store again: the token nears expiry, or another process may have replaced it
        (a reinstall, an uninstall) since we last looked."""
        return self._expiring(workspace, now) or now - workspace.checked_at > STORE_RECHECK_SECONDS

    @staticmethod
    def _expiring(workspace: Workspace, now: float) -> bool:
        if workspace.expires_at is None:
            return False
        margin = min(REFRESH_BEFORE_SECONDS, workspace.lifetime / 4)
        return workspace.expires_at - now <= margin

    def _opened(self, record: InstallationRecord, workspace: Workspace | None) -> Workspace:
        token = self.box.open(record.bot_token)
        remember_tokens(record.team_id, token)
        if workspace is None:
            identity = Identity(record.team_id, record.bot_user_id, record.bot_id)
            client = AsyncWebClient(
                token=token,
                base_url=self.client.base_url,
                timeout=self.client.timeout,
                session=self.client.session,
                retry_handlers=[],
            )
            workspace = self.build(client, identity)
            self._open[record.team_id] = workspace
        workspace.client.token = token
        workspace.token_version = record.token_version
        self._set_expiry(workspace, record.expires_at)
        return workspace

    def _set_expiry(self, workspace: Workspace, expires_at: float | None) -> None:
        workspace.expires_at = expires_at
        if expires_at is not None:
            workspace.lifetime = max(workspace.lifetime, expires_at - self.clock.now())

    async def _refresh(self, workspace: Workspace, record: InstallationRecord) -> None:
        """Refresh once across processes: only the claim's owner asks Slack; a refresh that
        fails leaves the current token (valid until it expires) and is tried on the next use."""
        if record.refresh_token is None:
            return
        team, now = record.team_id, self.clock.now()
        won = await self.book.claim_token_refresh(
            team, record.token_version, self.owner, REFRESH_CLAIM_SECONDS, now
        )
        if not won:
            return
        refresh_token = self.box.open(record.refresh_token)
        remember_tokens(team, None, refresh_token)
        try:
            answer = await call(
                "oauth.v2.access (refresh)",
                self.client.oauth_v2_access(
                    client_id=self.client_id,
                    client_secret=self.client_secret,
                    grant_type="refresh_token",
                    refresh_token=refresh_token,
                ),
            )
        except DeliveryError as exc:
            log.warning("slack: workspace %s: token not refreshed (%s); retried", team, exc)
            return
        token, refresh = str(answer["access_token"]), answer.get("refresh_token")
        remember_tokens(team, token, None if refresh is None else str(refresh))
        expires_in = answer.get("expires_in")
        expires_at = None if expires_in is None else self.clock.now() + float(expires_in)
        version = await self.book.store_refreshed_token(
            team, record.token_version, self.owner, self.box.seal(token),
            None if refresh is None else self.box.seal(str(refresh)), expires_at,
        )  # fmt: skip
        if version is None:  # our claim expired meanwhile: another process's token stands
            return
        workspace.client.token = token
        workspace.token_version = version
        self._set_expiry(workspace, expires_at)
        log.info("slack: workspace %s: token refreshed", team)


class WorkspaceDrafts(PacedDrafts):
    """The front end's draft surface: each call goes to the draft surface of the conversation's
    workspace (its token, its `chat.update` budget)."""

    nonce_window = 0.0  # Slack never dedupes a post: a draft is found by its metadata

    def __init__(self, workspace_of: Callable[[ConversationKey], Awaitable[Workspace]]) -> None:
        self._of = workspace_of

    async def _drafts(self, key: ConversationKey) -> SlackDrafts:
        return (await self._of(key)).drafts

    async def draft_turn(self, key: ConversationKey, posting: bool) -> bool:
        return await (await self._drafts(key)).draft_turn(key, posting)

    async def post_draft(self, key: ConversationKey, draft: Draft, text: str) -> str:
        return await (await self._drafts(key)).post_draft(key, draft, text)

    async def find_draft(self, key: ConversationKey, draft: Draft) -> str | None:
        return await (await self._drafts(key)).find_draft(key, draft)

    async def edit_draft(self, key: ConversationKey, message_id: str, text: str) -> None:
        await (await self._drafts(key)).edit_draft(key, message_id, text)

    async def delete_draft(self, key: ConversationKey, message_id: str) -> None:
        await (await self._drafts(key)).delete_draft(key, message_id)


@dataclass(eq=False)
class WorkspaceAuthorize(AsyncAuthorize):
    """Bolt's authorize for an event: its workspace's installation, or None (Bolt acks the
    event and drops it; one warning line says so)."""

    workspaces: InstalledWorkspaces

    async def __call__(
        self,
        *,
        context: Any,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None,
        actor_enterprise_id: str | None = None,
        actor_team_id: str | None = None,
        actor_user_id: str | None = None,
    ) -> AuthorizeResult | None:
        workspace = None if not team_id else await self.workspaces.get(team_id)
        if workspace is None:
            log.warning("slack: an event from workspace %s, which is not installed: dropped",
                        team_id)  # fmt: skip
            return None
        identity = workspace.identity
        return AuthorizeResult(
            enterprise_id=enterprise_id, team_id=team_id, bot_token=workspace.client.token,
            bot_id=identity.bot_id, bot_user_id=identity.bot_user_id,
        )  # fmt: skip
