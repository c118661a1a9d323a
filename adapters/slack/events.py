"""Slack events in: Bolt's listeners, each turning one event into the host's call.

Slack counts an event as delivered when it gets the ack (an HTTP 200, or a Socket Mode envelope
reply). Bolt sends that ack when the listener returns only with `process_before_response=True`
(transport.py); otherwise it acks first. So a listener returns only after `host.ingest(...)` has
stored the event: if storing fails it raises, Bolt answers 500 (HTTP) or sends no ack (Socket
Mode), and Slack delivers the event again (one warning line, not a traceback). Retries and the
`app_mention`/`message` twins of one message are handled like first deliveries: the store
dedupes by message id. An event that can never be stored (no channel, a field of the wrong
type) is acked with a warning instead: a retry would fail the same way. `/reset`'s ack is its
answer (ephemeral), so it too is sent after the reset is stored. A thread reply in a thread the
store does not know is held (stored, then acked) and decided in the background (history.py), so
nothing slow runs before the ack. A top-level message in an agent's DM is keyed to its exchange
(agent_view.py) before it is stored.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slack_bolt.app.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck

from adapters.slack import inbound
from adapters.slack.inbound import Payload
from adapters.slack.uninstall import Uninstalls
from adapters.slack.workspaces import InstalledWorkspaces, SingleWorkspace, Workspace
from bot.core.catch_up import CatchUp
from bot.core.errors import StoreError
from bot.core.events import ResetConversation
from bot.core.frontend import Host

log = logging.getLogger("burstbot.slack")

RESET_COMMAND = "/reset"
RESET_DONE = "History cleared: my next reply here starts fresh."
RESET_IN_THREADS = (
    "Nothing to clear here: in this channel each thread that mentions me is its own "
    "conversation. Start a new thread to start fresh."
)
RESET_REFUSED = "Not allowed here."
RESET_FAILED = "Could not clear the history just now; please try again."


@dataclass(eq=False)
class SlackEvents:
    """The listeners of the Bolt app; each event is handled by its workspace's stack."""

    host: Host
    workspaces: SingleWorkspace | InstalledWorkspaces
    listen_channels: frozenset[str]
    uninstalls: Uninstalls
    catch_up: Callable[[], CatchUp | None]  # the front end's, once it has one
    _hellos: int = field(default=0, init=False)

    def listen(self, bolt: AsyncApp) -> None:
        bolt.error(self._on_listener_error)
        bolt.event("message")(self._on_message)
        bolt.event("app_mention")(self._on_app_mention)
        bolt.event("assistant_thread_started")(self._on_assistant_thread_started)
        bolt.event("assistant_thread_context_changed")(self._on_assistant_context_changed)
        bolt.event("app_home_opened")(self._on_home_opened)
        bolt.event("app_context_changed")(self._on_app_context_changed)
        bolt.event("agent_session_stopped")(self._on_session_stopped)
        bolt.command(RESET_COMMAND)(self._on_reset)
        bolt.event("app_uninstalled")(self._on_revoked)
        bolt.event("tokens_revoked")(self._on_revoked)

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

    async def _workspace(self, body: Payload, event: Payload | None = None) -> Workspace | None:
        """The event's workspace (None: not installed, said in one line: acked and dropped)."""
        team = str(body.get("team_id") or (event or {}).get("team") or "")
        workspace = await self.workspaces.get(team)
        if workspace is None:
            log.warning("slack: an event from workspace %s, which is not installed: dropped", team)
        return workspace

    async def _accept(self, event: Payload, body: Payload, mentioned: bool) -> None:
        problem = inbound.event_problem(event)
        if problem is not None:  # Slack would only send it again: ack it and say why
            log.warning("slack: ignored a malformed %r event %r: %s", event.get("type"),
                        body.get("event_id"), problem)  # fmt: skip
            return
        workspace = await self._workspace(body, event)
        if workspace is None:
            return
        identity, assistant = workspace.identity, workspace.assistant
        team = str(body.get("team_id") or event.get("team") or identity.team_id)
        subtype = str(event.get("subtype") or "")
        if subtype in ("message_changed", "message_deleted"):
            change = inbound.change(team, event, identity, self.listen_channels)
            if change is not None:
                await self.host.ingest(change)
            return
        if subtype not in inbound.NEW_MESSAGE_SUBTYPES or inbound.is_from_bot(event, identity):
            return
        channel, channel_type = str(event.get("channel", "")), str(event.get("channel_type", ""))
        placement = inbound.place(team, channel, channel_type, event, identity,
                                  self.listen_channels, mentioned)  # fmt: skip
        if placement is None:
            return
        message = inbound.new_message(placement, channel, event, identity)
        if placement.needs_thread_check and event.get("parent_user_id") != identity.bot_user_id:
            ours = await self.host.threads.status(placement.key)
            if ours is False:
                return
            if ours is None:  # stored now, decided in the background: acked either way
                await self.host.threads.hold(message)
                return
        if channel_type == "im" and not placement.key.thread:  # in an agent's DM: an exchange
            async with assistant.agent.lock(message):
                message = await assistant.in_exchange(message, str(event.get("ts")))
                result = await self.host.ingest(message)
        else:
            result = await self.host.ingest(message)
        if result.status in ("accepted", "duplicate"):
            await assistant.message_accepted(message)

    async def _on_assistant_thread_started(self, body: Payload) -> None:
        """Noted in the store before Bolt acks (a retry finds the note); prompts come after."""
        workspace = await self._workspace(body)
        if workspace is not None:
            await workspace.assistant.started(body)

    async def _on_assistant_context_changed(self, body: Payload) -> None:
        workspace = await self._workspace(body)
        if workspace is not None:
            await workspace.assistant.context_changed(body)

    async def _on_home_opened(self, body: Payload) -> None:
        """The agent surface: the Messages tab opened (noted before Bolt acks; prompts after)."""
        workspace = await self._workspace(body)
        if workspace is not None:
            await workspace.assistant.home_opened(body)

    async def _on_app_context_changed(self, body: Payload) -> None:
        workspace = await self._workspace(body)
        if workspace is not None:
            await workspace.assistant.app_context_changed(body)

    async def _on_session_stopped(self, body: Payload) -> None:
        """A person pressed an agent session's Stop: stored and decided before Bolt acks."""
        workspace = await self._workspace(body)
        if workspace is not None:
            await workspace.sessions.stopped(body)

    async def _on_revoked(self, event: Payload, body: Payload) -> None:
        """`app_uninstalled`, or `tokens_revoked` naming bot tokens: stored before the ack."""
        team = str(body.get("team_id") or "")
        kind = str(event.get("type"))
        tokens = event.get("tokens")
        if kind == "tokens_revoked" and not (isinstance(tokens, dict) and tokens.get("bot")):
            return  # only user tokens: the bot's still works
        if not team.isalnum():
            log.warning("slack: ignored a %s event without a workspace", kind)
            return
        await self.uninstalls.revoked(team, kind)

    async def _on_reset(self, ack: AsyncAck, body: Payload) -> None:
        """`/reset`: Bolt sends the ack (our ephemeral answer) when this returns."""
        workspace = await self._workspace(body)
        if workspace is None:
            await ack()
            return
        request = inbound.reset_request(body, workspace.identity.team_id)
        answer = RESET_REFUSED if request is None else await self._reset(request)
        await ack(text=answer, response_type="ephemeral")

    async def _reset(self, request: ResetConversation) -> str:
        try:
            result = await self.host.ingest(request)
        except Exception:  # the person gets a clear line instead of Slack's "failed"
            log.exception("slack: /reset of %s failed", request.key.id)
            return RESET_FAILED
        if result.status != "history":
            return RESET_REFUSED
        if request.is_dm or request.key.channel in self.listen_channels:
            return RESET_DONE
        return RESET_IN_THREADS

    async def on_socket_message(self, message: Any) -> None:
        """A `hello` opens every Socket Mode connection: after the first, we reconnected, and
        events sent meanwhile may be lost. Events of the new connection arrive after it."""
        try:
            kind = json.loads(message.data).get("type")
        except (TypeError, ValueError, AttributeError):
            return
        if kind != "hello":
            return
        self._hellos += 1
        catch_up = self.catch_up()
        if self._hellos > 1 and catch_up is not None:
            log.info("slack: reconnected; catching up")
            catch_up.request(catch_up.clock.now())
