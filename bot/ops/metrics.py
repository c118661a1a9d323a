"""Prometheus metrics from the engine's event hook, served with `/healthz` on aiohttp.

`Metrics.observe` is an engine listener: every named event (`accepted`, `generating`,
`superseded`, `delivered`, ...) moves a counter or a histogram; nothing in the pipeline knows
about Prometheus. Each app has its own registry, so several apps (tests) never share counts.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

from bot.core.errors import ConfigError
from bot.ops.usage import WASTED_OUTCOMES, PriceTable

log = logging.getLogger("burstbot.metrics")

SIMPLE_COUNTERS = {
    "generating": ("bursts", "Bursts handed to the model (one model call each)"),
    "delivered": ("replies_posted", "Replies posted to a platform"),
    "superseded": ("supersedes", "Generations cancelled because newer input arrived"),
    "discarded": ("discards", "Finished generations refused at the final check"),
    "lease_conflict": ("lease_conflicts", "Due conversations leased by another worker"),
    "lease_takeover": ("lease_takeovers", "Leases taken over after their holder let them expire"),
    "model_retry": ("model_retries", "Failed model calls that will be retried"),
    "apology": ("apologies", "Bursts answered with the failure message"),
    "delivery_retry": ("delivery_retries", "Posting attempts that will be retried"),
    "delivery_failed": ("delivery_failures", "Replies given up on (permanent delivery failure)"),
    "reset": ("resets", "Conversations whose history a user cleared"),
}
INGEST_STATUSES = ("accepted", "duplicate", "history", "unknown", "ignored")
TOKEN_KINDS = ("input", "output")


class Metrics:
    def __init__(self, prices: PriceTable | None = None) -> None:
        self.prices = prices or PriceTable()  # replaced by a reload
        self._voted: set[tuple[str, str]] = set()  # (model, vote) pairs the gauge has shown
        self.registry = r = CollectorRegistry()

        def counter(name: str, text: str, *labels: str) -> Counter:
            return Counter(f"burstbot_{name}", text, labels, registry=r)

        self.ingested = counter(
            "messages",
            "Events ingested by result: accepted, duplicate (dropped), history, unknown, ignored",
            "status",
        )
        self.refused = counter(
            "refused",
            "Messages and bursts refused by access rules or cost guards",
            "stage",
            "reason",
        )
        self.tokens = counter("tokens", "Model tokens: input, output, wasted", "kind")
        self.model_tokens = counter(
            "model_tokens",
            "Model tokens by model and kind: input, output, cache_read, cache_write",
            "model",
            "kind",
        )
        self.cost = counter(
            "estimated_cost_usd",
            "Estimated model cost in USD from the price table (`burstbot usage` prices it alike)",
            "model",
        )
        self.tool_calls = counter(
            "tool_calls",
            "MCP tool calls by server and outcome: done, failed, unknown (may have run), "
            "unavailable, given (an earlier generation of the burst had made it)",
            "server",
            "outcome",
        )
        self.tools_unavailable = counter(
            "tool_servers_unavailable",
            "Generations that had to leave out a server's tools because it was down",
            "server",
        )
        self.web_searches = counter(
            "web_searches",
            "Web searches the model ran (billed per search, included in the estimated cost)",
            "model",
        )
        self.counters = {event: counter(*named) for event, named in SIMPLE_COUNTERS.items()}
        # per workspace (a Slack team, a Discord guild): the conversation id names it, so these
        # cost a label each and no look-up
        self.workspace_messages = counter(
            "workspace_messages", "Messages accepted, by platform and workspace",
            "platform", "workspace",
        )  # fmt: skip
        self.workspace_replies = counter(
            "workspace_replies_posted", "Replies posted, by platform and workspace",
            "platform", "workspace",
        )  # fmt: skip
        self.workspace_tokens = counter(
            "workspace_tokens", "Model tokens by platform, workspace and kind: input, output",
            "platform", "workspace", "kind",
        )  # fmt: skip
        self.outbox_depth = Gauge(
            "burstbot_outbox_depth", "Replies waiting in the outbox (every process)", registry=r
        )
        self.outbox_failed = Gauge(
            "burstbot_outbox_failed",
            "Replies that failed for good and wait for `burstbot retry` (every process)",
            registry=r,
        )
        self.oldest_pending_age = Gauge(
            "burstbot_oldest_pending_message_age_seconds",
            "Age of the oldest unanswered message (every process; 0 when none)",
            registry=r,
        )
        self.votes = Gauge(
            "burstbot_votes",
            "👍/👎 votes standing on answers, one per person per answer (every process), by the "
            "model that wrote the answer and the vote: up, down",
            ("model", "vote"),
            registry=r,
        )
        self.vote_presses = counter(
            "vote_presses",
            "👍/👎 presses this process decided, by outcome: voted, duplicate (a repeat "
            "delivery), outdated (older than the vote standing), not_votable",
            "outcome",
        )
        self.generations_in_flight = Gauge(
            "burstbot_generations_in_flight", "Model calls this process runs now", registry=r
        )
        self.capacity_waits = counter(
            "capacity_waits",
            "Bursts this process held back for capacity, by what they waited for first (requests "
            "per minute, 429 rate limited, this process's CPU, ...)",
            "waiting_for",
        )
        self.capacity_waited = Histogram(
            "burstbot_capacity_wait_seconds",
            "How long a burst held back for capacity waited before it started",
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300),
            registry=r,
        )
        self.burst_size = Histogram(
            "burstbot_burst_size_messages",
            "Messages per burst handed to the model",
            buckets=(1, 2, 3, 4, 5, 8, 13, 21, 34),
            registry=r,
        )
        self.reply_latency = Histogram(
            "burstbot_reply_latency_seconds",
            "From the last message of a burst to its reply entering the outbox",
            buckets=(0.5, 1, 1.5, 2, 3, 5, 8, 13, 21, 34, 60, 120),
            registry=r,
        )

    def observe(self, name: str, fields: dict[str, object]) -> None:
        """Engine listener: never raises into the pipeline."""
        try:
            self._observe(name, fields)
        except Exception:
            log.debug("metrics: cannot count %s %r", name, fields, exc_info=True)

    def _observe(self, name: str, fields: dict[str, object]) -> None:
        if name in INGEST_STATUSES:
            self.ingested.labels(name).inc()
        if name in self.counters:
            self.counters[name].inc()
        self._count_workspace(name, fields)
        if name == "generating":
            self.burst_size.observe(_number(fields.get("burst")))
        elif name == "committed":
            self.reply_latency.observe(max(0.0, _number(fields.get("latency"))))
        elif name == "generation":
            output = _number(fields.get("output_tokens"))
            self.tokens.labels("input").inc(_number(fields.get("input_tokens")))
            self.tokens.labels("output").inc(output)
            if fields.get("outcome") in WASTED_OUTCOMES:
                self.tokens.labels("wasted").inc(output)
            self._count_model_usage(fields)
        elif name == "capacity_wait":
            self.capacity_waits.labels(str(fields.get("waiting_for", ""))).inc()
        elif name == "admitted":
            self.capacity_waited.observe(max(0.0, _number(fields.get("waited"))))
        elif name == "tool_call":
            self.tool_calls.labels(str(fields.get("server")), str(fields.get("outcome"))).inc()
        elif name == "tool_unavailable":
            self.tools_unavailable.labels(str(fields.get("server"))).inc()
        elif name == "voted":
            self.vote_presses.labels(str(fields.get("outcome"))).inc()
        elif name == "refused":
            stage = str(fields.get("stage", ""))
            self.refused.labels(stage, str(fields.get("reason", ""))).inc()
            if stage != "burst":
                self.ingested.labels("ignored").inc()

    def _count_workspace(self, name: str, fields: dict[str, object]) -> None:
        conversation = fields.get("conversation")
        if name not in ("accepted", "delivered", "generation") or not isinstance(conversation, str):
            return
        platform, workspace, *_ = [*conversation.split("/"), "", ""]
        if name == "accepted":
            self.workspace_messages.labels(platform, workspace).inc()
        elif name == "delivered":
            self.workspace_replies.labels(platform, workspace).inc()
        else:
            for kind in TOKEN_KINDS:
                tokens = _number(fields.get(f"{kind}_tokens"))
                self.workspace_tokens.labels(platform, workspace, kind).inc(tokens)

    def _count_model_usage(self, fields: dict[str, object]) -> None:
        model = str(fields.get("model") or "(no model)")
        kinds = ("input", "output", "cache_read", "cache_write")
        tokens = [int(_number(fields.get(f"{kind}_tokens"))) for kind in kinds]
        for kind, count in zip(kinds, tokens, strict=True):
            if count:
                self.model_tokens.labels(model, kind).inc(count)
        searches = int(_number(fields.get("web_searches")))
        if searches:
            self.web_searches.labels(model).inc(searches)
        input, output, cache_read, cache_write = tokens
        if any(tokens) or searches:
            cost = self.prices.cost(model, input, output, cache_read, cache_write, searches)
            if cost is not None:
                self.cost.labels(model).inc(cost)

    def set_votes(self, totals: dict[tuple[str, str], int]) -> None:
        """The votes standing, read from the store at scrape time: (model, vote) → count. A pair
        no longer in the store (its answers' votes changed) drops to 0."""
        for model, vote in {*totals, *self._voted}:
            self.votes.labels(model or "(no model)", vote).set(totals.get((model, vote), 0))
        self._voted |= set(totals)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


@dataclass(eq=False, repr=False)
class MetricsServer:
    """`/metrics` (Prometheus text format) and `/healthz`: `health` returns a report whose "ok"
    decides 200 or 503 (raising is 503); `refresh` sets the gauges before each scrape."""

    metrics: Metrics
    health: Callable[[], Awaitable[dict[str, object]]]
    host: str
    port: int
    refresh: Callable[[], Awaitable[None]] | None = None
    _runner: web.AppRunner | None = field(default=None, init=False)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            await self.stop()
            raise ConfigError(f"metrics: cannot listen on {self.host}:{self.port} ({exc})") from exc
        self.port = int(sock.getsockname()[1])  # the real one when configured as 0
        await web.SockSite(self._runner, sock).start()
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, _request: web.Request) -> web.Response:
        if self.refresh is not None:
            try:
                await asyncio.wait_for(self.refresh(), timeout=5.0)
            except Exception as exc:  # the counters are still worth serving
                log.warning("metrics: gauges not refreshed (%s)", exc)
        body = self.metrics.exposition()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _request: web.Request) -> web.Response:
        try:
            report = await asyncio.wait_for(self.health(), timeout=5.0)
        except Exception as exc:
            return web.json_response({"ok": False, "error": type(exc).__name__}, status=503)
        return web.json_response(report, status=200 if report["ok"] else 503)
