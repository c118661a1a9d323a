"""The store's operator side: `/reset`, cost-guard counters and read-only inspection.

A mixin of the SQL store (storage/sql_store.py), which supplies the two seam methods declared here;
it keeps the pipeline file about the pipeline.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractAsyncContextManager
from typing import Generic, TypeVar

from bot.core.store import StoredMessage
from bot.ops.inspection import ConversationSummary
from storage.rows import Params, Row, message_from_row, summary_from_row

Conn = TypeVar("Conn")


class OperatorQueries(ABC, Generic[Conn]):
    @abstractmethod
    def _transaction(self) -> AbstractAsyncContextManager[Conn]:
        """One transaction on one connection (see storage/sql_store.py)."""

    @abstractmethod
    async def _rows(self, name: str, params: Params, db: Conn | None = None) -> list[Row]:
        """One statement by name, inside `db`'s transaction or on its own."""

    # /reset ----------------------------------------------------------------------------------
    async def reset_history(self, conversation_id: str) -> int | None:
        rows = await self._rows("reset_history", {"cid": conversation_id})
        return int(rows[0][0]) if rows else None

    # cost-guard counters (bot.guards.CounterStore) -------------------------------------------
    async def add_to_counter(
        self, scope: str, window_start: int, amount: int, expires_at: float, now: float
    ) -> int:
        async with self._transaction() as db:
            await self._rows("prune_counters", {"now": now}, db)
            rows = await self._rows(
                "add_to_counter",
                {"scope": scope, "window_start": window_start, "amount": amount,
                 "expires_at": expires_at},
                db,
            )  # fmt: skip
        return int(rows[0][0])

    async def add_once(
        self,
        key: str,
        scope: str,
        window_start: int,
        expires_at: float,
        key_expires_at: float,
        now: float,
    ) -> tuple[int, bool]:
        """One transaction, so a repeat waits for the first call and reads what it counted."""
        remembered = f"once:{key}"
        async with self._transaction() as db:
            await self._rows("prune_counters", {"now": now}, db)
            claim = {"scope": remembered, "expires_at": key_expires_at}
            if not await self._rows("claim_counter_key", claim, db):
                known = {"scope": remembered, "window_start": 0}
                rows = await self._rows("read_counter", known, db)
                return (int(rows[0][0]) if rows else 0), False
            rows = await self._rows(
                "add_to_counter",
                {"scope": scope, "window_start": window_start, "amount": 1,
                 "expires_at": expires_at},
                db,
            )  # fmt: skip
            total = int(rows[0][0])
            await self._rows("remember_counter_total", {"scope": remembered, "amount": total}, db)
        return total, True

    async def read_counter(self, scope: str, window_start: int) -> int:
        rows = await self._rows("read_counter", {"scope": scope, "window_start": window_start})
        return int(rows[0][0]) if rows else 0

    # inspection (bot.inspection.StoreInspector) ----------------------------------------------
    async def list_conversations(
        self, active_only: bool = True, limit: int = 50
    ) -> list[ConversationSummary]:
        rows = await self._rows("list_conversations", {"active": active_only, "limit": limit})
        return [summary_from_row(r) for r in rows]

    async def messages(self, conversation_id: str) -> list[StoredMessage]:
        rows = await self._rows("all_messages", {"cid": conversation_id})
        return [message_from_row(r) for r in rows]
