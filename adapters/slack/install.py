"""`install = "oauth"`: "Add to Slack" for any number of workspaces, with our store behind Bolt.

Bolt has the flow (`AsyncOAuthFlow`: the install page, the state parameter and its cookie, the
code exchanged at `oauth.v2.access`, then `auth.test` for the bot id); this file gives it our
store to keep installations and states in, tokens encrypted on the way in (token_box.py), and the
pages a person sees at the end: where the bot was installed, or why not, in one line (the same
line in the log).

A state is single use, expires after `STATE_SECONDS` and carries an HMAC with the state secret,
so a forged one is refused before the store is asked. Org-wide (Enterprise Grid) installs are
refused with a clear page: each workspace of an org is installed on its own.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import logging
import secrets
from dataclasses import dataclass
from logging import Logger
from typing import Any

from slack_bolt.error import BoltError
from slack_bolt.oauth.async_callback_options import (
    AsyncCallbackOptions,
    AsyncFailureArgs,
    AsyncSuccessArgs,
)
from slack_bolt.oauth.async_oauth_flow import AsyncOAuthFlow
from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.oauth.installation_store.models.bot import Bot
from slack_sdk.oauth.installation_store.models.installation import Installation
from slack_sdk.oauth.state_store.async_state_store import AsyncOAuthStateStore
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.token_box import TokenBox, remember_tokens
from bot.config import SlackConfig
from bot.core.clock import Clock
from bot.core.installations import InstallationBook, InstallationRecord

log = logging.getLogger("burstbot.slack")
_BOLT_LOG = logging.getLogger("burstbot.slack.bolt")

STATE_SECONDS = 600
BOT_SCOPES = (
    "app_mentions:read", "channels:history", "groups:history", "im:history", "mpim:history",
    "chat:write", "reactions:write", "commands", "users:read", "files:read", "assistant:write",
    "channels:read", "groups:read",
)  # fmt: skip
"""The bot scopes of manifest.yml (a test keeps the two the same)."""

WHY_NOT = {
    "access_denied": "the install was cancelled on Slack's page",
    "invalid_browser": "the install was finished in another browser than it was started in; "
    "start again from the install page",
    "invalid_state": "the install link expired or was used already; start again from the "
    "install page",
    "missing_code": "Slack's answer carried no code; start again from the install page",
    "invalid_code": "Slack refused the install's code (expired or used already); start again "
    "from the install page",
    "storage_error": "the install could not be stored",
}


def authorize_url(config: SlackConfig) -> str:
    """Slack's authorize page beside its Web API (`https://slack.com/oauth/v2/authorize`, or the
    test server's under `slack.api_base_url`)."""
    base = (config.api_base_url or "https://slack.com/api/").rstrip("/")
    return base.removesuffix("/api") + "/oauth/v2/authorize"


@dataclass(eq=False, repr=False)
class StoreInstallations(AsyncInstallationStore):
    """Bolt's installation store on ours; bot installs only (no user tokens are asked for)."""

    book: InstallationBook
    box: TokenBox
    clock: Clock

    @property
    def logger(self) -> Logger:
        return log

    async def async_save(self, installation: Installation) -> None:
        if installation.is_enterprise_install or not installation.team_id:
            raise BoltError("org-wide installs are not supported: install into each workspace")
        if not installation.bot_token:
            raise BoltError("the install carried no bot token")
        expires = installation.bot_token_expires_at
        refresh = installation.bot_refresh_token
        remember_tokens(installation.team_id, installation.bot_token, refresh)
        record = InstallationRecord(
            team_id=installation.team_id, enterprise_id=installation.enterprise_id or "",
            team_name=installation.team_name or installation.team_id,
            app_id=installation.app_id or "", bot_user_id=installation.bot_user_id or "",
            bot_id=installation.bot_id or "", bot_scopes=",".join(installation.bot_scopes or ()),
            installer_id=installation.user_id or "",
            bot_token=self.box.seal(installation.bot_token),
            refresh_token=None if refresh is None else self.box.seal(refresh),
            expires_at=None if expires is None else float(expires),
            installed_at=self.clock.now(),
        )  # fmt: skip
        await self.book.save_installation(record, self.clock.now())

    async def async_find_bot(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        is_enterprise_install: bool | None = False,
    ) -> Bot | None:
        installation = await self.async_find_installation(
            enterprise_id=enterprise_id, team_id=team_id
        )
        return None if installation is None else installation.to_bot()

    async def async_find_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Installation | None:
        record = None if not team_id else await self.book.installation(team_id)
        if record is None:
            return None
        refresh = None if record.refresh_token is None else self.box.open(record.refresh_token)
        bot_token = self.box.open(record.bot_token)
        remember_tokens(record.team_id, bot_token, refresh)
        return Installation(
            app_id=record.app_id, enterprise_id=record.enterprise_id or None,
            team_id=record.team_id, team_name=record.team_name,
            bot_token=bot_token, bot_id=record.bot_id,
            bot_user_id=record.bot_user_id, bot_scopes=record.bot_scopes,
            bot_refresh_token=refresh,
            bot_token_expires_at=None if record.expires_at is None else int(record.expires_at),
            user_id=record.installer_id, installed_at=record.installed_at,
        )  # fmt: skip


class StoreOAuthStates(AsyncOAuthStateStore):
    """Single-use states in the store, signed with the state secret."""

    def __init__(self, book: InstallationBook, secret: str, clock: Clock) -> None:
        self.book = book
        self.secret = secret.encode()
        self.clock = clock

    @property
    def logger(self) -> Logger:
        return log

    def _signature(self, nonce: str) -> str:
        return hmac.new(self.secret, nonce.encode(), hashlib.sha256).hexdigest()[:32]

    async def async_issue(self, *args: Any, **kwargs: Any) -> str:
        nonce = secrets.token_urlsafe(24)
        state = f"{nonce}.{self._signature(nonce)}"
        await self.book.add_oauth_state(state, self.clock.now() + STATE_SECONDS)
        return state

    async def async_consume(self, state: str) -> bool:
        nonce, _, signature = (state or "").rpartition(".")
        if not nonce or not hmac.compare_digest(signature, self._signature(nonce)):
            return False
        return await self.book.consume_oauth_state(state, self.clock.now())


def oauth_flow(
    config: SlackConfig,
    client: AsyncWebClient,
    installations: StoreInstallations,
    states: StoreOAuthStates,
    client_id: str,
    client_secret: str,
) -> AsyncOAuthFlow:
    settings = AsyncOAuthSettings(
        client_id=client_id,
        client_secret=client_secret,
        scopes=list(BOT_SCOPES),
        redirect_uri=config.redirect_url or None,
        install_path=config.install_path,
        redirect_uri_path=config.redirect_path,
        callback_options=AsyncCallbackOptions(success=_installed, failure=_not_installed),
        authorization_url=authorize_url(config),
        installation_store=installations,
        installation_store_bot_only=True,
        state_store=states,
        state_expiration_seconds=STATE_SECONDS,
    )
    return InstallFlow(client=client, settings=settings, logger=_BOLT_LOG)


class InstallFlow(AsyncOAuthFlow):
    """Bolt's flow with our install page: a plain link, nothing fetched from elsewhere."""

    async def build_install_page_html(self, url: str, request: AsyncBoltRequest) -> str:
        link = f'<a id="add-to-slack" href="{html.escape(url)}">Add to Slack</a>'
        return _page(200, "Install burstbot", f"Add burstbot to your Slack workspace: {link}").body


async def _installed(args: AsyncSuccessArgs) -> BoltResponse:
    installation = args.installation
    name = installation.team_name or installation.team_id or "?"
    log.info("slack: installed in workspace %s (%s)", installation.team_id, name)
    return _page(200, "Installed", f"burstbot is installed in <b>{html.escape(name)}</b>. "
                 "Open Slack and send it a direct message to start.")  # fmt: skip


async def _not_installed(args: AsyncFailureArgs) -> BoltResponse:
    why = WHY_NOT.get(args.reason, f"Slack answered {args.reason}")
    if args.error is not None:
        why = f"{why} ({args.error})"
    log.warning("slack: an install failed: %s", why)
    sentence = html.escape(why[:1].upper() + why[1:])
    return _page(args.suggested_status_code, "Not installed", sentence)


def _page(status: int, title: str, body: str) -> BoltResponse:
    text = (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>burstbot: {title}</title></head>'
        f'<body><h1>{title}</h1><p id="outcome">{body}</p></body></html>'
    )
    return BoltResponse(status=status, body=text, headers={"Content-Type": "text/html"})
