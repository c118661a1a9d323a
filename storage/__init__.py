"""The SQL store (`storage.sql_store.SqlStore`, every protocol of `bot.core.store`) on SQLite or
PostgreSQL; `open_store(url)` picks one by scheme."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from bot.core.errors import ConfigError
from storage.pool_limits import PoolLimits

if TYPE_CHECKING:
    from storage.sql_store import SqlStore

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,29}")


def open_store(
    url: str,
    pool_size: int = 10,
    busy_timeout_seconds: float = 10.0,
    limits: PoolLimits | None = None,
) -> SqlStore[Any]:
    """Build (not yet open) the store named by `url`: sqlite:///path, sqlite://:memory:,
    postgresql:// (with `limits` on its waits)."""
    if url.startswith("sqlite://"):
        from storage.sqlite import SqliteStore

        path = url.removeprefix("sqlite://").removeprefix("/")  # sqlite:////abs or sqlite:///rel
        return SqliteStore(path or ":memory:", busy_timeout_ms=round(busy_timeout_seconds * 1000))
    if url.startswith(("postgresql://", "postgres://")):
        try:
            import asyncpg  # noqa: F401  (an extra)

            from storage.postgres import PostgresStore
        except ImportError:
            raise ConfigError(
                "storage.url: PostgreSQL needs asyncpg; pip install 'burstbot[postgres]'"
            ) from None
        return PostgresStore(url, pool_size=pool_size, limits=limits)
    scheme, separator, _ = url.partition("://")
    if separator and _SCHEME.fullmatch(scheme):
        raise ConfigError(
            f"storage.url: unsupported scheme {scheme!r} (use sqlite:/// or postgresql://)"
        )
    raise ConfigError(  # no part of it is shown: without a scheme, any part may be a password
        "storage.url: not a storage URL (use sqlite:///path or postgresql://user@host/db)"
    )
