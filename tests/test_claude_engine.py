"""The Claude replier inside the real engine: fake clock, SQLite store, fake Messages API.

The engine's time is a `FakeClock`; only the HTTP traffic to the fake server is real, and waits for
it are bounded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.config import parse_config
from bot.core.engine import Engine
from bot.core.events import IncomingMessage, MessageDeleted, MessageEdited
from bot.core.replier import GenerationProgress, Prompt
from bot.llm.claude import ClaudeReplier
from bot.wiring import claude_replier
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, check_invariants
from testkit.clock import FakeClock
from testkit.fake_anthropic import FakeAnthropic, Plan
from tests.conftest import KEY, SETTINGS, make_engine

KEY_ENV = {"TEST_ANTHROPIC_KEY": "sk-test-not-a-real-key"}


class ObservedClaude(ClaudeReplier):
    """The real replier; the test only keeps a handle on each call's live `usage`."""

    usages: list[GenerationProgress]

    async def generate(self, prompt: Prompt, usage: GenerationProgress) -> str:
        self.usages.append(usage)
        return await super().generate(prompt, usage)


def said(n: int, text: str, author: str = "alice") -> IncomingMessage:
    return IncomingMessage(KEY, f"m{n}", f"u-{author}", author, text)


@pytest.fixture
async def claude(server: FakeAnthropic) -> AsyncIterator[ObservedClaude]:
    llm = {"base_url": server.base_url, "api_key_env": "TEST_ANTHROPIC_KEY", "max_retries": 2}
    replier = claude_replier(parse_config({"llm": llm}), KEY_ENV, ObservedClaude)
    assert isinstance(replier, ObservedClaude)
    replier.usages = []
    yield replier
    await replier.aclose()


async def fire(engine: Engine, clock: FakeClock, seconds: float = SETTINGS.quiet_seconds) -> None:
    """Let the debounce window pass, start due work, wait for it (model traffic is real I/O)."""
    await clock.advance(seconds)
    await engine.run_due()
    await engine.idle()


async def test_a_three_message_burst_is_one_request_holding_every_message(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: ObservedClaude,
) -> None:
    engine = make_engine(store, clock, claude, frontend)
    await engine.ingest(said(1, "is the deploy done?"))
    await engine.ingest(said(2, "asking for the release notes", author="bob"))
    await engine.ingest(said(3, "also, which branch?"))
    await fire(engine, clock)

    assert len(server.requests) == 1
    assert server.requests[0].last_user_text == (
        "alice: is the deploy done?\nbob: asking for the release notes\nalice: also, which branch?"
    )
    assert frontend.texts() == [f"You said:\n{server.requests[0].last_user_text}"]
    [generation] = await store.generations(KEY.id)
    assert generation.outcome == "posted"
    assert generation.usage.output_tokens == server.streams[0].output_tokens
    assert generation.usage.input_tokens > 0 and generation.usage.cache_write_tokens > 0
    await check_invariants(store, [KEY.id])


async def test_edits_apply_and_deletes_drop_in_the_final_user_turn(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: ObservedClaude,
) -> None:
    engine = make_engine(store, clock, claude, frontend)
    await engine.ingest(said(1, "teh plan"))
    await engine.ingest(said(2, "ignore this", author="bob"))
    await engine.ingest(said(3, "ship it?", author="carol"))
    await engine.ingest(MessageEdited(KEY, "m1", "the plan"))
    await engine.ingest(MessageDeleted(KEY, "m2"))
    await fire(engine, clock)
    [request] = server.requests
    assert request.last_user_text == "alice: the plan\ncarol: ship it?"


async def test_supersede_closes_the_stream_at_once_and_counts_the_wasted_tokens(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: ObservedClaude,
) -> None:
    engine = make_engine(store, clock, claude, frontend)
    long_answer = " ".join(f"word{i}" for i in range(300))
    server.queue(Plan(text=long_answer, pause_after=20))
    await engine.ingest(said(1, "one"))
    await engine.ingest(said(2, "two"))
    await clock.advance(SETTINGS.quiet_seconds)
    await engine.run_due()
    await server.wait_for(lambda: bool(claude.usages) and claude.usages[0].output_tokens > 0)
    await server.wait_for(lambda: server.streams[0].paused)

    await engine.ingest(said(3, "three"))  # newer input while the model streams
    await engine.idle()
    stream = server.streams[0]
    await server.wait_for(lambda: stream.outcome == "disconnected")
    assert stream.deltas_sent == 20 < stream.total_deltas  # closed mid-stream, not drained
    assert frontend.posts == []

    await fire(engine, clock)
    assert len(server.requests) == 2
    assert server.requests[1].last_user_text == "alice: one\nalice: two\nalice: three"
    assert server.streams[1].outcome == "completed"
    assert frontend.texts() == ["You said:\nalice: one\nalice: two\nalice: three"]

    superseded, posted = await store.generations(KEY.id)
    assert (superseded.outcome, posted.outcome) == ("superseded", "posted")
    wasted, full = superseded.usage.output_tokens, stream.output_tokens
    print(f"\nwasted output tokens: {wasted} of a {full}-token reply (cancelled after 20 deltas)")
    assert 0 < wasted < full
    assert posted.usage.output_tokens == server.streams[1].output_tokens
    await check_invariants(store, [KEY.id])


async def test_rate_limit_then_overload_then_success_posts_one_reply(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: ObservedClaude,
) -> None:
    engine = make_engine(store, clock, claude, frontend)
    server.queue(Plan(status=429, retry_after=0.01), Plan(status=529, retry_after=0.01))
    await engine.ingest(said(1, "hello"))
    await fire(engine, clock)
    assert len(server.requests) == 3  # the SDK retried; the engine saw one call
    assert frontend.texts() == ["You said:\nalice: hello"]
    assert [g.outcome for g in await store.generations(KEY.id)] == ["posted"]
    await check_invariants(store, [KEY.id])


async def test_a_permanent_error_posts_the_failure_message_without_a_retry_storm(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: ObservedClaude,
) -> None:
    engine = make_engine(store, clock, claude, frontend)
    server.queue(Plan(status=400))
    await engine.ingest(said(1, "a question the API rejects"))
    await fire(engine, clock)
    assert len(server.requests) == 1
    assert frontend.texts() == [SETTINGS.failure_message]
    [generation] = await store.generations(KEY.id)
    assert generation.outcome == "failed" and "400" in (generation.error or "")
    await fire(engine, clock, 60.0)
    assert len(server.requests) == 1  # answered: nothing re-armed
    await check_invariants(store, [KEY.id])

    # the message stays in history (the apology does not): the next burst's request carries it
    await engine.ingest(said(2, "trying again"))
    await fire(engine, clock)
    [message] = server.requests[1].messages
    assert server.requests[1].texts(message) == [
        "alice: a question the API rejects",
        "alice: trying again",
    ]


async def test_mid_stream_overload_rearms_with_backoff_then_answers(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: ObservedClaude,
) -> None:
    engine = make_engine(store, clock, claude, frontend)
    server.queue(Plan(error_after=2))
    await engine.ingest(said(1, "hi"))
    await fire(engine, clock)
    assert len(server.requests) == 1 and frontend.posts == []
    state = await store.conversation_state(KEY.id)
    assert state is not None and state.failed_attempts == 1 and state.lease_owner is None

    await fire(engine, clock, SETTINGS.model_backoff_seconds / 2)
    assert len(server.requests) == 1  # still backing off
    await fire(engine, clock, SETTINGS.model_backoff_seconds)
    assert len(server.requests) == 2
    assert frontend.texts() == ["You said:\nalice: hi"]
    assert [g.outcome for g in await store.generations(KEY.id)] == ["failed", "posted"]
    await check_invariants(store, [KEY.id])


async def test_after_max_attempts_the_failure_message_is_posted(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: ObservedClaude,
) -> None:
    engine = make_engine(store, clock, claude, frontend, model_max_attempts=2)
    server.default_plan = Plan(status=529, retry_after=0.01)
    await engine.ingest(said(1, "hi"))
    await fire(engine, clock)
    assert frontend.posts == []
    await fire(engine, clock, SETTINGS.model_backoff_seconds)
    assert frontend.texts() == [SETTINGS.failure_message]
    assert len(server.requests) == 2 * 3  # two engine attempts, each 1 + max_retries SDK tries
    await fire(engine, clock, 60.0)
    assert len(server.requests) == 6
    await check_invariants(store, [KEY.id])


async def test_earlier_turns_are_history_oldest_dropped_first_with_cache_breakpoints(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: ObservedClaude,
) -> None:
    engine = make_engine(store, clock, claude, frontend, max_context_tokens=100)
    for n, text in enumerate(["an old question " * 10, "a newer one", "the latest"], start=1):
        await engine.ingest(said(n, text.strip(), author="carol" if n == 2 else "alice"))
        await fire(engine, clock)
    assert len(server.requests) == 3

    second = server.requests[1]
    assert [m["role"] for m in second.messages] == ["user", "assistant", "user"]
    assert second.texts(second.messages[0]) == ["alice: " + ("an old question " * 10).strip()]

    third = server.requests[2]  # over budget: the oldest turns went first
    turns = [(m["role"], second_text) for m in third.messages for second_text in third.texts(m)]
    assert turns == [
        ("user", "carol: a newer one"),
        ("assistant", "You said:\ncarol: a newer one"),
        ("user", "alice: the latest"),
    ]
    assert third.cache_breakpoints() == ["system", "messages[1]"]
    [*_, last] = await store.generations(KEY.id)
    assert last.usage.cache_write_tokens > 0
