"""Web search through Claude's server tools: the real `AsyncAnthropic` against the fake Messages
API, which streams searches, results, citations and `pause_turn` as the real API does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.config import parse_config
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.replier import BurstMessage, GenerationProgress, Prompt, WebSearch
from bot.core.settings import WebTools
from bot.core.store import GenerationRecord, TokenUsage
from bot.llm.claude import ClaudeReplier
from bot.ops.metrics import Metrics
from bot.ops.usage import MILLION, PriceTable, summarize, usage_lines
from bot.wiring import claude_replier, engine_settings
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend
from testkit.clock import FakeClock
from testkit.fake_anthropic import FakeAnthropic, Fetch, Plan, Search
from tests.apps import make_app, step

KEY_ENV = {"TEST_ANTHROPIC_KEY": "sk-test-not-a-real-key"}
BURST = (BurstMessage("alice", "what changed in the 3.14 release?"),)
RESULTS = [
    ("https://docs.python.org/3.14/whatsnew.html", "What's New In Python 3.14"),
    ("https://blog.example.org/314", "Python 3.14 [released]"),
]
SEARCH = Search("python 3.14 release notes", RESULTS)
TWO_CITATIONS = [
    (" Free-threading is officially supported.", RESULTS[0][0]),
    (" Template strings arrived.", RESULTS[1][0]),
]
SEARCHING = WebTools(web_search=True, max_uses=3)


def prompt(tools: WebTools = SEARCHING) -> Prompt:
    return Prompt("be brief", (), BURST, tools=tools)


@pytest.fixture
async def claude(server: FakeAnthropic) -> AsyncIterator[ClaudeReplier]:
    llm = {"base_url": server.base_url, "api_key_env": "TEST_ANTHROPIC_KEY", "max_retries": 0,
           "timeout_seconds": 5.0}  # fmt: skip
    replier = claude_replier(parse_config({"llm": llm}), KEY_ENV)
    yield replier
    await replier.aclose()


def search_tool(body: dict[str, Any]) -> dict[str, Any]:
    [tool] = [t for t in body["tools"] if t["name"] == "web_search"]
    return tool  # type: ignore[no-any-return]


# one search, two citations ---------------------------------------------------------------------
async def test_one_search_with_two_citations_ends_with_its_sources(
    server: FakeAnthropic, claude: ClaudeReplier
) -> None:
    server.queue(Plan(text="Here is what changed.", searches=[SEARCH], cited=TWO_CITATIONS))
    usage = GenerationProgress()
    text = await claude.generate(prompt(), usage)
    assert text == (
        "Here is what changed. Free-threading is officially supported. Template strings arrived."
        "\n\nSources: [What's New In Python 3.14](<https://docs.python.org/3.14/whatsnew.html>)"
        " · [Python 3.14 \\[released\\]](<https://blog.example.org/314>)"
    )
    [request] = server.requests
    assert request.body["tools"] == [
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    ]
    assert "anthropic-beta" not in request.headers
    assert usage.web_searches == 1
    assert usage.searches == [WebSearch("python 3.14 release notes", 2)]
    assert usage.activity == ""


async def test_a_channel_without_web_search_sends_no_tool(
    server: FakeAnthropic, claude: ClaudeReplier
) -> None:
    server.queue(Plan(text="From memory.", searches=[SEARCH]))
    usage = GenerationProgress()
    assert await claude.generate(prompt(WebTools()), usage) == "From memory."
    [request] = server.requests
    assert "tools" not in request.body and "tool_choice" not in request.body
    assert server.streams[0].searches_started == 0  # the model cannot search without the tool
    assert usage.web_searches == 0 and usage.searches == []


async def test_the_tool_list_is_sorted_and_the_same_for_every_burst(
    server: FakeAnthropic, claude: ClaudeReplier
) -> None:
    tools = WebTools(True, 2, allowed_domains=("python.org", "docs.example.org"), web_fetch=True)
    for _ in range(2):
        await claude.generate(prompt(tools), GenerationProgress())
    first, second = (r.body["tools"] for r in server.requests)
    assert first == second == [
        {"type": "web_fetch_20250910", "name": "web_fetch"},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 2,
         "allowed_domains": ["docs.example.org", "python.org"]},
    ]  # fmt: skip


# errors inside a successful response ------------------------------------------------------------
@pytest.mark.parametrize("code", ["max_uses_exceeded", "too_many_requests", "unavailable"])
async def test_an_error_result_is_answered_without_sources(
    server: FakeAnthropic, claude: ClaudeReplier, code: str
) -> None:
    server.queue(Plan(text="I could not search just now; from memory: …",
                      searches=[Search("python 3.14", error=code)]))  # fmt: skip
    usage = GenerationProgress()
    text = await claude.generate(prompt(), usage)
    assert text == "I could not search just now; from memory: …"
    assert usage.searches == [WebSearch("python 3.14", 0, code)]
    assert usage.web_searches == 0  # errors are not billed


# pause_turn ------------------------------------------------------------------------------------
async def test_a_paused_turn_is_continued_once_with_its_content_sent_back_as_is(
    server: FakeAnthropic, claude: ClaudeReplier
) -> None:
    server.queue(
        Plan(text="Let me look.", searches=[SEARCH], stop_reason="pause_turn"),
        Plan(text=" Done:", cited=TWO_CITATIONS[:1]),
    )
    usage = GenerationProgress()
    text = await claude.generate(prompt(), usage)
    assert text.startswith("Let me look.Done: Free-threading is officially supported.\n\nSources: ")
    first, second = server.requests
    assert first.messages == second.messages[:-1]
    paused = second.messages[-1]
    assert paused["role"] == "assistant"
    assert [b["type"] for b in paused["content"]] == [
        "server_tool_use", "web_search_tool_result", "text"
    ]  # fmt: skip
    use, result, said = paused["content"]
    assert use["input"] == {"query": "python 3.14 release notes"} and use["name"] == "web_search"
    assert result["tool_use_id"] == use["id"] and len(result["content"]) == 2
    assert said == {"type": "text", "text": "Let me look."}
    assert search_tool(second.body)["max_uses"] == 2  # what is left of the burst's budget
    assert usage.web_searches == 1


async def test_the_budget_holds_across_continuations(
    server: FakeAnthropic, claude: ClaudeReplier
) -> None:
    """Two searches allowed: one in the first call, the second call may search once more (its
    further search is refused by the tool), and a third call writes without tools."""
    server.queue(
        Plan(text="One.", searches=[SEARCH], stop_reason="pause_turn"),
        Plan(text="Two.", searches=[Search("a", RESULTS), Search("b", RESULTS)],
             stop_reason="pause_turn"),
        Plan(text="Answer.", searches=[Search("c", RESULTS)]),
    )  # fmt: skip
    usage = GenerationProgress()
    text = await claude.generate(prompt(WebTools(True, 2)), usage)
    assert text == "One.\n\nTwo.Answer."  # a paragraph where a search came between
    first, second, third = server.requests
    assert search_tool(first.body)["max_uses"] == 2
    assert search_tool(second.body)["max_uses"] == 1
    assert third.body["tool_choice"] == {"type": "none"}  # spent: answer from what was found
    assert [s.searches_started for s in server.streams] == [1, 2, 0]
    assert usage.web_searches == 2
    assert [s.error for s in usage.searches] == [None, None, "max_uses_exceeded"]


async def test_continuations_stop_at_the_cap(server: FakeAnthropic, claude: ClaudeReplier) -> None:
    server.default_plan = Plan(text="more.", stop_reason="pause_turn")
    usage = GenerationProgress()
    assert await claude.generate(prompt(WebTools(True, 50)), usage) == "more." * 4
    assert len(server.requests) == 4  # the first call and three continuations
    assert server.requests[-1].body["tool_choice"] == {"type": "none"}


# streaming shows the work; cancelling stops the chain ---------------------------------------------
async def test_the_draft_line_shows_the_query_then_gives_way_to_the_answer(
    server: FakeAnthropic, claude: ClaudeReplier
) -> None:
    held = Search("burstbot *release* notes", RESULTS, hold=True)
    server.queue(Plan(text="Found it.", searches=[held]))
    usage = GenerationProgress()
    task = asyncio.ensure_future(claude.generate(prompt(), usage))
    await server.wait_for(lambda: bool(server.streams) and server.streams[0].paused)
    await server.wait_for(lambda: "release" in usage.text_so_far())
    assert usage.text_so_far() == "_searching the web: burstbot \\*release\\* notes…_"
    server.release()
    assert await task == "Found it."
    assert usage.text_so_far() == "Found it."


async def test_cancelling_during_a_search_closes_the_stream_and_starts_nothing_else(
    server: FakeAnthropic, claude: ClaudeReplier
) -> None:
    server.queue(Plan(text="Later.", searches=[Search("slow", RESULTS, hold=True)],
                      stop_reason="pause_turn"))  # fmt: skip
    usage = GenerationProgress()
    task = asyncio.ensure_future(claude.generate(prompt(), usage))
    await server.wait_for(lambda: bool(server.streams) and server.streams[0].paused)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await server.wait_for(lambda: server.streams[0].outcome == "disconnected")
    assert len(server.requests) == 1 and server.streams[0].searches_started == 1


async def test_cancelling_during_a_continuation_ends_the_whole_chain(
    server: FakeAnthropic, claude: ClaudeReplier
) -> None:
    server.queue(
        Plan(text="First.", searches=[SEARCH], stop_reason="pause_turn"),
        Plan(text="Second.", searches=[Search("slow", RESULTS, hold=True)],
             stop_reason="pause_turn"),
    )  # fmt: skip
    usage = GenerationProgress()
    task = asyncio.ensure_future(claude.generate(prompt(), usage))
    await server.wait_for(lambda: len(server.streams) == 2 and server.streams[1].paused)
    await server.wait_for(lambda: "slow" in usage.text_so_far())  # the client read the query
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await server.wait_for(lambda: server.streams[1].outcome == "disconnected")
    assert len(server.requests) == 2  # no further continuation
    assert usage.web_searches == 1  # the first call's search was billed; the held one never ran
    assert [(s.query, s.error) for s in usage.searches] == [
        ("python 3.14 release notes", None), ("slow", "unfinished")
    ]  # fmt: skip


# config ----------------------------------------------------------------------------------------
KEY = ConversationKey("slack", "T1", "C1")


def test_channel_tools_override_the_global_ones_key_by_key() -> None:
    config = parse_config({
        "tools": {"web_search": True, "web_search_max_uses": 4,
                  "web_search_blocked_domains": ["spam.example"]},
        "channels": [
            {"platform": "slack", "channel": "C1",
             "tools": {"web_search_max_uses": 1, "web_search_allowed_domains": ["python.org"]}},
            {"platform": "slack", "channel": "C2", "tools": {"web_search": False}},
        ],
    })  # fmt: skip
    settings = engine_settings(config)
    assert settings.for_conversation(KEY).tools == WebTools(True, 1, ("python.org",), ())
    assert settings.voice_for(KEY).tools == settings.for_conversation(KEY).tools
    assert not settings.for_conversation(ConversationKey("slack", "T1", "C2")).tools.web_search
    assert settings.for_conversation(ConversationKey("slack", "T1", "C3")).tools == WebTools(
        True, 4, (), ("spam.example",)
    )
    assert not engine_settings(parse_config({})).for_conversation(KEY).tools.any


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"tools": {"web_search_allowed_domains": ["a.io"],
                    "web_search_blocked_domains": ["b.io"]}},
         "tools: web_search_allowed_domains and web_search_blocked_domains cannot both be set"),
        ({"tools": {"web_search_max_uses": 0}},
         "tools.web_search_max_uses: Input should be greater than or equal to 1"),
        ({"tools": {"web_search_max_uses": -2}},
         "tools.web_search_max_uses: Input should be greater than or equal to 1"),
        ({"tools": {"web_serch": True}}, "tools.web_serch: unknown key"),
        ({"tools": {"web_search_allowed_domains": ["https://a.io"]}},
         "tools.web_search_allowed_domains: 'https://a.io' is not a domain (write example.com, "
         "no scheme)"),
        ({"channels": [{"platform": "slack", "channel": "C1", "tools": {"max_uses": 2}}]},
         "channels.0.tools.max_uses: unknown key"),
        ({"channels": [{"platform": "slack", "channel": "C1", "tools": {
            "web_search_allowed_domains": ["a.io"], "web_search_blocked_domains": ["b.io"]}}]},
         "channels.0.tools: web_search_allowed_domains and web_search_blocked_domains cannot "
         "both be set"),
        ({"channels": [{"platform": "slack", "channel": "C1",
                        "tools": {"web_search_max_uses": 0}}]},
         "channels.0.tools.web_search_max_uses: Input should be greater than or equal to 1"),
    ],
)  # fmt: skip
def test_bad_tools_config_is_one_line(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    assert str(caught.value) == message


# cost: usage report, metric, guards ------------------------------------------------------------
def test_searches_are_priced_per_thousand_and_shown_in_the_usage_report() -> None:
    prices = PriceTable()
    assert prices.cost("claude-sonnet-5-5", 0, 0, 0, 0, 1000) == pytest.approx(10.0)
    own = PriceTable(parse_config({"prices": {"claude-sonnet-5-5": {
        "input": 3, "output": 15, "web_search": 5}}}).prices)  # fmt: skip
    assert own.cost("claude-sonnet-5-5", MILLION, 0, 0, 0, 2) == pytest.approx(3.0 + 0.01)
    spent = TokenUsage(1000, 100, web_searches=2)
    record = GenerationRecord("slack/T1/C1/", 1, 0, 1, 1.0, 2.0, "posted", spent,
                              model="claude-sonnet-5-5")  # fmt: skip
    rows, total = summarize([record], prices, "model")
    assert (total.searches, total.cost) == (2, pytest.approx((3000 + 1500) / MILLION + 0.02))
    lines = usage_lines(rows, total, "model", None)
    assert lines[2].split()[-3:] == ["searches", "cost", "(USD)"]
    assert lines[4].split()[-2:] == ["2", f"{total.cost:.4f}"]


def test_the_cost_metric_includes_searches() -> None:
    metrics = Metrics(PriceTable())
    fields = {"outcome": "posted", "model": "claude-sonnet-5-5", "input_tokens": 0,
              "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0,
              "web_searches": 3}  # fmt: skip
    metrics.observe("generation", fields)
    sample = metrics.registry.get_sample_value
    assert sample("burstbot_estimated_cost_usd_total", {"model": "claude-sonnet-5-5"}) == 0.03
    assert sample("burstbot_web_searches_total", {"model": "claude-sonnet-5-5"}) == 3


async def test_a_channels_daily_budget_counts_searches(
    server: FakeAnthropic, store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    """One search counts as `search_tokens` (3,000) against the budget: the first burst spends
    a 3,000-token channel budget, a second in that channel is refused, another channel goes on."""
    server.default_plan = Plan(text="Found.", searches=[Search("q", RESULTS)])
    llm = {"base_url": server.base_url, "api_key_env": "TEST_ANTHROPIC_KEY", "max_retries": 0}
    replier = claude_replier(parse_config({"llm": llm}), KEY_ENV)
    limits = {"channel_daily_tokens": 3000, "budget_notice": "budget spent"}
    app = make_app(store, clock, replier, frontend, tools={"web_search": True},  # type: ignore[arg-type]
                   limits=limits)  # fmt: skip
    here, there = ConversationKey("test", "w1", "c1"), ConversationKey("test", "w1", "c2")
    clock.jump(-(clock.now() % 86_400) + 3600)
    for n, key in enumerate([here, here, there]):
        await app.ingest(IncomingMessage(key, f"m{n}", "U1", "alice", "look it up"))
        await step(app, clock)
    await replier.aclose()
    assert len(server.requests) == 2  # the first burst here, then the one there
    assert frontend.texts(here) == ["Found.", "budget spent"]
    assert frontend.texts(there) == ["Found."]


# web fetch -------------------------------------------------------------------------------------
async def test_web_fetch_reads_a_page_from_the_conversation_and_its_result_goes_back_as_is(
    server: FakeAnthropic, claude: ClaudeReplier
) -> None:
    url = "https://status.example.com/incidents/42"
    burst = (BurstMessage("alice", f"what does {url} say?"),)
    server.queue(
        Plan(text="Reading it.", fetches=[Fetch(url, "All systems go.")],
             stop_reason="pause_turn"),
        Plan(text=" It says all systems go."),
    )  # fmt: skip
    usage = GenerationProgress()
    tools = WebTools(web_fetch=True)
    text = await claude.generate(Prompt("", (), burst, tools=tools), usage)
    assert text == "Reading it.It says all systems go."
    first, second = server.requests
    assert first.body["tools"] == [{"type": "web_fetch_20250910", "name": "web_fetch"}]
    use, result, said = second.messages[-1]["content"]
    assert use["name"] == "web_fetch" and use["input"] == {"url": url}
    assert result["type"] == "web_fetch_tool_result" and result["tool_use_id"] == use["id"]
    assert result["content"]["content"]["source"]["data"] == "All systems go."
    assert said == {"type": "text", "text": "Reading it."}
    assert usage.web_searches == 0 and usage.searches == []  # fetching is not searching


async def test_web_fetch_of_a_url_not_in_the_conversation_is_refused_and_answered_anyway(
    server: FakeAnthropic, claude: ClaudeReplier
) -> None:
    server.queue(
        Plan(text="I cannot open that page.", fetches=[Fetch("https://elsewhere.example")])
    )
    text = await claude.generate(prompt(WebTools(web_fetch=True)), GenerationProgress())
    assert text == "I cannot open that page."
    assert server.streams[0].fetches_started == 1
