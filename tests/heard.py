"""Wait for a named event the engine announces (`looked`, `asleep`, `committed`, ...) instead of
sleeping and hoping the code got that far: the wait is bounded, and it ends on the event."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

Fields = dict[str, object]


class Heard:
    """Subscribe to an engine's signals (`engine.subscribe(heard)`) and keep every event."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Fields]] = []
        self._changed = asyncio.Event()

    def __call__(self, name: str, fields: Fields) -> None:
        self.events.append((name, fields))
        self._changed.set()

    def count(self, name: str) -> int:
        return sum(1 for heard, _ in self.events if heard == name)

    def mark(self) -> int:
        """A point in the record: `next(..., since=mark)` also finds events heard after it."""
        return len(self.events)

    async def next(
        self,
        name: str,
        where: Callable[[Fields], bool] = lambda fields: True,
        since: int | None = None,
        within: float = 10.0,
    ) -> Fields:
        """The first `name` event heard since `since` (default: from now on) matching `where`."""
        start = len(self.events) if since is None else since
        async with asyncio.timeout(within):
            while True:
                for heard, fields in self.events[start:]:
                    if heard == name and where(fields):
                        return fields
                start = len(self.events)
                self._changed.clear()
                await self._changed.wait()
