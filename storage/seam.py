"""What every group of SQL store steps runs on: one transaction, one named statement, and the
codec for lists (see storage/sql_store.py's docstring). Each backend fills it in once; the step
groups (sql_store.py and the mixins it lists) share it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic, TypeVar

from bot.core.store import OutboxRow
from storage import rows as codec
from storage.rows import Params, Row

Conn = TypeVar("Conn")


class StoreSeam(ABC, Generic[Conn]):
    @abstractmethod
    def _transaction(self, arrival: bool = False) -> AbstractAsyncContextManager[Conn]:
        """`arrival`: a platform event's (ingest, edit, delete, typing notice), which a backend
        that queues transactions runs first: the platform waits for its acknowledgement."""

    @abstractmethod
    async def _rows(self, name: str, params: Params, db: Conn | None = None) -> list[Row]: ...

    @abstractmethod
    def _array(self, values: Sequence[str]) -> object: ...

    @abstractmethod
    def _strings(self, value: Any) -> tuple[str, ...]: ...

    async def _hint(self, db: Conn, payload: str) -> None:
        """No other process listens unless the backend says otherwise."""

    async def listen(self, hint: Callable[[str], None]) -> None:
        """Nothing to hear unless the backend says otherwise (see `_hint`)."""

    async def _off_disk(self) -> None:
        """After an erase or a retention sweep, outside any transaction: make what was erased
        (here, or by another process whose own attempt was held back) unreadable in the
        backend's files. Nothing unless the backend says otherwise (PostgreSQL leaves it to
        VACUUM: docs/operations.md)."""

    async def _one(self, name: str, params: Params, db: Conn | None = None) -> Row | None:
        rows = await self._rows(name, params, db)
        return rows[0] if rows else None

    def _outbox(self, r: Row) -> OutboxRow:
        return codec.outbox_from_row(r, self._strings(r["platform_message_ids"]))
