"""The Claude replier on its own: the real `AsyncAnthropic` against a fake Messages API."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from bot.config import parse_config
from bot.core.errors import ConfigError, PermanentReplierError, RetryableReplierError
from bot.core.replier import BurstMessage, GenerationProgress, Prompt, Turn
from bot.llm.claude import ClaudeReplier, to_messages
from bot.wiring import claude_replier
from testkit.fake_anthropic import FakeAnthropic, Plan

KEY_ENV = {"TEST_ANTHROPIC_KEY": "sk-test-not-a-real-key"}
BURST = (BurstMessage("alice", "first"), BurstMessage("bob", "second"))


def claude(base_url: str, **llm: object) -> ClaudeReplier:
    settings = {"base_url": base_url, "api_key_env": "TEST_ANTHROPIC_KEY", "max_retries": 2}
    settings.update(llm)
    return claude_replier(parse_config({"llm": settings}), KEY_ENV)


@pytest.fixture
async def replier(server: FakeAnthropic) -> AsyncIterator[ClaudeReplier]:
    r = claude(server.base_url, timeout_seconds=5.0)
    yield r
    await r.aclose()


# the prompt ------------------------------------------------------------------------------------
def test_roles_alternate_and_the_burst_is_the_last_user_block() -> None:
    prompt = Prompt(
        "be brief",
        (
            Turn("assistant", "an orphaned reply whose question was trimmed"),
            Turn("user", "carol: one"),
            Turn("user", "dave: two"),
            Turn("assistant", "answer"),
            Turn("user", "carol: three"),
        ),
        BURST,
    )
    system, messages = to_messages(prompt)
    assert system == [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    first, _, last = messages
    assert [b["text"] for b in first["content"]] == ["carol: one", "dave: two"]  # type: ignore[index]
    blocks = list(last["content"])  # type: ignore[arg-type]
    assert [b["text"] for b in blocks] == ["carol: three", "alice: first\nbob: second"]
    # the cache breakpoint ends the history, not the burst (the burst changes every time)
    assert blocks[0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in blocks[1]


def test_without_history_the_burst_is_the_only_message() -> None:
    system, messages = to_messages(Prompt("", (), BURST))
    assert system == []
    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": "alice: first\nbob: second"}]}
    ]


# streaming and usage ---------------------------------------------------------------------------
async def test_one_streamed_call_returns_the_text_and_counts_every_kind_of_token(
    server: FakeAnthropic, replier: ClaudeReplier
) -> None:
    prompt = Prompt("system words", (Turn("user", "carol: hello"), Turn("assistant", "hi")), BURST)
    usage = GenerationProgress()
    text = await replier.generate(prompt, usage)
    assert text == "You said:\nalice: first\nbob: second"
    assert len(server.requests) == 1
    request = server.requests[0]
    assert request.body["stream"] is True
    assert request.body["model"] == "claude-sonnet-5-5"
    assert request.headers["authorization"] == "Bearer sk-test-not-a-real-key"
    assert request.cache_breakpoints() == ["system", "messages[1]"]
    assert usage.input_tokens > 0 and usage.cache_write_tokens > 0
    assert usage.cache_read_tokens == 0
    assert usage.output_tokens == server.streams[0].output_tokens

    again = GenerationProgress()
    await replier.generate(prompt, again)
    assert again.cache_read_tokens == usage.cache_write_tokens and again.cache_write_tokens == 0


async def test_usage_grows_while_the_stream_runs(
    server: FakeAnthropic, replier: ClaudeReplier
) -> None:
    server.queue(Plan(text="word " * 40, pause_after=10))
    usage = GenerationProgress()
    call = asyncio.create_task(replier.generate(Prompt("", (), BURST), usage))
    await server.wait_for(lambda: usage.output_tokens >= 10)
    assert 0 < usage.output_tokens < server.streams[0].output_tokens
    server.release()
    assert (await call).split() == ["word"] * 40
    assert usage.output_tokens == server.streams[0].output_tokens


async def test_thinking_is_counted_as_output_but_not_posted(
    server: FakeAnthropic, replier: ClaudeReplier
) -> None:
    server.queue(Plan(text="the answer", thinking="let me weigh both messages " * 20))
    usage = GenerationProgress()
    assert await replier.generate(Prompt("", (), BURST), usage) == "the answer"
    assert usage.output_tokens == server.streams[0].output_tokens > 100


# failures --------------------------------------------------------------------------------------
async def test_rate_limit_then_overload_then_success_is_one_call_for_the_engine(
    server: FakeAnthropic, replier: ClaudeReplier
) -> None:
    server.queue(Plan(status=429, retry_after=0.01), Plan(status=529, retry_after=0.01))
    assert await replier.generate(Prompt("", (), BURST), GenerationProgress()) == (
        "You said:\nalice: first\nbob: second"
    )
    assert len(server.requests) == 3


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (400, PermanentReplierError),
        (401, PermanentReplierError),
        (403, PermanentReplierError),
        (404, PermanentReplierError),
        (413, PermanentReplierError),
        (422, PermanentReplierError),
        (408, RetryableReplierError),
        (409, RetryableReplierError),
        (429, RetryableReplierError),
        (500, RetryableReplierError),
        (503, RetryableReplierError),
        (529, RetryableReplierError),
    ],
)
async def test_status_errors_map_into_the_error_tree(
    server: FakeAnthropic, status: int, expected: type[Exception]
) -> None:
    replier = claude(server.base_url, max_retries=0)
    server.queue(Plan(status=status, retry_after=0.01))
    with pytest.raises(expected, match=str(status)) as caught:
        await replier.generate(Prompt("", (), BURST), GenerationProgress())
    assert caught.value.__cause__ is not None  # mapped at the edge, cause kept
    assert len(server.requests) == 1
    await replier.aclose()


async def test_permanent_errors_are_not_retried_by_the_sdk(
    server: FakeAnthropic, replier: ClaudeReplier
) -> None:
    server.queue(Plan(status=400))
    with pytest.raises(PermanentReplierError, match="invalid_request_error"):
        await replier.generate(Prompt("", (), BURST), GenerationProgress())
    assert len(server.requests) == 1


async def test_overloaded_error_event_mid_stream_is_retryable(
    server: FakeAnthropic, replier: ClaudeReplier
) -> None:
    server.queue(Plan(text="a b c d e f", error_after=3))
    usage = GenerationProgress()
    with pytest.raises(RetryableReplierError, match="overloaded_error during the stream"):
        await replier.generate(Prompt("", (), BURST), usage)
    assert server.streams[0].outcome == "error"
    assert usage.output_tokens > 0  # what was streamed before the error still counts


async def test_invalid_request_error_event_mid_stream_is_permanent(
    server: FakeAnthropic, replier: ClaudeReplier
) -> None:
    server.queue(Plan(error_after=1, stream_error_type="invalid_request_error"))
    with pytest.raises(PermanentReplierError):
        await replier.generate(Prompt("", (), BURST), GenerationProgress())


async def test_a_stream_cut_short_is_retryable_not_a_partial_reply(
    server: FakeAnthropic, replier: ClaudeReplier
) -> None:
    server.queue(Plan(text="half of an answer that never ends", end_after=3))
    with pytest.raises(RetryableReplierError, match="before message_stop"):
        await replier.generate(Prompt("", (), BURST), GenerationProgress())


async def test_a_long_retry_after_is_cut_by_the_overall_timeout(server: FakeAnthropic) -> None:
    replier = claude(server.base_url, timeout_seconds=0.3)
    server.queue(Plan(status=429, retry_after=3600))
    with pytest.raises(RetryableReplierError, match=r"within 0\.3s"):
        await replier.generate(Prompt("", (), BURST), GenerationProgress())
    assert len(server.requests) == 1
    await replier.aclose()


async def test_a_stalled_stream_times_out_and_is_closed(server: FakeAnthropic) -> None:
    replier = claude(server.base_url, timeout_seconds=0.3)
    server.queue(Plan(text="never finished", pause_after=1))
    with pytest.raises(RetryableReplierError, match=r"within 0\.3s"):
        await replier.generate(Prompt("", (), BURST), GenerationProgress())
    await server.wait_for(lambda: server.streams[0].outcome == "disconnected")
    await replier.aclose()


async def test_unreachable_endpoint_is_retryable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    replier = claude(f"http://127.0.0.1:{port}", max_retries=0)
    with pytest.raises(RetryableReplierError, match="could not reach"):
        await replier.generate(Prompt("", (), BURST), GenerationProgress())
    await replier.aclose()


def test_missing_key_names_the_variable() -> None:
    config = parse_config({"llm": {"api_key_env": "BURSTBOT_NO_SUCH_KEY"}})
    with pytest.raises(ConfigError, match="BURSTBOT_NO_SUCH_KEY"):
        claude_replier(config, {})


# replies cut at max_tokens ---------------------------------------------------------------------
async def test_a_reply_cut_at_max_tokens_ends_with_the_cut_note(server: FakeAnthropic) -> None:
    """The fake stops generating at the request's max_tokens, as the API does; the reply says
    it was cut. One that fits gets no note, and `cut_note = ""` adds nothing."""
    long_answer = " ".join(f"word{n}" for n in range(200))
    short = claude(server.base_url, max_tokens=20)
    silent = claude(server.base_url, max_tokens=20, cut_note="")
    try:
        server.queue(Plan(text=long_answer), Plan(text="fits easily"), Plan(text=long_answer))
        cut = await short.generate(Prompt("", (), BURST), GenerationProgress())
        whole = await short.generate(Prompt("", (), BURST), GenerationProgress())
        bare = await silent.generate(Prompt("", (), BURST), GenerationProgress())
    finally:
        await short.aclose()
        await silent.aclose()
    assert [s.stop_reason for s in server.streams] == ["max_tokens", "end_turn", "max_tokens"]
    note = parse_config({}).llm.cut_note
    body, _, ending = cut.rpartition("\n\n")
    assert ending == note and long_answer.startswith(body) and len(body) < len(long_answer)
    assert whole == "fits easily"
    assert bare == body


async def test_a_channel_max_tokens_cuts_its_replies_with_the_note(server: FakeAnthropic) -> None:
    replier = claude(server.base_url, max_tokens=1024)
    server.queue(Plan(text=" ".join(["word"] * 100)))
    try:
        text = await replier.generate(Prompt("", (), BURST, max_tokens=10), GenerationProgress())
    finally:
        await replier.aclose()
    assert server.requests[0].body["max_tokens"] == 10
    assert text.endswith("\n\n" + parse_config({}).llm.cut_note)
