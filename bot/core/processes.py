"""The processes running the bot, as the store knows them: each `burstbot run` writes its row
when it starts, stamps it every `REFRESH_SECONDS` on the database's clock and deletes it when it
stops cleanly. An idle process is listed as well as a busy one, and one that died without a word
is told apart: not seen for `GONE_AFTER_SECONDS`, it is gone; not seen for a day, its row is
pruned by whichever process refreshes next.

The row is bookkeeping for the operator, never part of the protocol: a refresh that fails is
logged once (and once more when one succeeds again) and the bot serves on.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from typing import Protocol

from bot.core.clock import Clock

log = logging.getLogger("burstbot.processes")
REFRESH_SECONDS = 5.0
GONE_AFTER_SECONDS = 3 * REFRESH_SECONDS
"""Three refreshes missed: a process busy on a slow database still refreshes well within it."""
PRUNE_AFTER_SECONDS = 86_400.0


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    owner: str  # its name on leases and claims (`engine.owner`, host, pid, a random part)
    host: str
    pid: int
    version: str  # of burstbot
    started_at: float  # on the caller's clock
    seen_at: float  # on the caller's clock

    def gone(self, now: float) -> bool:
        return now - self.seen_at > GONE_AFTER_SECONDS


class ProcessBook(Protocol):
    async def see_process(self, owner: str, host: str, pid: int, version: str, now: float) -> None:
        """Stamp the process seen now (writing its row, started now, when there is none)."""
        ...

    async def forget_process(self, owner: str) -> bool:
        """Its row gone; True when there was one."""
        ...

    async def prune_processes(self, unseen_for: float, now: float) -> int:
        """Delete the rows not seen for `unseen_for` seconds; how many."""
        ...


class Presence:
    """This process's row: written at start (`see`), refreshed by `run`, deleted by `leave`."""

    def __init__(
        self,
        book: ProcessBook,
        clock: Clock,
        owner: str,
        version: str,
        refresh_seconds: float = REFRESH_SECONDS,
    ) -> None:
        self.book = book
        self.clock = clock
        self.owner = owner
        self.version = version
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.refresh_seconds = refresh_seconds
        self.refreshes = 0  # attempts made, failed or not (tests wait on it)
        self._failing = False

    async def see(self) -> bool:
        """Stamp this process seen and prune the long gone; never raises."""
        now = self.clock.now()
        try:
            await self.book.see_process(self.owner, self.host, self.pid, self.version, now)
            await self.book.prune_processes(PRUNE_AFTER_SECONDS, now)
        except Exception as exc:  # bookkeeping only: the bot serves on
            if not self._failing:
                log.warning("processes: could not mark this process alive (%s); retrying", exc)
            self._failing = True
            return False
        finally:
            self.refreshes += 1
        if self._failing:
            log.warning("processes: this process is marked alive again")
            self._failing = False
        return True

    async def run(self) -> None:
        while True:
            await self.clock.sleep(self.refresh_seconds)
            await self.see()

    async def leave(self) -> None:
        """At a clean shutdown. A failure leaves the row to show as gone, then to be pruned."""
        try:
            await self.book.forget_process(self.owner)
        except Exception as exc:
            log.warning("processes: could not remove this process's row on shutdown (%s)", exc)
