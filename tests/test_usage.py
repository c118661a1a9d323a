"""`burstbot usage`: tokens and estimated cost by model, user or channel; the same as metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import PriceConfig, parse_config
from bot.core.store import GenerationRecord, TokenUsage
from bot.ops.metrics import Metrics
from bot.ops.usage import PriceTable, parse_since, summarize, usage_lines
from tests.test_cli import burstbot

NOW = 1_800_000_000.0
MILLION = 1_000_000


def generation(
    model: str,
    usage: TokenUsage,
    outcome: str = "posted",
    user: str = "U1",
    cid: str = "slack/T1/C1/",
    ended_at: float = NOW,
) -> GenerationRecord:
    return GenerationRecord(
        cid,
        1,
        0,
        1,
        ended_at - 2,
        ended_at,
        outcome,
        usage,
        model=model,
        user_id=user,  # type: ignore[arg-type]
    )


def test_costs_follow_the_price_table_including_cache_reads_and_writes() -> None:
    prices = PriceTable()
    # Sonnet 5.5: $3 in, $15 out; cache reads a tenth of input, writes 1.25 times input.
    assert prices.cost("claude-sonnet-5-5", MILLION, MILLION, 0, 0) == pytest.approx(18.0)
    assert prices.cost("claude-sonnet-5-5", 0, 0, MILLION, MILLION) == pytest.approx(0.3 + 3.75)
    assert prices.cost("claude-sonnet-5-5-20261001", MILLION, 0, 0, 0) == pytest.approx(3.0)
    assert prices.cost("claude-haiku-4-5", MILLION, MILLION, 0, 0) == pytest.approx(6.0)
    assert prices.cost("claude-sonnet-5", MILLION, 0, 0, 0) == pytest.approx(3.0)
    assert prices.cost("gpt-something", MILLION, 0, 0, 0) is None
    own = PriceTable({"claude-sonnet-5-5": PriceConfig(input=1.0, output=2.0, cache_read=0.5)})
    assert own.cost("claude-sonnet-5-5", MILLION, MILLION, MILLION, 0) == pytest.approx(3.5)


def test_a_price_table_in_the_config_is_checked() -> None:
    config = parse_config({"prices": {"my-model": {"input": 2, "output": 4.5}}})
    assert config.prices["my-model"].output == 4.5
    with pytest.raises(Exception, match=r"prices.my-model.output"):
        parse_config({"prices": {"my-model": {"input": 2, "output": -1}}})


def test_usage_groups_and_totals_with_wasted_output() -> None:
    records = [
        generation("claude-sonnet-5-5", TokenUsage(1000, 200, 300, 400), user="U1"),
        generation("claude-sonnet-5-5", TokenUsage(500, 50), "superseded", user="U2"),
        generation("claude-haiku-4-5", TokenUsage(100, 10), user="U1", cid="discord/G1/C9/"),
        generation("claude-haiku-4-5", TokenUsage(7, 7), ended_at=NOW - 10 * 86_400),  # too old
    ]
    rows, total = summarize(records, PriceTable(), "model", since=NOW - 86_400)
    assert [(r.key, r.generations, r.input, r.output, r.wasted) for r in rows] == [
        ("claude-sonnet-5-5", 2, 1500, 250, 50),
        ("claude-haiku-4-5", 1, 100, 10, 0),
    ]
    sonnet = (1500 * 3 + 250 * 15 + 300 * 0.3 + 400 * 3.75) / MILLION
    haiku = (100 * 1 + 10 * 5) / MILLION
    assert rows[0].cost == pytest.approx(sonnet) and rows[1].cost == pytest.approx(haiku)
    assert (total.generations, total.cost) == (3, pytest.approx(sonnet + haiku))
    by_user, _ = summarize(records, PriceTable(), "user", since=NOW - 86_400)
    assert {r.key: r.generations for r in by_user} == {
        "slack:U1": 1,
        "slack:U2": 1,
        "discord:U1": 1,
    }
    by_channel, _ = summarize(records, PriceTable(), "channel")
    assert {r.key: r.generations for r in by_channel} == {"slack/T1/C1": 3, "discord/G1/C9": 1}
    by_workspace, _ = summarize(records, PriceTable(), "workspace")
    assert {r.key: r.generations for r in by_workspace} == {"slack/T1": 3, "discord/G1": 1}
    by_day, _ = summarize(records, PriceTable(), "day")  # NOW is 2027-01-15 08:00 UTC
    assert {r.key: r.generations for r in by_day} == {"2027-01-15": 3, "2027-01-05": 1}


def test_an_unpriced_model_is_flagged_not_guessed() -> None:
    records = [generation("mystery-model", TokenUsage(100, 10))]
    rows, total = summarize(records, PriceTable(), "model")
    lines = usage_lines(rows, total, "model", None)
    assert lines[-1].startswith("+? = some tokens of a model without a price")
    assert lines[4].split()[-1] == "0.0000+?"


def test_since_takes_durations_and_dates() -> None:
    assert parse_since("7d", now=NOW) == NOW - 7 * 86_400
    assert parse_since("90m", now=NOW) == NOW - 5400
    assert parse_since("2026-11-01") == 1_793_491_200.0
    with pytest.raises(ValueError, match="--since 'last week'"):
        parse_since("last week")


def test_metrics_count_tokens_and_cost_per_model() -> None:
    metrics = Metrics(PriceTable())
    fields: dict[str, object] = {
        "outcome": "posted", "model": "claude-sonnet-5-5", "input_tokens": MILLION,
        "output_tokens": 2 * MILLION, "cache_read_tokens": 0, "cache_write_tokens": MILLION,
    }  # fmt: skip
    metrics.observe("generation", fields)
    text = metrics.exposition().decode()
    assert 'burstbot_model_tokens_total{kind="output",model="claude-sonnet-5-5"} 2e+06' in text
    assert 'burstbot_model_tokens_total{kind="cache_write",model="claude-sonnet-5-5"} 1e+06' in text
    assert 'burstbot_estimated_cost_usd_total{model="claude-sonnet-5-5"} 36.75' in text


def test_usage_after_the_demo_prints_tokens_and_cost(tmp_path: Path) -> None:
    """As a self-hoster tries it: the demo keeps its database, `burstbot usage` reads it (its
    default config is ./burstbot.db). The offline replier's tokens cost nothing."""
    demo = burstbot(["demo", "--quiet", "0.3", "--database", "burstbot.db"], tmp_path)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    result = burstbot(["usage"], tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "model usage, all time, by model (cost estimated from the price table)"
    assert lines[2].split() == [
        "model", "gens", "input", "output", "cache", "read", "cache", "write", "wasted", "searches",
        "cost", "(USD)",
    ]  # fmt: skip
    offline = lines[4].split()
    assert offline[0] == "offline" and offline[-1] == "0.0000"
    assert int(offline[1]) == 4  # three bursts, one generation superseded by a late message
    assert int(offline[2].replace(",", "")) > 0 and int(offline[6]) > 0  # input; wasted output
    by_user = burstbot(["usage", "--by", "user", "--since", "1h"], tmp_path)
    assert by_user.stdout.splitlines()[4].split()[:2] == ["console:demo-user", "4"]
    bad = burstbot(["usage", "--since", "yesterday"], tmp_path)
    assert bad.returncode == 2 and "--since 'yesterday'" in bad.stderr
