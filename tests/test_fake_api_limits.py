"""The fake Messages API's rate limits (testkit/rate_limits.py `ApiLimits`) through the real SDK:
per-minute budgets replenished continuously, requests and input tokens counted separately, 429
with retry-after, 529 when overloaded, and the `anthropic-ratelimit-*` headers on every answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime

import anthropic
import pytest

from testkit.clock import FakeClock
from testkit.fake_anthropic import FakeAnthropic
from testkit.rate_limits import ApiLimits


@pytest.fixture
async def client(server: FakeAnthropic) -> AsyncIterator[anthropic.AsyncAnthropic]:
    sdk = anthropic.AsyncAnthropic(api_key="sk-test", base_url=server.base_url, max_retries=0)
    yield sdk
    await sdk.close()


async def ask(client: anthropic.AsyncAnthropic, text: str = "hi") -> dict[str, str]:
    """One request: the answer's headers (a refusal's too, from the error)."""
    try:
        raw = await client.messages.with_raw_response.create(
            model="claude-test", max_tokens=100, messages=[{"role": "user", "content": text}]
        )
    except anthropic.APIStatusError as exc:
        return {"status": str(exc.status_code), **dict(exc.response.headers)}
    return {"status": "200", **dict(raw.headers)}


async def test_requests_per_minute_refill_continuously_and_429_says_when(
    server: FakeAnthropic, client: anthropic.AsyncAnthropic, clock: FakeClock
) -> None:
    server.limits = ApiLimits(requests_per_minute=3, clock=clock.monotonic, wall=clock.now)
    answers = [await ask(client) for _ in range(4)]
    assert [a["status"] for a in answers] == ["200", "200", "200", "429"]
    assert [a["anthropic-ratelimit-requests-remaining"] for a in answers] == ["2", "1", "0", "0"]
    assert answers[0]["anthropic-ratelimit-requests-limit"] == "3"
    assert float(answers[3]["retry-after-ms"]) == pytest.approx(20_000)  # one request: 20 s
    reset = datetime.fromisoformat(answers[2]["anthropic-ratelimit-requests-reset"])
    assert reset.timestamp() == pytest.approx(clock.now() + 60.0, abs=0.01)  # full in a minute
    await clock.advance(19.0)
    assert (await ask(client))["status"] == "429"
    await clock.advance(1.0)
    assert (await ask(client))["status"] == "200"
    assert server.limits.refused == 2 and len(server.requests) == 4 + 2


async def test_input_tokens_are_counted_apart_from_requests(
    server: FakeAnthropic, client: anthropic.AsyncAnthropic, clock: FakeClock
) -> None:
    server.limits = ApiLimits(
        requests_per_minute=100, input_tokens_per_minute=600, clock=clock.monotonic, wall=clock.now
    )
    first = await ask(client, "word " * 400)  # about 500 tokens
    assert first["status"] == "200"
    left = int(first["anthropic-ratelimit-input-tokens-remaining"])
    assert 50 < left < 150
    assert first["anthropic-ratelimit-requests-remaining"] == "99"
    refused = await ask(client, "word " * 400)
    assert refused["status"] == "429"
    assert refused["anthropic-ratelimit-requests-remaining"] == "99"  # a refusal spends nothing
    assert (await ask(client, "short"))["status"] == "200"


async def test_an_overloaded_api_answers_529(
    server: FakeAnthropic, client: anthropic.AsyncAnthropic, clock: FakeClock
) -> None:
    server.limits = ApiLimits(requests_per_minute=100, clock=clock.monotonic, wall=clock.now)
    server.limits.overloaded = True
    assert (await ask(client))["status"] == "529"
    server.limits.overloaded = False
    assert (await ask(client))["status"] == "200"
