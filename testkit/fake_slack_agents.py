"""The fake Slack's agent sessions: `agents.sessions.setStatus` and the `agent_session_stopped`
event, as Slack documents them (docs.slack.dev: "Agent sessions", the method and the event).

A session is thread-based: one per (channel, thread). `setStatus` takes `status` (one of
`active`, `processing`, `suspended`, `closed`), `channel_id` and `thread_ts` (the fake has no
session channels, so a thread is required), and `title` (at most 200 characters, kept only when
it creates the session); it creates the session if needed and sets its status. Only an app
declared an agent may call it: otherwise it answers `NOT_AN_AGENT` (Slack's docs name no code
for this; see the constant). While the app does not subscribe to `agent_session_stopped`, the
call succeeds with the warning `missing_agent_session_stopped_event_subscription`, and Slack
shows a loading indicator nobody can stop.

A person presses the session's stop button only while it shows `processing`
(`FakeSlackApi.stop_session`, which also ends the app's native streams in the thread, as Slack
does, and names them in `streaming_message_ts`): that builds the event Slack sends (the
session's status does not change by itself: the app must move it on). It is delivered like any
event: over HTTP by `EventSender.send` (signed; `retry_num` for Slack's retries, each with the
same `event_id`), over Socket Mode by `push_envelope` (`retry_attempt`). Each delivery is sent
as asked, never deduped here.

`agents.sessions.rename` takes `channel_id`, `title` (1 to 200 characters) and, for a
thread-based session in a DM or channel, `thread_ts`; only an agent may call it. Slack's pages
name no error for a thread with no session yet: the fake renames it all the same (the title is
the session's from then on), so a rename before the first status is not refused.

The agent view (`AgentView`, Slack's "Agent messaging experience", `agent_view` in the manifest):
conversations live in the app's Messages tab. Opening it sends `app_home_opened` with `tab`
`messages` and the DM's `channel` (`app_home_opened`); the channel the person looks at comes as
`app_context_changed`, whose `context.entities` name it and whose envelope's `authorizations`
name the person (`app_context_changed`). `assistant.threads.setSuggestedPrompts` sets the
prompts for the DM's latest message when called with `channel_id` and no `thread_ts`; with a
`thread_ts`, Slack says the call "silently fails" for an agent app: it answers ok and shows
nothing (`AgentView.dropped`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

SESSION_STATUSES = frozenset({"active", "processing", "suspended", "closed"})
TITLE_CHARS = 200
NOT_AN_AGENT = "feature_not_enabled"
"""What `agents.sessions.setStatus` answers an app that is not declared an agent. Slack's pages
say only agents may create sessions and list no error code for it; this is the code Slack uses
for a feature an app does not have."""
NO_STOP_SUBSCRIPTION = "missing_agent_session_stopped_event_subscription"
MAX_PROMPTS = 4
CHANNEL_ENTITY = "slack#/types/channel_id"


@dataclass
class AgentSessionsApi:
    """The sessions one workspace's app has, and every status it set (`session_log`)."""

    agent: bool = False  # the app is declared an agent in its settings
    stop_subscribed: bool = True  # it subscribes to agent_session_stopped
    sessions: dict[tuple[str, str], str] = field(default_factory=dict)  # (channel, thread) → status
    titles: dict[tuple[str, str], str] = field(default_factory=dict)
    session_log: list[tuple[str, str, str]] = field(default_factory=list)  # channel, thread, status
    renames: list[tuple[str, str, str]] = field(default_factory=list)  # channel, thread, title
    refusals: list[str] = field(default_factory=list)  # the error of each call refused, in order

    def set_status(self, args: dict[str, Any]) -> dict[str, Any]:
        """`agents.sessions.setStatus`: the answer's fields, or its `error` (recorded)."""
        answer = self._set_status(args)
        if "error" in answer:
            self.refusals.append(str(answer["error"]))
        return answer

    def _set_status(self, args: dict[str, Any]) -> dict[str, Any]:
        if not self.agent:
            return {"error": NOT_AN_AGENT}
        status, channel, thread = args.get("status"), args.get("channel_id"), args.get("thread_ts")
        if status not in SESSION_STATUSES or not channel or not _is_ts(thread):
            return {"error": "invalid_arguments"}
        title = args.get("title")
        if title is not None and len(str(title)) > TITLE_CHARS:
            return {"error": "invalid_arguments"}
        session = (str(channel), str(thread))
        if session not in self.sessions and title:
            self.titles[session] = str(title)
        self.sessions[session] = str(status)
        self.session_log.append((*session, str(status)))
        answer: dict[str, Any] = {"status": status, "title": self.titles.get(session, "")}
        if not self.stop_subscribed:
            answer["warning"] = NO_STOP_SUBSCRIPTION
        return answer

    def rename(self, args: dict[str, Any]) -> dict[str, Any]:
        """`agents.sessions.rename`: the answer's fields, or its `error` (recorded)."""
        answer = self._rename(args)
        if "error" in answer:
            self.refusals.append(str(answer["error"]))
        return answer

    def _rename(self, args: dict[str, Any]) -> dict[str, Any]:
        if not self.agent:
            return {"error": NOT_AN_AGENT}
        channel, thread, title = args.get("channel_id"), args.get("thread_ts"), args.get("title")
        if not channel or not _is_ts(thread) or not title or len(str(title)) > TITLE_CHARS:
            return {"error": "invalid_arguments"}
        session = (str(channel), str(thread))
        self.titles[session] = str(title)
        self.renames.append((*session, str(title)))
        return {}

    def statuses_of(self, channel: str, thread: str) -> list[str]:
        """Every status set on one session, in order."""
        return [status for c, t, status in self.session_log if (c, t) == (channel, thread)]

    def stop_session(
        self, channel: str, thread: str, user: str = "U1", streaming: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """The `agent_session_stopped` event of `user` pressing the session's stop button (shown
        only while it is `processing`); `streaming`: the app's streams Slack stopped with it."""
        status = self.sessions.get((channel, thread))
        assert status == "processing", f"no stop button on session {channel}/{thread}: {status}"
        return {
            "type": "agent_session_stopped", "channel": channel, "thread_ts": thread,
            "user": user, "streaming_message_ts": list(streaming),
            "event_ts": f"{time.time():.6f}",
        }  # fmt: skip


@dataclass
class AgentView:
    """What an app on the agent view has shown: the suggested prompts of each DM."""

    shown: list[tuple[str, list[dict[str, str]], str | None]] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)  # calls Slack ignored silently

    def set_suggested_prompts(self, args: dict[str, Any]) -> dict[str, Any]:
        """`assistant.threads.setSuggestedPrompts` of an agent app (the scope already checked)."""
        channel, prompts = args.get("channel_id"), args.get("prompts")
        if isinstance(prompts, str):
            prompts = json.loads(prompts)
        if not channel:
            return {"error": "invalid_arguments"}
        if not str(channel).startswith("D"):
            return {"error": "channel_not_found"}
        if not (
            isinstance(prompts, list)
            and 1 <= len(prompts) <= MAX_PROMPTS
            and all(isinstance(p, dict) and p.get("title") and p.get("message") for p in prompts)
        ):
            return {"error": "invalid_arguments"}
        if args.get("thread_ts"):
            self.dropped.append(dict(args))
            return {}
        title = args.get("title")
        self.shown.append((str(channel), prompts, None if title is None else str(title)))
        return {}


def app_home_opened(user: str, channel: str, tab: str = "messages") -> dict[str, Any]:
    """A person opened the app's `tab` (`messages`: its DM, where an agent's threads live)."""
    return {"type": "app_home_opened", "user": user, "channel": channel, "tab": tab,
            "event_ts": f"{time.time():.6f}"}  # fmt: skip


def app_context_changed(viewing: str, team: str) -> dict[str, Any]:
    """The person now looks at channel `viewing` ("" : at nothing Slack names). Slack names the
    person only in the envelope's `authorizations` (`viewer_authorizations`)."""
    entities = [{"type": CHANNEL_ENTITY, "value": viewing, "team_id": team}] if viewing else []
    context: dict[str, Any] = {"entities": entities} if entities else {}
    return {"type": "app_context_changed", "context": context,
            "event_ts": f"{time.time():.6f}"}  # fmt: skip


def viewer_authorizations(user: str, team: str) -> list[dict[str, Any]]:
    """The envelope's `authorizations` of an event seen by `user` (a person, not the bot)."""
    return [{"enterprise_id": None, "team_id": team, "user_id": user, "is_bot": False,
             "is_enterprise_install": False}]  # fmt: skip


def _is_ts(value: Any) -> bool:
    seconds, dot, micros = str(value or "").partition(".")
    return bool(dot) and seconds.isdigit() and micros.isdigit()
