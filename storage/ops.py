"""A store's operator side: `/reset`, cost-guard counters and read-only inspection.

A mixin shared by every store: it runs the same named queries (each store's own `.sql` file)
through the store's `_rows` and `_transaction`, so the pipeline files stay about the pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic, TypeVar

from bot.core.store import StoredMessage
from bot.ops.inspection import ConversationSummary
from storage.rows import message_from_row, summary_from_row

Params = Mapping[str, Any]
Conn = TypeVar("Conn")


class OperatorQueries(Generic[Conn]):
    # provided by the store
    async def _rows(self, name: str, params: Params, db: Conn | None = None) -> list[Any]:
        raise NotImplementedError

    def _transaction(self) -> AbstractAsyncContextManager[Conn]:
        raise NotImplementedError

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
