"""Store implementations of `bot.core.store.Store`; `open_store(url)` picks one by scheme."""

from __future__ import annotations

from bot.core.errors import ConfigError
from bot.core.store import Store


def open_store(url: str, pool_size: int = 10) -> Store:
    """Build (not yet open) the store named by `url`: sqlite:///path, sqlite://:memory:, postgresql://."""
    if url.startswith("sqlite://"):
        from storage.sqlite import SqliteStore

        path = url.removeprefix("sqlite://").removeprefix("/")  # sqlite:////abs or sqlite:///rel
        return SqliteStore(path or ":memory:")
    if url.startswith(("postgresql://", "postgres://")):
        try:
            import asyncpg  # noqa: F401  (an extra)

            from storage.postgres import PostgresStore
        except ImportError:
            raise ConfigError(
                "storage.url: PostgreSQL needs asyncpg; pip install 'burstbot[postgres]'"
            ) from None
        return PostgresStore(url, pool_size=pool_size)
    scheme = url.split("://", 1)[0] if "://" in url else url[:20]  # never echo a password
    raise ConfigError(
        f"storage.url: unsupported scheme {scheme!r} (use sqlite:/// or postgresql://)"
    )
