"""Whose turn it is to write: a lock file beside the SQLite database, queued by the kernel.

Processes on one database file (`burstbot run --workers N`, an operator command beside a running
bot) take turns at SQLite's write lock. SQLite makes a writer that finds the lock taken sleep and
try again (after 1, 2, 5, 10 ms …), so the lock often sits free while the waiter sleeps and the
holder takes it again at once: measured in a two-process Slack flood, about one ingest batch in
five waited, p50 4–7 ms, at most 108–235 ms. `flock(2)` on `<database>-writer` queues waiters in
the kernel, which wakes one the moment the holder lets go.

The turn only orders writers: SQLite's own lock still guards the data. A writer that does not
take it (the sqlite3 shell, a statement outside a transaction) stays safe and waits as before. A
process that dies holding the turn loses it with its file descriptor, so a kill -9 leaves nothing
to clean up. An in-memory database has no file and no turn.
"""

from __future__ import annotations

import asyncio
import fcntl
import os

from storage.sqlite_thread import to_completion


class WriterTurn:
    def __init__(self, database_path: str | None) -> None:
        """`None`: no file to put the lock beside (in memory, or a `file:` URI)."""
        self._path = None if database_path is None else f"{database_path}-writer"
        self._fd: int | None = None
        self.held = False

    def open(self) -> None:
        """Create the lock file readable by its owner only, like the database (no-op in memory)."""
        if self._path is not None and self._fd is None:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)

    async def take(self) -> None:
        """Wait for the turn: at once when nobody holds it, else on a thread (the kernel wakes
        it), so the event loop never blocks."""
        if self._fd is None or self.held:
            return
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            wait = asyncio.get_running_loop().run_in_executor(
                None, fcntl.flock, self._fd, fcntl.LOCK_EX
            )
            try:
                await to_completion(wait)
            except asyncio.CancelledError:  # the wait ran to its end: the turn is ours
                self.held = True
                self.give_back()
                raise
        self.held = True

    def give_back(self) -> None:
        if self._fd is not None and self.held:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self.held = False

    def close(self) -> None:
        self.give_back()
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
