"""A typing notice stretching a pending burst's quiet window (`bot/core/typing_window.py`)."""

from __future__ import annotations

from storage.seam import Conn, StoreSeam


class TypingWindowSteps(StoreSeam[Conn]):
    async def extend_quiet(
        self, conversation_id: str, author_id: str, until: float, now: float
    ) -> float | None:
        """One conditional UPDATE of an armed timer (see `extend_quiet_for_typing`)."""
        params = {"cid": conversation_id, "author": author_id, "until": until, "now": now}
        rows = await self._rows("extend_quiet_for_typing", params)
        return float(rows[0][0]) if rows else None
