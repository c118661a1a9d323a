"""Whose turn it is to write: a lock file beside the SQLite database, queued by the kernel.

Processes on one database file (`burstbot run --workers N`, an operator command beside a running
bot) take turns at SQLite's write lock. SQLite makes a writer that finds the lock taken sleep and
try again (after 1, 2, 5, 10 ms …), so the lock often sits free while the waiter sleeps and the
holder takes it again at once: measured in a two-process Slack flood, about one ingest batch in
five waited, p50 4–7 ms, at most 108–235 ms. `flock(2)` on `<database>-writer` queues waiters in
the kernel, which wakes one the moment the holder lets go.

The turn only orders writers: SQLite's own lock still guards the data. A writer that does not
take it (the sqlite3 shell, a statement outside a transaction) stays safe and waits as before, and
so does a store whose lock file cannot be created or locked (a read-only directory, a file system
without `flock`): it logs one warning and writes without turns. A process that dies holding the
turn loses it with its file descriptor, so a kill -9 leaves nothing to clean up. An in-memory
database has no file and no turn.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os

from storage.sqlite_thread import to_completion

log = logging.getLogger("burstbot.storage")


class WriterTurn:
    def __init__(self, database_path: str | None) -> None:
        """`None`: no file to put the lock beside (in memory, or a `file:` URI)."""
        self._path = None if database_path is None else f"{database_path}-writer"
        self._fd: int | None = None
        self._held = False
        self.queued = 0  # waits that found the turn taken: a test knows a writer is queued

    def open(self) -> None:
        """Create the lock file readable by its owner only, like the database (no-op in memory)."""
        if self._path is not None and self._fd is None:
            try:
                self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError as exc:
                self._without_turns(exc)

    async def take(self) -> None:
        """Wait for the turn: at once when nobody holds it, else on a thread (the kernel wakes
        it), so the event loop never blocks."""
        if self._fd is None or self._held:
            return
        try:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                await self._wait(self._fd)
        except OSError as exc:
            self._without_turns(exc)
            return
        self._held = True

    async def _wait(self, fd: int) -> None:
        """A cancelled caller's wait still runs to its end; the turn it got is given back."""
        wait = asyncio.get_running_loop().run_in_executor(None, fcntl.flock, fd, fcntl.LOCK_EX)
        self.queued += 1
        try:
            await to_completion(wait)
        except asyncio.CancelledError:
            fcntl.flock(fd, fcntl.LOCK_UN)
            raise

    def give_back(self) -> None:
        if self._fd is not None and self._held:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._held = False

    def _without_turns(self, exc: OSError) -> None:
        log.warning("sqlite: no writer lock file %s (%s); writers wait in SQLite's busy handler",
                    self._path, exc.strerror or exc)  # fmt: skip
        self.close()
        self._path = None

    def close(self) -> None:
        self.give_back()
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
