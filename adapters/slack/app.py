"""The Slack front end: a Bolt app in Socket Mode or HTTP mode, wired to the host.

What each part does: transport.py starts the Web API client, checks the tokens and connects
(an HTTP listener or Socket Mode); events.py turns Bolt's events into the host's calls (and says
why each is acked only after it is stored); outbound.py and streaming.py post replies and drafts;
stop_button.py puts the Stop button on drafts and takes its clicks, feedback.py the 👍/👎 buttons
on answers and their votes, approval_cards.py posts approval cards and takes their Approve and
Deny; agent_sessions.py shows a thread's answer as Slack's agent session and takes its stops;
history.py reads what was missed; assistant.py runs Slack's assistant threads. Every Web API call
goes through calls.py, one mapping of every failure into the core's errors.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import socket
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import files, transport
from adapters.slack.agent_catch_up import AgentDmCatchUp
from adapters.slack.agent_sessions import AgentSessions
from adapters.slack.approval_cards import ApprovalButtons, end_card, post_card
from adapters.slack.assistant import AssistantThreads
from adapters.slack.events import SlackEvents
from adapters.slack.feedback import FeedbackButtons
from adapters.slack.history import History
from adapters.slack.inbound import Identity
from adapters.slack.install import StoreInstallations, StoreOAuthStates, oauth_flow
from adapters.slack.native_stream import NativeStreams
from adapters.slack.outbound import Outbound, slack_pacer
from adapters.slack.status_keeper import StatusKeeper
from adapters.slack.stop_button import StopButtons
from adapters.slack.streaming import SlackDrafts
from adapters.slack.token_box import TokenBox
from adapters.slack.uninstall import Uninstalls
from adapters.slack.workspaces import (
    NOT_INSTALLED,
    InstalledWorkspaces,
    SingleWorkspace,
    Workspace,
    WorkspaceAuthorize,
    WorkspaceDrafts,
)
from bot.config import Config, Reconfigurable, SlackConfig, require_secret
from bot.core.background import Background
from bot.core.catch_up import CatchUp, CatchUpRun
from bot.core.clock import Clock, SystemClock
from bot.core.errors import BurstbotError, ConfigError, FetchError, PermanentDeliveryError
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


@dataclass(frozen=True)
class OAuthSecrets:
    """`install = "oauth"`: the app's credentials and the key its stored tokens are under."""

    client_id: str
    client_secret: str
    state_secret: str
    box: TokenBox


class SlackFrontend(
    Healthy, Drafting, StopsIntake, PromptContext, Reconfigurable, CatchUpSource, FileSource
):
    platform = "slack"

    def __init__(
        self,
        config: SlackConfig,
        bot_token: str = "",
        signing_secret: str = "",
        app_token: str = "",
        clock: Clock | None = None,
        oauth: OAuthSecrets | None = None,
        owner: str = "",
    ) -> None:
        self.config = config
        self.clock = clock or SystemClock()  # paces draft edits (tests pass the fake clock)
        self.listen_channels = frozenset(config.listen_channels)
        self._bot_token = bot_token
        self._signing_secret = signing_secret
        self._app_token = app_token
        self._oauth = oauth
        self._owner = owner or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self._socket: Any = None
        self._decider: Background | None = None
        self._catch_up: CatchUp | None = None
        self._host: Host | None = None
        self.workspaces: SingleWorkspace | InstalledWorkspaces | None = None
        self.http_port: int | None = None
        self._accepting = True
        self.drafts: WorkspaceDrafts | None = None  # streaming, once started
        self.stop_buttons: StopButtons | None = None
        self.feedback_buttons: FeedbackButtons | None = None
        self.approval_buttons: ApprovalButtons | None = None
        self.statuses = StatusKeeper(self.clock)  # assistant statuses kept up while unanswered

    @property
    def only(self) -> Workspace:
        """The one workspace (`install = "token"`)."""
        assert isinstance(self.workspaces, SingleWorkspace), "several workspaces: no only one"
        return self.workspaces.workspace

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
        client, self._session = transport.web_client(self.config, self._bot_token)
        self._pacer = slack_pacer(self.config, self.clock)
        if self._oauth is None:
            auth_test = await transport.check_bot_token(client, self.config)
            identity = Identity(str(auth_test["team_id"]), str(auth_test["user_id"]),
                                str(auth_test["bot_id"]))  # fmt: skip
            self.workspaces = SingleWorkspace(self._stack(client, identity))
            bolt = transport.bolt_app(client, self._signing_secret, auth_test)
            flow = None
        else:
            box, oauth = self._oauth.box, self._oauth
            self.workspaces = InstalledWorkspaces(
                host.installations, box, client, self._stack, oauth.client_id,
                oauth.client_secret, self._owner, self.clock,
            )  # fmt: skip
            installed = await self.workspaces.check_key()
            flow = oauth_flow(
                self.config, client, StoreInstallations(host.installations, box, self.clock),
                StoreOAuthStates(host.installations, oauth.state_secret, self.clock),
                oauth.client_id, oauth.client_secret,
            )  # fmt: skip
            authorize = WorkspaceAuthorize(self.workspaces)
            bolt = transport.bolt_app(client, self._signing_secret, None, authorize, flow)
            log.info('slack: %d workspaces installed; surface "%s"', installed,
                     self.config.surface)  # fmt: skip
        uninstalls = Uninstalls(host, self.workspaces, self.config, self.clock)
        self.drafts = WorkspaceDrafts(self._workspace)
        events = SlackEvents(host, self.workspaces, self.listen_channels, uninstalls,
                             lambda: self._catch_up)  # fmt: skip
        events.listen(bolt)
        self.stop_buttons = StopButtons(host)
        self.stop_buttons.listen(bolt)
        self.feedback_buttons = FeedbackButtons(host)
        self.feedback_buttons.listen(bolt)
        self.approval_buttons = ApprovalButtons(host)
        self.approval_buttons.listen(bolt)
        if self.config.mode == "http":
            self._runner = await transport.serve_http(
                bolt, self.config, self._signing_secret, lambda: self._accepting, flow
            )
            self.http_port = int(self._runner.addresses[0][1])
        else:
            if flow is not None:
                log.warning(
                    'slack: install = "oauth" in socket mode: workspaces are '
                    "installed from Slack's app settings (no install page is served)"
                )
            self._socket = await transport.connect_socket(
                bolt, client, self.config, self._app_token, events.on_socket_message
            )
        self._decider = host.threads.decide_with(self.platform, self._thread_is_ours)
        if isinstance(self.workspaces, SingleWorkspace):
            identity = self.workspaces.workspace.identity
            log.info('slack: connected as %s in team %s (%s mode, surface "%s")',
                     identity.bot_user_id, identity.team_id, self.config.mode,
                     self.config.surface)  # fmt: skip

    def _stack(self, client: AsyncWebClient, identity: Identity) -> Workspace:
        """One workspace's stack (adapters/slack/workspaces.py)."""
        outbound = Outbound(
            client,
            identity,
            indicator=self.config.thinking_indicator,
            reaction=self.config.thinking_reaction,
            max_parts=self.config.max_parts_per_reply,
            pacer=self._pacer,
        )
        host = cast(Host, self._host)  # set by start, before any stack is built
        assistant = AssistantThreads(
            client, identity, host, self.config.assistant, self.config.surface
        )
        sessions = AgentSessions(outbound, host)
        streams = NativeStreams(client, identity, display=self.config.task_display,
                                max_age=self.config.stream_max_seconds,
                                now=self.clock.monotonic)  # fmt: skip
        drafts = SlackDrafts(outbound, assistant.is_assistant_thread, sessions.serves_stop, streams)
        history = History(client, identity, self.listen_channels, AgentDmCatchUp(assistant))
        return Workspace(identity, client, outbound, drafts, history, assistant, sessions)

    async def _workspace(self, key: ConversationKey) -> Workspace:
        """The conversation's workspace, or the named permanent failure: it is not installed."""
        assert self.workspaces is not None, "used before start"
        workspace = await self.workspaces.get(key.workspace)
        if workspace is None:
            raise PermanentDeliveryError(f"slack: {NOT_INSTALLED} ({key.workspace})")
        return workspace

    async def stop_intake(self) -> None:
        """Shutdown: take no more events, keep posting. Slack delivers them again: in HTTP mode
        it retries on our 503 (another process behind the load balancer, or the restarted one);
        in Socket Mode it sends them over the app's other connections, or again later."""
        self._accepting = False
        if self._socket is not None:
            await self._socket.close_async()
            self._socket = None

    async def stop(self) -> None:
        await self.stop_intake()
        for job in (self._catch_up, self._decider):
            if job is not None:
                await job.stop()
        for buttons in (self.stop_buttons, self.feedback_buttons, self.approval_buttons):
            if buttons is not None:
                await buttons.idle()  # notices to clickers on their way
        await self.statuses.close()
        for workspace in [] if self.workspaces is None else self.workspaces.opened():
            await workspace.assistant.stop()
            await workspace.sessions.idle()  # notices to people who pressed a session's Stop
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
        """Each installed workspace in turn, with its own token."""
        assert self.workspaces is not None, "catch-up before start"
        for workspace in await self.workspaces.all():
            await workspace.history.catch_up(run)

    async def _read_workspace(self, key: ConversationKey) -> Workspace:
        """`_workspace` for a read: not installed is a permanent `FetchError`."""
        try:
            return await self._workspace(key)
        except PermanentDeliveryError as exc:
            raise FetchError(str(exc), permanent=True) from exc

    async def _thread_is_ours(self, key: ConversationKey) -> bool:
        return await (await self._read_workspace(key)).history.thread_is_ours(key)

    async def fetch_attachment(
        self, key: ConversationKey, attachment: Attachment, max_bytes: int
    ) -> bytes:
        """A file's bytes, with its workspace's bot token (see adapters/slack/files.py)."""
        if self._session is None:
            raise FetchError("slack: not connected")
        workspace = await self._read_workspace(key)
        base = urlsplit(self.config.api_base_url or transport.DEFAULT_API_BASE_URL).hostname
        hosts = files.SLACK_FILE_HOSTS | {base or ""}
        token = str(workspace.client.token or "")
        return await files.fetch(self._session, token, attachment, max_bytes, hosts)

    # convert out ------------------------------------------------------------------------------
    async def deliver(self, reply: Reply) -> list[str]:
        workspace = await self._workspace(reply.key)
        first = None if reply.draft is None else functools.partial(workspace.drafts.finish, reply)
        if reply.card is not None or reply.ends_card is not None:
            # an approval card, posted with its buttons, or its ending (the card edited, the
            # buttons gone); where the thread shows steps, the wait shows as a task
            card = post_card if reply.card is not None else end_card
            display = await workspace.drafts.task_display(reply.key)
            first = functools.partial(card, workspace.outbound, reply, display=display)
        posted = await workspace.outbound.deliver(reply, first)
        try:
            await workspace.assistant.reply_delivered(reply)
        except BurstbotError as exc:  # a title is a nicety: the reply is posted
            log.warning("reply %s: no thread title (%s)", reply.id, exc)
        return posted

    async def prompt_context(self, key: ConversationKey) -> str:
        """For the system prompt: the channel an assistant thread's user is viewing."""
        return await (await self._workspace(key)).assistant.prompt_context(key)

    def reconfigure(self, config: Config) -> None:
        """A reload: `[slack.assistant]` is live (the next assistant thread gets the new prompts,
        greeting and title rule); the rest of `[slack]` needs a restart."""
        self.config = self.config.model_copy(update={"assistant": config.slack.assistant})
        for workspace in [] if self.workspaces is None else self.workspaces.opened():
            workspace.assistant.config = config.slack.assistant

    async def show_busy(self, key: ConversationKey, busy: bool, message_id: str) -> None:
        """An agent session's status, else the assistant thread's (kept up while the burst is
        unanswered: Slack removes it after two minutes, status_keeper.py), else a reaction."""
        if not busy:
            await self.statuses.stop(key.id)  # a refresh in flight lands before "off"
        if self.workspaces is None:
            return
        workspace = await self.workspaces.get(key.workspace)
        if workspace is None:
            return
        auto = self.config.thinking_indicator == "auto"  # "reaction" and "off" ask for no session
        if auto and await workspace.sessions.show(key, busy, message_id):
            return
        outbound = workspace.outbound
        await outbound.show_busy(key, busy, message_id)
        if busy and outbound.shows_status(key):
            refresh = functools.partial(outbound.refresh_status, key)
            self.statuses.start(key.id, refresh, functools.partial(self._unsettled, key))

    async def _unsettled(self, key: ConversationKey) -> bool:
        return self._host is not None and not await self._host.is_settled(key)


def build_slack_frontend(config: SlackConfig, owner: str = "") -> SlackFrontend:
    """Read the secrets the config names (one clear line if one is missing) and build."""
    for path in ("http_path", "install_path", "redirect_path"):
        if not getattr(config, path).startswith("/"):
            raise ConfigError(f"slack.{path}: must start with '/' (got {getattr(config, path)!r})")
    oauth = None
    bot_token = ""
    if config.install == "oauth":
        oauth = OAuthSecrets(
            require_secret(config.client_id_env, "slack.client_id_env"),
            require_secret(config.client_secret_env, "slack.client_secret_env"),
            require_secret(config.state_secret_env, "slack.state_secret_env"),
            TokenBox.from_env(config.token_key_env),
        )
    else:
        bot_token = require_secret(config.bot_token_env, "slack.bot_token_env")
    if config.mode == "http":
        secret = require_secret(config.signing_secret_env, "slack.signing_secret_env")
        return SlackFrontend(config, bot_token, signing_secret=secret, oauth=oauth, owner=owner)
    app_token = require_secret(config.app_token_env, "slack.app_token_env")
    if not app_token.startswith("xapp-"):
        raise ConfigError(
            f"slack.app_token_env: {config.app_token_env} must hold an app-level token (xapp-…)"
        )
    return SlackFrontend(config, bot_token, app_token=app_token, oauth=oauth, owner=owner)
