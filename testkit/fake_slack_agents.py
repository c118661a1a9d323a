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
"""

from __future__ import annotations

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


@dataclass
class AgentSessionsApi:
    """The sessions one workspace's app has, and every status it set (`session_log`)."""

    agent: bool = False  # the app is declared an agent in its settings
    stop_subscribed: bool = True  # it subscribes to agent_session_stopped
    sessions: dict[tuple[str, str], str] = field(default_factory=dict)  # (channel, thread) → status
    titles: dict[tuple[str, str], str] = field(default_factory=dict)
    session_log: list[tuple[str, str, str]] = field(default_factory=list)  # channel, thread, status
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


def _is_ts(value: Any) -> bool:
    seconds, dot, micros = str(value or "").partition(".")
    return bool(dot) and seconds.isdigit() and micros.isdigit()
