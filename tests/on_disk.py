"""What an SQLite database leaves on disk while it is open: the bytes of the database file, its
write-ahead log and its shared memory, read as anyone who can read the files would read them."""

from __future__ import annotations

from pathlib import Path

SUFFIXES = ("", "-wal", "-shm")


def database_files(path: Path) -> dict[str, bytes]:
    """Each of the database's files that exists, by name, with its raw bytes."""
    files = (Path(f"{path}{suffix}") for suffix in SUFFIXES)
    return {file.name: file.read_bytes() for file in files if file.exists()}


def holding(path: Path, marker: str) -> list[str]:
    """The names of the database's files in which `marker` can be read."""
    return [name for name, raw in database_files(path).items() if marker.encode() in raw]
