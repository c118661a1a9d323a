"""Backends for the store contract suite: every `SqlStore` backend runs the same tests.

A backend opens any number of stores on one shared database (separate connections), so races
between owners are real races between connections. Add a backend by adding a param here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from storage.sql_store import SqlStore
from storage.sqlite import SqliteStore
from tests import pg

StoreFactory = Callable[[], Awaitable[SqlStore]]


class Backend:
    def __init__(self, name: str, factory: StoreFactory, shared: bool) -> None:
        self.name = name
        self._factory = factory
        self.shared = shared  # False: every "new" store is the same single connection
        self._opened: list[SqlStore] = []

    async def new_store(self) -> SqlStore:
        store = await self._factory()
        self._opened.append(store)
        return store

    async def close(self) -> None:
        for store in reversed(self._opened):
            await store.close()


def _sqlite_memory() -> Backend:
    single: list[SqlStore] = []

    async def factory() -> SqlStore:
        if not single:
            store = SqliteStore(":memory:")
            await store.open()
            single.append(store)
        return single[0]

    return Backend("sqlite_memory", factory, shared=False)


def _sqlite_file(path: Path) -> Backend:
    async def factory() -> SqlStore:
        store = SqliteStore(str(path))
        await store.open()
        return store

    return Backend("sqlite_file", factory, shared=True)


def _postgres(schema: str) -> Backend:
    """Each store is its own pool on a fresh schema; the caller's clock, like SQLite."""
    from storage.postgres import PostgresStore

    async def factory() -> SqlStore:
        store = PostgresStore(pg.dsn(), pool_size=4, clock="caller", schema=schema)
        await store.open()
        return store

    return Backend("postgres", factory, shared=True)


@pytest.fixture(params=["sqlite_memory", "sqlite_file", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    schema = None
    if request.param == "sqlite_memory":
        b = _sqlite_memory()
    elif request.param == "sqlite_file":
        b = _sqlite_file(tmp_path / "contract.db")
    else:
        schema = await pg.create_schema()  # skips with the reason when unreachable
        b = _postgres(schema)
    yield b
    await b.close()
    if schema is not None:
        await pg.drop_schema(schema)


@pytest.fixture
async def store(backend: Backend) -> SqlStore:
    return await backend.new_store()
