"""The scheduler's alarm: when it sleeps until, and how anyone in the process wakes it early.

Shared by whoever needs it (the scheduler sleeps on it; an arrival that arms a sooner timer, a
freed generation slot, a settled reply, a refusal's notice or another process's hint wake it), so
none of them reaches through another to find it. The composition root builds one per process.
"""

from __future__ import annotations

import asyncio
import math


class Wakeup:
    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.sleeping_until = math.inf  # while the scheduler sleeps: until when; else infinity

    def wake(self) -> None:
        self.event.set()

    def wake_before(self, due_at: float) -> None:
        """Something falls due at `due_at`: wake the scheduler if it would sleep past it."""
        if due_at < self.sleeping_until:
            self.event.set()
