"""The Slack front end: a Bolt `AsyncApp` in Socket Mode or HTTP mode, wired to the engine.

Ack ordering, the reason this file exists in this shape: Slack counts an event as delivered when
it gets the ack (an HTTP 200 in HTTP mode, an envelope reply in Socket Mode). Bolt sends that ack
when the listener returns, but only with `process_before_response=True`; otherwise it acks first
and runs the listener afterwards. So the app is built with `process_before_response=True` in both
modes and the listener returns only after `host.ingest(...)` has stored the message. If storing
fails the listener raises, Bolt answers 500 (HTTP) or sends no ack (Socket Mode), and Slack
delivers the event again; a store that cannot be reached is one warning line per event, not a
traceback. Retries (`X-Slack-Retry-Num`) are handled like first deliveries — the
store dedupes by message id — and so are the `app_mention`/`message` twins of one message. An
event that can never be stored (no channel, a field of the wrong type) is acked with a warning
instead: a retry would fail the same way. In HTTP mode, adapters/slack/endpoint.py checks the
signature before Bolt parses anything.

The `/reset` slash command works the same way: the ack is the command's answer, so it is sent
after the reset is stored, as an ephemeral message only the person who typed it sees.

A thread reply without a mention counts only in a thread we are part of. The store knows the
threads it holds conversations for, and remembers what earlier lookups decided; a reply in a
thread it does not know is held (stored, then acked) and decided in the background with a
`conversations.replies` lookup (history.py), so nothing slow runs before the ack and a failed
lookup (a 429) is retried instead of dropping the message.

Catch-up (bot/core/catch_up.py, history.py) runs after start and after every Socket Mode
reconnect (a new `hello`).

Assistant threads (Slack's AI app surface) are assistant.py's: their events are plain Bolt event
listeners acked after the store write like messages (Bolt's `Assistant` middleware is not used:
it would answer thread messages in its own listeners, outside the burst pipeline).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.middleware.authorization.async_single_team_authorization import (
    AsyncSingleTeamAuthorization,
)
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from adapters.slack import files, inbound
from adapters.slack.assistant import AssistantThreads
from adapters.slack.endpoint import MAX_BODY_BYTES, endpoint, server_log
from adapters.slack.envelopes import guard_envelopes
from adapters.slack.history import History
from adapters.slack.inbound import Identity, Payload
from adapters.slack.outbound import Outbound, delivery_error, slack_error_code, slack_pacer
from adapters.slack.streaming import SlackDrafts
from bot.config import Config, SlackConfig, require_secret
from bot.core.catch_up import Background, CatchUp, CatchUpRun
from bot.core.clock import Clock, SystemClock
from bot.core.errors import BurstbotError, ConfigError, FetchError, StoreError
from bot.core.events import Attachment, ConversationKey, IncomingMessage, Reply, ResetConversation
from bot.core.frontend import Host

log = logging.getLogger("burstbot.slack")

DEFAULT_API_BASE_URL = "https://slack.com/api/"
RESET_COMMAND = "/reset"
RESET_DONE = "History cleared: my next reply here starts fresh."
RESET_IN_THREADS = (
    "Nothing to clear here: in this channel each thread that mentions me is its own "
    "conversation. Start a new thread to start fresh."
)
RESET_REFUSED = "Not allowed here."
RESET_FAILED = "Could not clear the history just now; please try again."
API_TIMEOUT_SECONDS = 10
SOCKET_CONNECT_TIMEOUT_SECONDS = 30.0


class SlackFrontend:
    platform = "slack"

    def __init__(
        self,
        config: SlackConfig,
        bot_token: str,
        signing_secret: str = "",
        app_token: str = "",
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.clock = clock or SystemClock()  # paces draft edits (tests pass the fake clock)
        self.listen_channels = frozenset(config.listen_channels)
        self._bot_token = bot_token
        self._signing_secret = signing_secret
        self._app_token = app_token
        self._host: Host | None = None
        self._client: AsyncWebClient | None = None
        self._session: aiohttp.ClientSession | None = None
        self._outbound: Outbound | None = None
        self._runner: web.AppRunner | None = None
        self._socket: Any = None
        self._history: History | None = None
        self._decider: Background | None = None
        self._catch_up: CatchUp | None = None
        self._hellos = 0
        self.identity = Identity("", "", "")
        self.http_port: int | None = None
        self._accepting = True
        self.drafts: SlackDrafts | None = None  # streaming, once started
        self.assistant: AssistantThreads | None = None  # assistant threads, once started

    # lifecycle --------------------------------------------------------------------------------
    def health(self) -> tuple[bool, str]:
        """`/healthz`: HTTP mode listens, or socket mode's websocket to Slack is open."""
        if self.config.mode == "http":
            listening = self._runner is not None and self._accepting
            return listening, f"http listener on port {self.http_port}" if listening else "down"
        session = None if self._socket is None else self._socket.client.current_session
        connected = session is not None and not session.closed
        return connected, "socket mode connected" if connected else "socket mode disconnected"

    async def start(self, host: Host) -> None:
        try:
            await self._start(host)
        except BaseException:
            await self.stop()  # the app only stops front ends that started
            raise

    async def _start(self, host: Host) -> None:
        self._host = host
        base_url = self.config.api_base_url or DEFAULT_API_BASE_URL
        self._session = aiohttp.ClientSession()  # one pool for every Web API call
        self._client = AsyncWebClient(
            token=self._bot_token,
            base_url=base_url if base_url.endswith("/") else base_url + "/",
            timeout=API_TIMEOUT_SECONDS,
            session=self._session,
            retry_handlers=[],  # no silent re-posts: see adapters/slack/outbound.py
        )
        self._auth_test = await self._check_bot_token(self._client)
        self.identity = Identity(str(self._auth_test["team_id"]), str(self._auth_test["user_id"]),
                                 str(self._auth_test["bot_id"]))  # fmt: skip
        self._outbound = Outbound(
            self._client,
            self.identity,
            indicator=self.config.thinking_indicator,
            reaction=self.config.thinking_reaction,
            max_parts=self.config.max_parts_per_reply,
            pacer=slack_pacer(self.config, self.clock),
        )
        self.assistant = AssistantThreads(self._client, self.identity, host, self.config.assistant)
        self.drafts = SlackDrafts(self._outbound, native=self.assistant.streams_natively)
        self._history = History(self._client, self.identity, self.listen_channels)
        bolt_logger = logging.getLogger("burstbot.slack.bolt")
        bolt_logger.addFilter(_drop_token_unused_warning)
        bolt = AsyncApp(
            client=self._client,
            signing_secret=self._signing_secret,
            process_before_response=True,
            request_verification_enabled=False,  # HTTP: endpoint.py verified the raw body first
            # Bolt's assistant helpers (say, set_status, ...) are not used here, and building them
            # fails on a malformed assistant event before our listener can ack it with a warning
            attaching_conversation_kwargs_enabled=False,
            name="burstbot",
            logger=bolt_logger,
        )
        _authorized_by(bolt, self._auth_test)
        bolt.error(self._on_listener_error)
        bolt.event("message")(self._on_message)
        bolt.event("app_mention")(self._on_app_mention)
        bolt.event("assistant_thread_started")(self._on_assistant_thread_started)
        bolt.event("assistant_thread_context_changed")(self._on_assistant_context_changed)
        bolt.command(RESET_COMMAND)(self._on_reset)
        if self.config.mode == "http":
            await self._serve_http(bolt)
        else:
            await self._connect_socket(bolt)
        self._decider = host.threads.decide_with(self.platform, self._history.thread_is_ours)
        log.info("slack: connected as %s in team %s (%s mode)", self.identity.bot_user_id,
                 self.identity.team_id, self.config.mode)  # fmt: skip

    async def stop_intake(self) -> None:
        """Shutdown: take no more events, keep posting. Slack delivers them again: in HTTP mode
        it retries on our 503 (another process behind the load balancer, or the restarted one);
        in Socket Mode it sends them over the app's other connections, or again later."""
        self._accepting = False
        if self._socket is not None:
            await self._socket.close_async()
            self._socket = None

    async def stop(self) -> None:
        self._accepting = False
        for job in (self._catch_up, self._decider):
            if job is not None:
                await job.stop()
        if self.assistant is not None:
            await self.assistant.stop()
        if self._socket is not None:
            await self._socket.close_async()
            self._socket = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _check_bot_token(self, client: AsyncWebClient) -> AsyncSlackResponse:
        try:
            auth = await client.auth_test()
        except SlackApiError as exc:
            error = slack_error_code(exc)
            if not error:  # not Slack's answer: a proxy's error page
                raise BurstbotError(
                    f"slack: the Slack Web API at {client.base_url} is "
                    f"unavailable ({delivery_error(exc, 'auth.test')})"
                ) from exc
            raise ConfigError(
                f"slack.bot_token_env: Slack rejected the bot token in "
                f"{self.config.bot_token_env} ({error})"
            ) from exc
        except (TimeoutError, SlackClientError, aiohttp.ClientError, OSError) as exc:
            raise BurstbotError(
                f"slack: cannot reach the Slack Web API at {client.base_url} ({exc or type(exc)})"
            ) from exc
        if not auth.get("bot_id"):
            raise ConfigError(
                f"slack.bot_token_env: {self.config.bot_token_env} is not a bot token (xoxb-…)"
            )
        return auth

    async def _serve_http(self, bolt: AsyncApp) -> None:
        """The signature is verified over the raw body before Bolt sees it (endpoint.py)."""
        verified = endpoint(bolt, self._signing_secret, frozenset({RESET_COMMAND}), time.time)

        async def handler(request: web.Request) -> web.StreamResponse:
            if not self._accepting:  # stopping: Slack retries the event elsewhere or later
                return web.Response(status=503, text="shutting down")
            response: web.StreamResponse = await verified(request)
            return response

        server = web.Application(client_max_size=MAX_BODY_BYTES)
        server.router.add_post(self.config.http_path, handler)
        runner = web.AppRunner(server, access_log=None, logger=server_log)
        await runner.setup()
        reuse_port = self.config.http_reuse_port or None
        site = web.TCPSite(
            runner, self.config.http_host, self.config.http_port, reuse_port=reuse_port
        )
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise BurstbotError(
                f"slack: cannot listen on {self.config.http_host}:{self.config.http_port} "
                f"({exc.strerror or exc})"
            ) from exc
        self._runner = runner
        self.http_port = int(runner.addresses[0][1])
        log.info("slack: events endpoint on http://%s:%d%s", self.config.http_host,
                 self.http_port, self.config.http_path)  # fmt: skip

    async def _connect_socket(self, bolt: AsyncApp) -> None:
        """Check the app token with one `apps.connections.open`, then connect with that URL.

        The SDK's own connect retries forever on any failure; a wrong token must fail fast.
        """
        from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

        assert self._client is not None
        try:
            opened = await self._client.apps_connections_open(app_token=self._app_token)
        except SlackApiError as exc:
            error = slack_error_code(exc)
            if not error:
                raise BurstbotError(
                    f"slack: cannot open a Socket Mode connection "
                    f"({delivery_error(exc, 'apps.connections.open')})"
                ) from exc
            raise ConfigError(
                f"slack.app_token_env: Slack rejected the app token in "
                f"{self.config.app_token_env} ({error})"
            ) from exc
        except (TimeoutError, SlackClientError, aiohttp.ClientError, OSError) as exc:
            raise BurstbotError(f"slack: cannot open a Socket Mode connection ({exc})") from exc
        self._socket = AsyncSocketModeHandler(bolt, self._app_token)
        self._socket.client.wss_uri = opened["url"]
        self._socket.client.on_message_listeners.append(self._on_socket_message)
        guard_envelopes(self._socket.client)  # a bad envelope costs one line, not a traceback
        try:
            await asyncio.wait_for(self._socket.connect_async(), SOCKET_CONNECT_TIMEOUT_SECONDS)
        except TimeoutError as exc:
            raise BurstbotError(
                f"slack: no Socket Mode connection within {SOCKET_CONNECT_TIMEOUT_SECONDS:.0f} s"
            ) from exc

    # convert in -------------------------------------------------------------------------------
    async def _on_listener_error(self, error: Exception) -> None:
        """Bolt answers 500 either way (Slack delivers the event again); only a failure that is
        not the store's keeps its traceback."""
        if isinstance(error, StoreError):
            log.warning("slack: event not stored (%s); Slack delivers it again", error)
        else:
            log.error("slack: an event listener failed", exc_info=error)

    async def _on_message(self, event: Payload, body: Payload) -> None:
        """Bolt acks when this returns: only after the event is stored (see module docstring)."""
        await self._accept(event, body, mentioned=False)

    async def _on_app_mention(self, event: Payload, body: Payload) -> None:
        await self._accept(event, body, mentioned=True)

    async def _accept(self, event: Payload, body: Payload, mentioned: bool) -> None:
        assert self._host is not None and self._outbound is not None
        problem = inbound.event_problem(event)
        if problem is not None:  # Slack would only send it again: ack it and say why
            log.warning("slack: ignored a malformed %r event %r: %s", event.get("type"),
                        body.get("event_id"), problem)  # fmt: skip
            return
        team = str(body.get("team_id") or event.get("team") or self.identity.team_id)
        subtype = str(event.get("subtype") or "")
        if subtype in ("message_changed", "message_deleted"):
            change = inbound.change(team, event, self.identity, self.listen_channels)
            if change is not None:
                await self._host.ingest(change)
            return
        if subtype not in inbound.NEW_MESSAGE_SUBTYPES or inbound.is_from_bot(event, self.identity):
            return
        channel, channel_type = str(event.get("channel", "")), str(event.get("channel_type", ""))
        placement = inbound.place(team, channel, channel_type, event, self.identity,
                                  self.listen_channels, mentioned)  # fmt: skip
        if placement is None:
            return
        key = placement.key
        message = inbound.new_message(placement, channel, event, self.identity)
        assert isinstance(message, IncomingMessage)
        if (
            placement.needs_thread_check
            and event.get("parent_user_id") != self.identity.bot_user_id
        ):
            ours = await self._host.threads.status(key)
            if ours is False:
                return
            if ours is None:  # stored now, decided in the background: acked either way
                await self._host.threads.hold(message)
                return
        result = await self._host.ingest(message)
        if result.status in ("accepted", "duplicate") and self.assistant is not None:
            await self.assistant.message_accepted(message)

    async def _on_assistant_thread_started(self, body: Payload) -> None:
        """Noted in the store before Bolt acks (a retry finds the note); prompts come after."""
        assert self.assistant is not None
        await self.assistant.started(body, self._team_of(body))

    async def _on_assistant_context_changed(self, body: Payload) -> None:
        assert self.assistant is not None
        await self.assistant.context_changed(body, self._team_of(body))

    def _team_of(self, body: Payload) -> str:
        return str(body.get("team_id") or self.identity.team_id)

    async def _on_reset(self, ack: AsyncAck, body: Payload) -> None:
        """`/reset`: Bolt sends the ack (our ephemeral answer) when this returns."""
        request = inbound.reset_request(body, self.identity.team_id)
        answer = RESET_REFUSED if request is None else await self._reset(request)
        await ack(text=answer, response_type="ephemeral")

    async def _reset(self, request: ResetConversation) -> str:
        assert self._host is not None
        try:
            result = await self._host.ingest(request)
        except Exception:  # the person gets a clear line instead of Slack's "failed"
            log.exception("slack: /reset of %s failed", request.key.id)
            return RESET_FAILED
        if result.status != "history":
            return RESET_REFUSED
        if request.is_dm or request.key.channel in self.listen_channels:
            return RESET_DONE
        return RESET_IN_THREADS

    # catch-up ---------------------------------------------------------------------------------
    def use_catch_up(self, catch_up: CatchUp) -> None:
        self._catch_up = catch_up

    async def catch_up(self, run: CatchUpRun) -> None:
        assert self._history is not None, "catch-up before start"
        await self._history.catch_up(run)

    async def _on_socket_message(self, message: Any) -> None:
        """A `hello` opens every Socket Mode connection: after the first, we reconnected, and
        events sent meanwhile may be lost. Events of the new connection arrive after it."""
        try:
            kind = json.loads(message.data).get("type")
        except (TypeError, ValueError, AttributeError):
            return
        if kind != "hello":
            return
        self._hellos += 1
        if self._hellos > 1 and self._catch_up is not None:
            log.info("slack: reconnected; catching up")
            self._catch_up.request(self._catch_up.clock.now())

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        """A file's bytes, with the bot token (see adapters/slack/files.py)."""
        if self._session is None:
            raise FetchError("slack: not connected")
        base = urlsplit(self.config.api_base_url or DEFAULT_API_BASE_URL).hostname
        hosts = files.SLACK_FILE_HOSTS | {base or ""}
        return await files.fetch(self._session, self._bot_token, attachment, max_bytes, hosts)

    # convert out ------------------------------------------------------------------------------
    async def deliver(self, reply: Reply) -> list[str]:
        assert self._outbound is not None and self.drafts is not None, "deliver before start"
        first = None if reply.draft is None else functools.partial(self.drafts.finish, reply)
        posted = await self._outbound.deliver(reply, first)
        if self.assistant is not None:
            try:
                await self.assistant.reply_delivered(reply)
            except BurstbotError as exc:  # a title is a nicety: the reply is posted
                log.warning("reply %s: no thread title (%s)", reply.id, exc)
        return posted

    async def prompt_context(self, key: ConversationKey) -> str:
        """For the system prompt: the channel an assistant thread's user is viewing."""
        return "" if self.assistant is None else await self.assistant.prompt_context(key)

    def reconfigure(self, config: Config) -> None:
        """A reload: `[slack.assistant]` is live; the rest of `[slack]` needs a restart."""
        self.config = self.config.model_copy(update={"assistant": config.slack.assistant})
        if self.assistant is not None:
            self.assistant.reconfigure(config.slack.assistant)

    async def show_busy(self, key: ConversationKey, busy: bool, message_id: str) -> None:
        if self._outbound is not None:
            await self._outbound.show_busy(key, busy, message_id)


def _authorized_by(bolt: AsyncApp, auth_test: AsyncSlackResponse) -> None:
    """Bolt's single-workspace authorization asks `auth.test` on the first event and, when that
    call fails (a Slack outage), answers the event 200 and drops it: a message acknowledged and
    lost. It gets the answer our start-up check already had, so it never asks."""
    for middleware in bolt._async_middleware_list:
        if isinstance(middleware, AsyncSingleTeamAuthorization):
            middleware.auth_test_result = auth_test


def _drop_token_unused_warning(record: logging.LogRecord) -> bool:
    """Bolt warns `token` is unused when SLACK_BOT_TOKEN is set; we pass the client on purpose."""
    return "`token` will be unused" not in record.getMessage()


def build_slack_frontend(config: SlackConfig) -> SlackFrontend:
    """Read the secrets the config names (one clear line if one is missing) and build."""
    if not config.http_path.startswith("/"):
        raise ConfigError(f"slack.http_path: must start with '/' (got {config.http_path!r})")
    bot_token = require_secret(config.bot_token_env, "slack.bot_token_env")
    if config.mode == "http":
        secret = require_secret(config.signing_secret_env, "slack.signing_secret_env")
        return SlackFrontend(config, bot_token, signing_secret=secret)
    app_token = require_secret(config.app_token_env, "slack.app_token_env")
    if not app_token.startswith("xapp-"):
        raise ConfigError(
            f"slack.app_token_env: {config.app_token_env} must hold an app-level token (xapp-…)"
        )
    return SlackFrontend(config, bot_token, app_token=app_token)
