"""Statements outside the burst pipeline, mixed into `SqlStore`: a typing notice stretching a
pending burst's quiet window (`bot/core/typing_window.py`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from storage.rows import Params, Row


class Upkeep(ABC):
    @abstractmethod
    async def _rows(self, name: str, params: Params, db: Any = None) -> list[Row]: ...

    async def extend_quiet(
        self, conversation_id: str, author_id: str, until: float
    ) -> float | None:
        """One conditional UPDATE of an armed timer (see `extend_quiet_for_typing`)."""
        params = {"cid": conversation_id, "author": author_id, "until": until}
        rows = await self._rows("extend_quiet_for_typing", params)
        return float(rows[0][0]) if rows else None
