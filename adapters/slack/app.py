"""The Slack front end: a Bolt app in Socket Mode or HTTP mode, wired to the host.

What each part does: transport.py starts the Web API client, checks the tokens and connects
(an HTTP listener or Socket Mode); events.py turns Bolt's events into the host's calls (and says
why each is acked only after it is stored); outbound.py and streaming.py post replies and drafts;
history.py reads what was missed; assistant.py runs Slack's assistant threads. Every Web API call
goes through calls.py, one mapping of every failure into the core's errors.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from adapters.slack import files, transport
from adapters.slack.assistant import AssistantThreads
from adapters.slack.events import RESET_COMMAND, SlackEvents
from adapters.slack.history import History
from adapters.slack.inbound import Identity
from adapters.slack.outbound import Outbound, slack_pacer
from adapters.slack.streaming import SlackDrafts
from bot.config import Config, Reconfigurable, SlackConfig, require_secret
from bot.core.background import Background
from bot.core.catch_up import CatchUp, CatchUpRun
from bot.core.clock import Clock, SystemClock
from bot.core.errors import BurstbotError, ConfigError, FetchError
from bot.core.events import Attachment, ConversationKey, Reply
from bot.core.frontend import (
    CatchUpSource,
    Drafting,
    FileSource,
    Healthy,
    Host,
    PromptContext,
    StopsIntake,
)

log = logging.getLogger("burstbot.slack")


class SlackFrontend(
    Healthy, Drafting, StopsIntake, PromptContext, Reconfigurable, CatchUpSource, FileSource
):
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
        self._session: aiohttp.ClientSession | None = None
        self._outbound: Outbound | None = None
        self._runner: web.AppRunner | None = None
        self._socket: Any = None
        self._history: History | None = None
        self._decider: Background | None = None
        self._catch_up: CatchUp | None = None
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
        client, self._session = transport.web_client(self.config, self._bot_token)
        auth_test = await transport.check_bot_token(client, self.config)
        self.identity = Identity(str(auth_test["team_id"]), str(auth_test["user_id"]),
                                 str(auth_test["bot_id"]))  # fmt: skip
        self._outbound = Outbound(
            client,
            self.identity,
            indicator=self.config.thinking_indicator,
            reaction=self.config.thinking_reaction,
            max_parts=self.config.max_parts_per_reply,
            pacer=slack_pacer(self.config, self.clock),
        )
        self.assistant = AssistantThreads(client, self.identity, host, self.config.assistant)
        self.drafts = SlackDrafts(self._outbound, native=self.assistant.streams_natively)
        self._history = History(client, self.identity, self.listen_channels)
        events = SlackEvents(host, self.identity, self.listen_channels, self.assistant,
                             lambda: self._catch_up)  # fmt: skip
        bolt = transport.bolt_app(client, self._signing_secret, auth_test)
        events.listen(bolt)
        if self.config.mode == "http":
            self._runner = await transport.serve_http(
                bolt, self.config, self._signing_secret, frozenset({RESET_COMMAND}),
                lambda: self._accepting, time.time,
            )  # fmt: skip
            self.http_port = int(self._runner.addresses[0][1])
        else:
            self._socket = await transport.connect_socket(
                bolt, client, self.config, self._app_token, events.on_socket_message
            )
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

    # catch-up ---------------------------------------------------------------------------------
    def use_catch_up(self, catch_up: CatchUp) -> None:
        self._catch_up = catch_up

    async def catch_up(self, run: CatchUpRun) -> None:
        assert self._history is not None, "catch-up before start"
        await self._history.catch_up(run)

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        """A file's bytes, with the bot token (see adapters/slack/files.py)."""
        if self._session is None:
            raise FetchError("slack: not connected")
        base = urlsplit(self.config.api_base_url or transport.DEFAULT_API_BASE_URL).hostname
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
