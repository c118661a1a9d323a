"""Starting Slack's transport: the Web API client, the token checks, the Bolt app with its
workarounds, and the HTTP listener or the Socket Mode connection.

Every Web API call shares one aiohttp session, and the session carries the call timeout: the SDK
applies its own `timeout` only to sessions it makes itself, so a session without one would let a
silent Slack hold a call for aiohttp's five minutes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

import aiohttp
from aiohttp import web
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_bolt.middleware.authorization.async_single_team_authorization import (
    AsyncSingleTeamAuthorization,
)
from slack_bolt.oauth.async_oauth_flow import AsyncOAuthFlow
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from adapters.slack.calls import check_token
from adapters.slack.endpoint import MAX_BODY_BYTES, endpoint, oauth_page, server_log
from adapters.slack.envelopes import guard_envelopes
from bot.config import SlackConfig
from bot.core.errors import BurstbotError, ConfigError

log = logging.getLogger("burstbot.slack")

DEFAULT_API_BASE_URL = "https://slack.com/api/"
API_TIMEOUT_SECONDS = 10
SOCKET_CONNECT_TIMEOUT_SECONDS = 30.0


def web_client(config: SlackConfig, token: str) -> tuple[AsyncWebClient, aiohttp.ClientSession]:
    """The Web API client and the one session (a pool) every call of this workspace uses."""
    base_url = config.api_base_url or DEFAULT_API_BASE_URL
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=API_TIMEOUT_SECONDS))
    client = AsyncWebClient(
        token=token,
        base_url=base_url if base_url.endswith("/") else base_url + "/",
        timeout=API_TIMEOUT_SECONDS,
        session=session,
        retry_handlers=[],  # no silent re-posts: see adapters/slack/outbound.py
    )
    return client, session


async def check_bot_token(client: AsyncWebClient, config: SlackConfig) -> AsyncSlackResponse:
    """`auth.test`: a token Slack refuses is a config error; one that is no bot token too."""
    auth = await check_token(
        client.auth_test(),
        "auth.test",
        f"slack.bot_token_env: Slack rejected the bot token in {config.bot_token_env}",
        f"the Slack Web API at {client.base_url} is unavailable",
    )
    if not auth.get("bot_id"):
        raise ConfigError(
            f"slack.bot_token_env: {config.bot_token_env} is not a bot token (xoxb-…)"
        )
    return auth


def bolt_app(
    client: AsyncWebClient,
    signing_secret: str,
    auth_test: AsyncSlackResponse | None,
    authorize: AsyncAuthorize | None = None,
    flow: AsyncOAuthFlow | None = None,
) -> AsyncApp:
    """One workspace: handed the start-up `auth.test` answer; several (`install = "oauth"`):
    `authorize` finds each event's installation (adapters/slack/workspaces.py), and the flow is
    handed over too, so Bolt never builds its own from `SLACK_CLIENT_ID` in the environment
    (with file stores)."""
    bolt_logger = logging.getLogger("burstbot.slack.bolt")
    bolt_logger.addFilter(_drop_token_unused_warning)
    bolt_logger.addFilter(_drop_not_installed_error)
    bolt = AsyncApp(
        client=client,
        signing_secret=signing_secret,
        process_before_response=True,  # the ack only after the store write (events.py)
        request_verification_enabled=False,  # HTTP: endpoint.py verified the raw body first
        # Bolt's assistant helpers (say, set_status, ...) are not used here, and building them
        # fails on a malformed assistant event before our listener can ack it with a warning
        attaching_conversation_kwargs_enabled=False,
        name="burstbot",
        logger=bolt_logger,
        authorize=cast(Any, authorize),  # Bolt takes an AsyncAuthorize too (its own check)
        oauth_flow=flow,
    )
    if auth_test is not None:
        _authorized_by(bolt, auth_test)
    return bolt


async def serve_http(
    bolt: AsyncApp,
    config: SlackConfig,
    signing_secret: str,
    accepting: Callable[[], bool],
    flow: AsyncOAuthFlow | None = None,
) -> web.AppRunner:
    """The events endpoint; the signature is verified over the raw body before Bolt sees it.
    With `install = "oauth"` also the install page and the OAuth redirect (install.py)."""
    server = web.Application(client_max_size=MAX_BODY_BYTES)
    server.router.add_post(config.http_path, endpoint(bolt, signing_secret, accepting))
    if flow is not None:
        server.router.add_get(config.install_path, oauth_page(flow.handle_installation))
        server.router.add_get(config.redirect_path, oauth_page(flow.handle_callback))
    runner = web.AppRunner(server, access_log=None, logger=server_log)
    await runner.setup()
    reuse_port = config.http_reuse_port or None
    site = web.TCPSite(runner, config.http_host, config.http_port, reuse_port=reuse_port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise BurstbotError(
            f"slack: cannot listen on {config.http_host}:{config.http_port} ({exc.strerror or exc})"
        ) from exc
    log.info("slack: events endpoint on http://%s:%d%s", config.http_host,
             int(runner.addresses[0][1]), config.http_path)  # fmt: skip
    return runner


async def connect_socket(
    bolt: AsyncApp,
    client: AsyncWebClient,
    config: SlackConfig,
    app_token: str,
    on_message: Callable[[Any], Awaitable[None]],
) -> Any:
    """Check the app token with one `apps.connections.open`, then connect with that URL; the
    Socket Mode handler, connected. The SDK's own connect retries forever on any failure; a wrong
    token must fail fast."""
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

    opened = await check_token(
        client.apps_connections_open(app_token=app_token),
        "apps.connections.open",
        f"slack.app_token_env: Slack rejected the app token in {config.app_token_env}",
        "cannot open a Socket Mode connection",
    )
    socket: Any = AsyncSocketModeHandler(bolt, app_token)
    socket.client.wss_uri = opened["url"]
    socket.client.on_message_listeners.append(on_message)
    guard_envelopes(socket.client)  # a bad envelope costs one line, not a traceback
    try:
        await asyncio.wait_for(socket.connect_async(), SOCKET_CONNECT_TIMEOUT_SECONDS)
    except BaseException as exc:
        await socket.close_async()
        if isinstance(exc, TimeoutError):
            raise BurstbotError(
                f"slack: no Socket Mode connection within {SOCKET_CONNECT_TIMEOUT_SECONDS:.0f} s"
            ) from exc
        raise
    return socket


def _authorized_by(bolt: AsyncApp, auth_test: AsyncSlackResponse) -> None:
    """Bolt's single-workspace authorization asks `auth.test` on the first event and, when that
    call fails (a Slack outage), answers the event 200 and drops it: a message acknowledged and
    lost. It gets the answer our start-up check already had, so it never asks."""
    for middleware in bolt._async_middleware_list:
        if isinstance(middleware, AsyncSingleTeamAuthorization):
            middleware.auth_test_result = auth_test


def _drop_not_installed_error(record: logging.LogRecord) -> bool:
    """Bolt logs an event of a workspace with no installation as an ERROR; our authorize has
    said it in one WARNING line already (the event is acked and dropped)."""
    return "the AuthorizeResult (returned value from authorize) for it was not found" not in (
        record.getMessage()
    )


def _drop_token_unused_warning(record: logging.LogRecord) -> bool:
    """Bolt warns `token` is unused (or ignored) when SLACK_BOT_TOKEN is set; we pass the client
    (and with several workspaces, the authorize) on purpose."""
    message = record.getMessage()
    return "`token` will be unused" not in message and "will be ignored" not in message
