"""A typing notice stretching a pending burst's quiet window (`bot/core/typing_window.py`)."""

from __future__ import annotations

from storage.seam import Conn, StoreSeam


class TypingWindowSteps(StoreSeam[Conn]):
    async def extend_quiet(
        self, conversation_id: str, author_id: str, until: float, now: float
    ) -> float | None:
        """One conditional UPDATE of an armed timer (see `extend_quiet_for_typing`). A notice is
        an arrival: it keeps its place among the messages around it, so a notice from before a
        message never stretches that message's window."""
        params = {"cid": conversation_id, "author": author_id, "until": until, "now": now}
        async with self._transaction(arrival=True) as db:
            rows = await self._rows("extend_quiet_for_typing", params, db)
        return float(rows[0][0]) if rows else None
