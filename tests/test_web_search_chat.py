"""Web search end to end: the real Slack (Bolt, HTTP mode) and Discord (discord.py) front ends
against their fakes, the real Claude replier against the fake Messages API, one engine, one store.

What a person sees: the growing message says what is being searched, then the answer replaces
that line and ends with its sources as links; typing again during a search cancels it and one
answer covers both messages."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from adapters.discord import DiscordFrontend
from adapters.slack import SlackFrontend
from bot.app import App
from bot.cli.explain import explain_lines
from bot.config import Config, parse_config
from bot.core.events import ConversationKey
from bot.wiring import claude_replier
from storage.sqlite import SqliteStore
from testkit import check_invariants
from testkit.clock import FakeClock
from testkit.engine import shut_down
from testkit.fake_anthropic import FakeAnthropic, Plan, Search
from testkit.fake_discord import FakeDiscord, frontend_for
from testkit.fake_slack import TEAM, EventSender, FakeSlackApi, assistant_event, dm
from tests.clock_steps import step
from tests.slack_harness import SECRET, TOKEN, api, ts

__all__ = ["api"]  # fixture

KEY_ENV = {"TEST_ANTHROPIC_KEY": "sk-test-not-a-real-key"}
SLACK_KEY = ConversationKey("slack", TEAM, "D1", "")
DM_ID = 400_000_000_000_000_003
ALICE = {"id": "200000000000000001", "username": "alice", "discriminator": "0",
         "global_name": "Alice", "avatar": None}  # fmt: skip
DISCORD_KEY = ConversationKey("discord", "dm", str(DM_ID))
INTERVAL = 1.0
SLACK_SEARCHING = "_searching the web: python 3.14 release notes…_"
RESULTS = [
    ("https://docs.python.org/3.14/whatsnew.html", "What's New In Python 3.14"),
    ("https://blog.example.org/314", "Python 3.14 released"),
]
CITED = [
    (" Free-threading is officially supported.", RESULTS[0][0]),
    (" Template strings arrived.", RESULTS[1][0]),
]


def config(server: FakeAnthropic, **sections: Any) -> Config:
    llm = {"base_url": server.base_url, "api_key_env": "TEST_ANTHROPIC_KEY", "max_retries": 0,
           "timeout_seconds": 10.0}  # fmt: skip
    return parse_config({
        "llm": llm, "console": {"enabled": False}, "engine": {"owner": "w1"},
        "debounce": {"quiet_seconds": 1.5, "max_wait_seconds": 8.0},
        "streaming": {"interval_seconds": INTERVAL},
        "tools": {"web_search": True, "web_search_max_uses": 3}, **sections,
    })  # fmt: skip


async def until(predicate: Callable[[], bool], within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def shows(clock: FakeClock, read: Callable[[], list[str]], expected: list[str]) -> None:
    """Step the draft's interval until the message shows `expected`: the model's stream reaches
    the client as real I/O, so the query may arrive an interval after the search started."""
    for _ in range(10):
        await step(clock, INTERVAL)
        with contextlib.suppress(TimeoutError):
            await until(lambda: read() == expected, within=0.5)
            return
    assert read() == expected


async def start_generating(app: App, clock: FakeClock) -> None:
    await clock.advance(1.5)
    await app.engine.run_due()


async def answered(app: App, clock: FakeClock, server: FakeAnthropic, streams: int) -> None:
    """The model calls have ended; the draft's last interval passes and the reply is posted."""
    await until(lambda: sum(s.outcome != "streaming" for s in server.streams) >= streams)
    await step(clock, INTERVAL)
    await app.engine.idle()
    await app.engine.outbox.deliver_due()
    await app.engine.idle()


# Slack -----------------------------------------------------------------------------------------
@asynccontextmanager
async def slack_app(
    api: FakeSlackApi, server: FakeAnthropic, **sections: Any
) -> AsyncIterator[tuple[App, EventSender, FakeClock, SqliteStore]]:
    slack = {"enabled": True, "mode": "http", "api_base_url": api.url, "http_port": 0}
    cfg = config(server, slack=slack, **sections)
    clock, store = FakeClock(), SqliteStore(":memory:")
    replier = claude_replier(cfg, KEY_ENV)
    frontend = SlackFrontend(cfg.slack, TOKEN, signing_secret=SECRET, app_token=api.app_token)
    app = App(cfg, store, replier, [frontend], clock=clock, owner="w1")
    await store.open()
    await frontend.start(app)
    url = f"http://127.0.0.1:{frontend.http_port}{cfg.slack.http_path}"
    try:
        yield app, EventSender(url, SECRET), clock, store
    finally:
        await frontend.stop_intake()
        app.engine.stop_taking_work()
        await app.engine.finish(0.0)
        await frontend.stop()
        await app.engine.release()
        await replier.aclose()
        await store.close()


def slack_shown(api: FakeSlackApi) -> list[str]:
    return [m.text for m in api.posts()]


async def test_slack_shows_the_search_then_one_answer_with_its_sources_as_links(
    api: FakeSlackApi, server: FakeAnthropic
) -> None:
    search = Search("python 3.14 release notes", RESULTS, hold=True)
    server.queue(Plan(text="Here is what changed.", searches=[search], cited=CITED))
    async with slack_app(api, server) as (app, sender, clock, store):
        assert await sender.send(dm(ts(1), "what changed in python 3.14?")) == 200
        await start_generating(app, clock)
        await until(lambda: bool(server.streams) and server.streams[0].paused)
        await shows(clock, lambda: slack_shown(api), [SLACK_SEARCHING])
        server.release()
        await answered(app, clock, server, 1)
        assert slack_shown(api) == [
            "Here is what changed. Free-threading is officially supported. Template strings "
            "arrived.\n\nSources: <https://docs.python.org/3.14/whatsnew.html|What's New In "
            "Python 3.14> · <https://blog.example.org/314|Python 3.14 released>"
        ]
        assert [m for m in api.methods() if m.startswith("chat.")].count("chat.postMessage") == 1
        [generation] = await store.generations(SLACK_KEY.id)
        assert generation.usage.web_searches == 1
        assert [(s.query, s.results) for s in generation.searches] == [
            ("python 3.14 release notes", 2)
        ]
        # the next burst's history carries the answer and its sources, no search blocks
        assert await sender.send(dm(ts(2), "and 3.15?")) == 200
        await start_generating(app, clock)
        await answered(app, clock, server, 2)
        later = server.requests[1]
        kinds = {b["type"] for m in later.messages for b in m["content"]}
        assert kinds == {"text"}
        assistant = [m for m in later.messages if m["role"] == "assistant"]
        assert "Sources: [What's New In Python 3.14]" in assistant[0]["content"][0]["text"]
        await check_invariants(store, [SLACK_KEY.id])


async def test_slack_typing_again_during_a_search_cancels_it_and_one_answer_covers_both(
    api: FakeSlackApi, server: FakeAnthropic
) -> None:
    slow = Search("python 3.14 release notes", RESULTS, hold=True)
    server.queue(
        Plan(text="Old answer.", searches=[slow, Search("never", RESULTS)]),
        Plan(text="Both questions, answered once.", searches=[Search("3.14 and 3.15", RESULTS)],
             cited=CITED[:1]),
    )  # fmt: skip
    async with slack_app(api, server) as (app, sender, clock, store):
        assert await sender.send(dm(ts(1), "what changed in python 3.14?")) == 200
        await start_generating(app, clock)
        await until(lambda: bool(server.streams) and server.streams[0].paused)
        await shows(clock, lambda: slack_shown(api), [SLACK_SEARCHING])
        assert await sender.send(dm(ts(2), "and in 3.15?")) == 200  # during the search
        await until(lambda: server.streams[0].outcome == "disconnected")
        assert server.streams[0].searches_started == 1  # its second search never started
        await step(clock, INTERVAL)
        await until(lambda: slack_shown(api) == ["…"])  # still reading
        await app.engine.idle()
        await start_generating(app, clock)
        await answered(app, clock, server, 2)
        assert len(server.requests) == 2
        assert server.requests[1].last_user_text == (
            "alice: what changed in python 3.14?\nalice: and in 3.15?"
        )
        assert slack_shown(api) == [
            "Both questions, answered once. Free-threading is officially supported.\n\n"
            "Sources: <https://docs.python.org/3.14/whatsnew.html|What's New In Python 3.14>"
        ]
        [reply] = await store.replies(SLACK_KEY.id)  # one reply, none for the old burst
        assert reply.state == "sent"
        superseded, posted = await store.generations(SLACK_KEY.id)
        assert (superseded.outcome, posted.outcome) == ("superseded", "posted")
        assert superseded.usage.web_searches == 0  # the held search never returned results
        assert [(s.query, s.error) for s in superseded.searches] == [
            ("python 3.14 release notes", "unfinished")
        ]
        lines = await explain_lines(store, SLACK_KEY.id, clock.now()) or []
        assert any(
            "searched  'python 3.14 release notes': no result (the generation ended first)" in line
            for line in lines
        )
        assert [s.query for s in posted.searches] == ["3.14 and 3.15"]
        await check_invariants(store, [SLACK_KEY.id])


def task_updates(api: FakeSlackApi) -> list[tuple[str, dict[str, Any]]]:
    """Each task chunk the bot streamed, with the method that carried it."""
    return [(entry["method"], chunk) for entry in api.chat_log
            for chunk in entry.get("chunks") or [] if chunk["type"] == "task_update"]  # fmt: skip


async def test_slack_assistant_thread_streams_the_search_as_a_task_and_the_answer_goes_on(
    api: FakeSlackApi, server: FakeAnthropic
) -> None:
    api.status_supported = True
    key = ConversationKey("slack", TEAM, "D1", ts(1))
    search = Search("python 3.14 release notes", RESULTS, hold=True)
    server.queue(Plan(text="Here is what changed.", searches=[search], cited=CITED, pause_after=2))
    async with slack_app(api, server) as (app, sender, clock, store):
        started = assistant_event("assistant_thread_started", "D1", ts(1), "U1")
        assert await sender.send(started) == 200
        assert await sender.send(dm(ts(2), "what changed in python 3.14?", thread_ts=ts(1))) == 200
        await start_generating(app, clock)
        await until(lambda: bool(server.streams) and server.streams[0].paused)
        await until(lambda: any(m.streaming for m in api.messages))  # opened at the first step
        [stream] = [m for m in api.messages if m.streaming]
        running = {
            "type": "task_update",
            "id": "srvtoolu_0100",
            "title": "Searching the web: python 3.14 release notes",
            "status": "in_progress",
        }
        await shows(clock, lambda: list(stream.tasks.values()), [running])  # fmt: skip
        assert stream.text == ""  # the search is a task card, not a line of text
        server.release_searches()  # the results arrive; the answer starts, then waits
        await until(lambda: server.streams[0].deltas_sent == 2)
        done = {
            **running,
            "status": "complete",
            "output": "2 sources",
            "sources": [{"type": "url", "url": url, "text": title} for url, title in RESULTS],
        }
        await shows(clock, lambda: [*stream.tasks.values(), stream.text], [done, "Here is"])
        server.release()
        await answered(app, clock, server, 1)
        methods = [entry["method"] for entry in api.chat_log]
        assert methods.count("chat.startStream") == 1 and methods.count("chat.stopStream") == 1
        assert "chat.postMessage" not in methods
        stop = methods.index("chat.stopStream")
        assert "chat.update" not in methods[:stop]  # the search never interrupted the stream
        assert methods[stop + 1 :] == ["chat.update"]  # the final text is the outbox's
        assert [(m, c["status"]) for m, c in task_updates(api)][-1] == ("chat.appendStream",
                                                                         "complete")  # fmt: skip
        assert ("chat.startStream", "in_progress") in [
            (m, c["status"]) for m, c in task_updates(api)
        ]
        appended = [e["text"] for e in api.chat_log if e["method"] == "chat.appendStream"]
        assert "".join(appended) == "Here is"
        answer = (
            "Here is what changed. Free-threading is officially supported. Template strings "
            "arrived.\n\nSources: <https://docs.python.org/3.14/whatsnew.html|What's New In "
            "Python 3.14> · <https://blog.example.org/314|Python 3.14 released>"
        )
        assert [m.text for m in api.posts() if m.thread_ts == ts(1)] == [answer]
        assert not stream.streaming and stream.metadata is not None
        await check_invariants(store, [key.id])


# Discord ---------------------------------------------------------------------------------------
async def discord_say(fake: FakeDiscord, store: SqliteStore, text: str) -> None:
    before = await store.conversation_state(DISCORD_KEY.id)
    version = before.version if before else 0
    await fake.dispatch("MESSAGE_CREATE", fake.message(DM_ID, ALICE, text))
    async with asyncio.timeout(5.0):
        while (state := await store.conversation_state(DISCORD_KEY.id)) is None or (  # noqa: ASYNC110
            state.version <= version
        ):
            await asyncio.sleep(0.005)


@asynccontextmanager
async def discord_app(
    fake: FakeDiscord, server: FakeAnthropic, store: SqliteStore, clock: FakeClock
) -> AsyncIterator[tuple[App, DiscordFrontend]]:
    cfg = config(server)
    replier = claude_replier(cfg, KEY_ENV)
    frontend = frontend_for(fake, clock)
    app = App(cfg, store, replier, [frontend], clock=clock, owner="w1")
    await frontend.start(app)
    try:
        yield app, frontend
    finally:
        await shut_down(app.engine)
        await frontend.stop()
        await replier.aclose()


async def test_discord_shows_the_search_then_one_answer_with_masked_links_without_embeds(
    fake_discord: FakeDiscord, server: FakeAnthropic, store: SqliteStore, clock: FakeClock
) -> None:
    fake = fake_discord
    search = Search("python 3.14 release notes", RESULTS, hold=True)
    server.queue(Plan(text="Here is what changed.", searches=[search], cited=CITED))
    async with discord_app(fake, server, store, clock) as (app, _):
        await discord_say(fake, store, "what changed in python 3.14?")
        await start_generating(app, clock)
        await until(lambda: bool(server.streams) and server.streams[0].paused)
        searching = ["*searching the web: python 3.14 release notes…*"]
        await shows(clock, lambda: fake.shown(DM_ID), searching)
        assert len(fake.created) == 1
        server.release()
        await answered(app, clock, server, 1)
        assert fake.shown(DM_ID) == [
            "Here is what changed. Free-threading is officially supported. Template strings "
            "arrived.\n\nSources: [What's New In Python 3.14]"
            "(<https://docs.python.org/3.14/whatsnew.html>) · "
            "[Python 3.14 released](<https://blog.example.org/314>)"
        ]
        assert len(fake.created) == 1  # one message, edited from the search line to the answer
        await check_invariants(store, [DISCORD_KEY.id])


async def test_discord_a_paused_turn_is_one_reply_from_one_chain_and_explain_shows_searches(
    fake_discord: FakeDiscord, server: FakeAnthropic, store: SqliteStore, clock: FakeClock
) -> None:
    fake = fake_discord
    server.queue(
        Plan(text="Looking.", searches=[Search("first query", RESULTS)], stop_reason="pause_turn"),
        Plan(text="Found it.", searches=[Search("second query", error="too_many_requests")]),
    )
    async with discord_app(fake, server, store, clock) as (app, _):
        await discord_say(fake, store, "look it up please")
        await start_generating(app, clock)
        await answered(app, clock, server, 2)
        assert fake.shown(DM_ID) == ["Looking.\n\nFound it."]  # no citations: no sources line
        assert len(server.requests) == 2
        assert server.requests[1].messages[-1]["role"] == "assistant"  # the paused turn
        [reply] = await store.replies(DISCORD_KEY.id)
        assert reply.state == "sent" and reply.covers_to_version == 1
        [generation] = await store.generations(DISCORD_KEY.id)
        assert generation.outcome == "posted" and generation.usage.web_searches == 1
        lines = await explain_lines(store, DISCORD_KEY.id, clock.now()) or []
        searched = [line.split("s  ", 1)[-1] for line in lines if "searched" in line]
        assert searched == [
            "searched  'first query': 2 result(s)",
            "searched  'second query': error too_many_requests",
        ]
        assert any("1 web search(es)" in line for line in lines)
        await check_invariants(store, [DISCORD_KEY.id])
