"""What `/healthz` and the gauges of `/metrics` report for one process (docs/metrics.md): healthy
while the store answers a query and every front end can receive; the gauges are read at scrape
time, from the store (every process's work) and from this process (generations in flight).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.core.clock import Clock
from bot.core.frontend import Frontend, frontend_health
from bot.ops.metrics import Metrics

if TYPE_CHECKING:
    from storage.sql_store import SqlStore

STORE_CHECK_SECONDS = 4.0


@dataclass(eq=False)
class Health:
    store: SqlStore[Any]
    frontends: Sequence[Frontend]
    metrics: Metrics
    clock: Clock
    in_flight: Callable[[], int]

    async def report(self) -> dict[str, object]:
        try:
            await asyncio.wait_for(self.store.next_due_at(self.clock.now()), STORE_CHECK_SECONDS)
            store = {"ok": True, "state": "answering"}
        except Exception as exc:
            store = {"ok": False, "state": f"failing ({type(exc).__name__})"}
        frontends: dict[str, dict[str, object]] = {}
        for frontend in self.frontends:
            ok, state = frontend_health(frontend)
            frontends[frontend.platform] = {"ok": ok, "state": state}
        healthy = bool(store["ok"]) and all(part["ok"] for part in frontends.values())
        return {"ok": healthy, "store": store, "frontends": frontends}

    async def refresh(self) -> None:
        self.metrics.generations_in_flight.set(self.in_flight())
        backlog = await self.store.backlog()
        oldest = backlog.oldest_pending_at
        age = 0.0 if oldest is None else max(0.0, self.clock.now() - oldest)
        self.metrics.outbox_depth.set(backlog.outbox_depth)
        self.metrics.oldest_pending_age.set(age)
        self.metrics.outbox_failed.set(backlog.outbox_failed)
        self.metrics.set_votes(await self.store.vote_totals())
