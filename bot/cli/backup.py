"""`burstbot backup PATH`: a consistent copy of the database, taken while the bot runs.

SQLite in WAL mode is not safely copied with `cp` (committed transactions may still sit in the
`-wal` file, a copy taken during a checkpoint can be torn): SQLite's online backup API copies every
page of one read snapshot while the bot keeps writing. The copy is written beside the target and
renamed into place once complete and checked, 0600, in rollback-journal mode so that it is one
self-contained file. PostgreSQL has its own tool: the command prints the `pg_dump` line to run.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sqlite3
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import aiosqlite

from bot.core.attachments import human_size
from bot.core.errors import BurstbotError, StoreError


async def backup_sqlite(source: Path, target: Path, busy_timeout_ms: int = 10_000) -> str:
    """Copy `source` to `target` (which must not exist) through SQLite's backup API; returns
    the line that says what was copied."""
    partial = _start(target)
    try:
        version, conversations, messages, check = await _copy(source, partial, busy_timeout_ms)
        size = _finish(partial, target)
    except OSError as exc:
        raise BurstbotError(f"backup: cannot write {target} ({exc.strerror})") from None
    finally:
        _clean_up(partial)
    return (
        f"backup: {source} -> {target} ({human_size(size)}, schema version {version}, "
        f"{conversations} conversations, {messages} messages; integrity {check}; mode 0600)"
    )


def _start(target: Path) -> Path:
    """The private (0600) file the copy is written to, beside the target."""
    if target.exists():
        raise BurstbotError(f"backup: {target} exists; a backup never overwrites, pick a new name")
    if not target.parent.is_dir():
        raise BurstbotError(f"backup: no directory {target.parent}")
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)  # what an interrupted earlier backup left behind
    try:
        os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        raise BurstbotError(f"backup: cannot write {target} ({exc.strerror})") from None
    return partial


def _finish(partial: Path, target: Path) -> int:
    """The copy (and then its name in the directory) reach the disk before the command says so."""
    _sync(partial)
    os.replace(partial, target)
    _sync(target.parent)
    return target.stat().st_size


def _clean_up(partial: Path) -> None:
    for leftover in (partial, Path(f"{partial}-journal")):
        with contextlib.suppress(OSError):
            leftover.unlink()


async def _copy(source: Path, target: Path, busy_timeout_ms: int) -> tuple[int, int, int, str]:
    try:
        src = await aiosqlite.connect(source)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open SQLite database {str(source)!r}: {exc}") from exc
    try:
        await src.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        dst = await aiosqlite.connect(target)
        try:
            await src.backup(dst)  # all pages in one step: one read snapshot, writers go on
            await dst.execute("PRAGMA journal_mode = DELETE")  # one file, no -wal beside it
            return (
                await _number(dst, "PRAGMA user_version"),
                await _number(dst, "SELECT COUNT(*) FROM conversations"),
                await _number(dst, "SELECT COUNT(*) FROM messages"),
                str((await (await dst.execute("PRAGMA quick_check")).fetchone() or ["?"])[0]),
            )
        finally:
            await dst.close()
    except sqlite3.Error as exc:
        raise StoreError(f"backup of {str(source)!r} failed: {exc}") from exc
    finally:
        await src.close()


async def _number(db: aiosqlite.Connection, sql: str) -> int:
    row = await (await db.execute(sql)).fetchone()
    return int(row[0]) if row else 0


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pg_dump_lines(url: str, target: str) -> list[str]:
    """What to run to back up (and restore) a PostgreSQL store: the URL without its password,
    and burstbot's `search_path` (not a libpq parameter) as pg_dump's `--schema`."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]  # and port, as written
    netloc = f"{parts.username}@{host}" if parts.username else host
    query = parse_qsl(parts.query)
    schemas = [value for key, value in query if key == "search_path"]
    libpq = urlencode([(key, value) for key, value in query if key != "search_path"])
    dsn = urlunsplit(parts._replace(scheme="postgresql", netloc=netloc, query=libpq))
    schema = "".join(f" --schema={shlex.quote(s)}" for s in schemas)
    return [
        "PostgreSQL is backed up with its own tools (the password comes from PGPASSWORD or "
        "~/.pgpass, as for burstbot):",
        f"  pg_dump --format=custom{schema} --file={shlex.quote(target)} {shlex.quote(dsn)}",
        "restore into a new, empty database (see docs/operations.md):",
        f"  pg_restore --no-owner --dbname={shlex.quote(dsn)} {shlex.quote(target)}",
    ]
