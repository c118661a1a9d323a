"""Slack's agent surface in two processes on one PostgreSQL database: two top-level messages of
one burst, typed in the Messages tab and delivered to the two processes at the same instant, are
one exchange, answered once in one thread, as they are in one process.

Both processes choose an exchange from the same state: each one's first read of the DM's latest
exchange waits until the other has read it too (a barrier in the notes the front end is handed,
as a slow network would have it), so neither has written its choice when the other reads. The
thread is the line's whose choice was written first, either here (adapters/slack/agent_view.py
says why an exchange is not re-rooted under an earlier line)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest

from adapters.slack.agent_view import NOTE_EXCHANGE
from bot.core.events import Event, IncomingMessage
from bot.core.notes import NoteBook
from bot.core.store import IngestResult
from testkit import ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from testkit.fake_slack import TEAM, FakeSlackApi, dm
from tests import pg
from tests.clock_steps import step
from tests.slack_harness import Bot, running_bot, ts
from tests.test_slack_agent_view import agent, opened
from tests.test_slack_assistant import INTERVAL
from tests.test_stop_two_processes import shared_store

__all__ = ["agent"]  # fixture

DM_ID = f"slack/{TEAM}/D1/"
FIRST, SECOND = ts(2), ts(3)  # the burst's two lines, by Slack ts
LINES = {FIRST: "how do I rotate", SECOND: "the signing secret"}


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    name = await pg.create_schema("burstbot_exchange2")
    yield name
    await pg.drop_schema(name)


class ReadTogether:
    """The store's notes; once `armed`, the first read of the DM's latest exchange waits at the
    barrier the other process's notes share (then every call goes straight through)."""

    def __init__(self, notes: NoteBook, barrier: asyncio.Barrier) -> None:
        self.inner, self.barrier, self.armed = notes, barrier, False

    async def note(self, conversation_id: str, name: str) -> str | None:
        value = await self.inner.note(conversation_id, name)
        if self.armed and (conversation_id, name) == (DM_ID, NOTE_EXCHANGE):
            self.armed = False
            await asyncio.wait_for(self.barrier.wait(), 5)
        return value

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class HostReadingTogether:
    """The app as a front end sees it, with `ReadTogether` notes; `storing` (when set) holds
    each message's store write until the test opens it, and says one is waiting."""

    def __init__(self, app: Any, barrier: asyncio.Barrier) -> None:
        self.app, self.notes = app, ReadTogether(app.notes, barrier)
        self.storing: tuple[asyncio.Event, asyncio.Event] | None = None

    async def ingest(self, event: Event) -> IngestResult:
        if self.storing is not None and isinstance(event, IncomingMessage):
            waiting, go_on = self.storing
            waiting.set()
            await asyncio.wait_for(go_on.wait(), 5)
        result: IngestResult = await self.app.ingest(event)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)


@asynccontextmanager
async def two_processes(
    agent: FakeSlackApi, schema: str
) -> AsyncIterator[tuple[Bot, Bot, list[HostReadingTogether]]]:
    clock, barrier, hosts = FakeClock(), asyncio.Barrier(2), []

    def reading_together(app: Any) -> HostReadingTogether:
        host = HostReadingTogether(app, barrier)
        hosts.append(host)
        return host

    async with AsyncExitStack() as stack:
        bots = []
        for owner in ("w1", "w2"):
            store, replier = shared_store(schema), ScriptedReplier()
            process = running_bot(agent, clock=clock, replier=replier, owner=owner, store=store,
                                  host_wrapper=reading_together)  # fmt: skip
            bots.append(await stack.enter_async_context(process))
        yield bots[0], bots[1], hosts


async def answered_by_either(first: Bot, second: Bot) -> None:
    """The quiet window passes; whichever process takes the burst answers it and posts."""
    await step(first.clock, 2.0)
    for _ in range(3):
        for bot in (first, second):
            await bot.step()
        await step(first.clock, INTERVAL)
    for bot in (first, second):
        await bot.step()


async def test_two_lines_of_one_burst_taken_by_two_processes_at_once_are_one_exchange(
    agent: FakeSlackApi, schema: str
) -> None:
    async with two_processes(agent, schema) as (first, second, hosts):
        await opened(first, agent, "http")  # the DM is an agent's, noted in the shared store
        notes = [host.notes for host in hosts]
        for book in notes:
            book.armed = True
        statuses = await asyncio.gather(first.sender.send(dm(FIRST, LINES[FIRST])),
                                        second.sender.send(dm(SECOND, LINES[SECOND])))  # fmt: skip
        assert statuses == [200, 200]
        assert not any(book.armed for book in notes)  # both chose from the same state
        await answered_by_either(first, second)
        [answer] = agent.posts()  # one threaded answer...
        root = answer.thread_ts
        assert (answer.channel, root) in [("D1", FIRST), ("D1", SECOND)]
        [(channel, session, title)] = agent.agents.renames  # one session, titled once
        assert (channel, session, title in LINES.values()) == ("D1", root, True)
        [call] = first.replier.calls + second.replier.calls  # ...to the one burst of both lines
        assert sorted(call.texts) == sorted(LINES.values())
        other = SECOND if root == FIRST else FIRST
        assert await first.store.conversation_state(f"{DM_ID}{other}") is None
        assert await first.store.note(DM_ID, NOTE_EXCHANGE) == root
        await check_invariants(first.store, [f"{DM_ID}{root}"])


async def test_a_line_taken_while_the_other_process_stores_the_exchange_s_first_joins_it(
    agent: FakeSlackApi, schema: str
) -> None:
    """The first process has chosen a new exchange but not yet stored its message (nothing
    pending there yet, so it looks settled): the second line joins it all the same."""
    async with two_processes(agent, schema) as (first, second, hosts):
        await opened(first, agent, "http")
        waiting, go_on = asyncio.Event(), asyncio.Event()
        hosts[0].storing = (waiting, go_on)
        sending = asyncio.create_task(first.sender.send(dm(FIRST, LINES[FIRST])))
        await asyncio.wait_for(waiting.wait(), 5)  # chosen, not stored
        assert await first.store.note(DM_ID, NOTE_EXCHANGE) == FIRST
        assert await second.sender.send(dm(SECOND, LINES[SECOND])) == 200
        go_on.set()
        assert await sending == 200
        await answered_by_either(first, second)
        [answer] = agent.posts()
        assert answer.thread_ts == FIRST
        [call] = first.replier.calls + second.replier.calls
        assert sorted(call.texts) == sorted(LINES.values())
        assert await first.store.conversation_state(f"{DM_ID}{SECOND}") is None


async def test_a_line_stored_first_roots_the_exchange_an_earlier_one_stored_after_joins(
    agent: FakeSlackApi, schema: str
) -> None:
    """What an exchange is rooted at: the line whose choice was stored first. Slack sends a DM's
    events in order, so that is the first typed, unless the first is held up in its process
    past the next one: then the burst is answered under the next one, still once."""
    async with two_processes(agent, schema) as (first, second, _):
        await opened(first, agent, "http")
        assert await second.sender.send(dm(SECOND, LINES[SECOND])) == 200
        assert await first.sender.send(dm(FIRST, LINES[FIRST])) == 200
        await answered_by_either(first, second)
        [answer] = agent.posts()
        assert answer.thread_ts == SECOND
        [call] = first.replier.calls + second.replier.calls
        assert sorted(call.texts) == sorted(LINES.values())
