"""Catch-up in the agent view's Messages tabs (docs/catch-up.md, docs/slack-assistant.md).

An agent's DM has no conversation of its own: each exchange is the thread under its first
message, so the conversations catch-up knows never include the DM where a new exchange would be
typed. Each DM noted as an agent's (`NOTE_AGENT_DM`) is therefore read as a conversation too:

- from the newest message stored before the cut-off in any of its conversations (its exchanges,
  and the DM itself when it had plain messages before the app moved to the agent view), never
  before the window; walked where the most recently active of them stands, before them (a DM with
  nothing stored comes after every conversation that has something, most recently noted first);
- each top-level message found there is keyed as a live one is (`AgentView.in_exchange`, under
  the same per-DM lock): it joins the DM's open exchange or opens one under itself. One stored
  already (seen live since the cut-off) keeps the conversation it is stored in, so it is stored
  once and moves no exchange on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from adapters.slack.agent_view import NOTE_AGENT_DM
from adapters.slack.assistant import AssistantThreads
from adapters.slack.inbound import PLATFORM, split_message_id
from bot.core.catch_up import CatchUpRun
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.store import IngestResult
from bot.core.threads import Ingest

Points = dict[ConversationKey, str | None]


def later(first: str | None, second: str | None) -> str | None:
    """The later of two stored messages' platform ids (None: nothing stored)."""
    if first is None or second is None:
        return first or second
    return max(first, second, key=lambda mid: float(split_message_id(mid)[1] or 0))


@dataclass(eq=False)
class AgentDmCatchUp:
    """One workspace's agent DMs, for its catch-up (history.py)."""

    assistant: AssistantThreads

    async def walk(
        self, team: str, points: Mapping[ConversationKey, str | None]
    ) -> tuple[Points, frozenset[ConversationKey]]:
        """The workspace's `points` with its agent DMs among them (see the module docstring),
        and which keys are agent DMs."""
        noted = await self.assistant.host.notes.noted(NOTE_AGENT_DM, f"{PLATFORM}/{team}/")
        dms = [dm for dm in map(ConversationKey.parse, noted) if not dm.thread]
        agent_dms = frozenset(dms)
        walk: Points = {}
        for key, newest in points.items():
            dm = replace(key, thread="")
            if dm in agent_dms:
                walk[dm] = later(walk[dm], newest) if dm in walk else newest
            if key != dm or dm not in agent_dms:
                walk[key] = newest
        for dm in dms:
            walk.setdefault(dm, None)
        return walk, agent_dms

    async def ingest(
        self, run: CatchUpRun, message: IncomingMessage, ingest: Ingest
    ) -> IngestResult:
        """A message read from an agent's DM, keyed as a live one (events.py), then ingested."""
        async with self.assistant.agent.lock(message):
            stored = await run.stored_in(message)
            if stored is not None:
                keyed = replace(message, key=stored)
            else:
                ts = split_message_id(message.message_id)[1]
                keyed = await self.assistant.in_exchange(message, ts)
            result = await ingest(keyed)
        if result.status in ("accepted", "duplicate"):
            await self.assistant.message_accepted(keyed)
        return result
