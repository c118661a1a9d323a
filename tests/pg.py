"""PostgreSQL for tests: the DSN comes from `BURSTBOT_TEST_POSTGRES_DSN`; each test gets a fresh
schema (via `search_path`) that is dropped afterwards. Without a reachable server the tests that
need one are skipped with the reason, except under `CI=true`, where they fail: CI that skips
PostgreSQL would be green for the wrong reason."""

from __future__ import annotations

import asyncio
import functools
import os
import secrets
from concurrent.futures import ThreadPoolExecutor

import pytest

DSN_ENV = "BURSTBOT_TEST_POSTGRES_DSN"


@functools.cache
def unavailable() -> str | None:
    """Why PostgreSQL tests cannot run here, or None when they can."""
    dsn = os.environ.get(DSN_ENV, "")
    if not dsn:
        return f"{DSN_ENV} is not set"
    try:
        import asyncpg
    except ImportError:
        return "asyncpg is not installed"

    async def probe() -> None:
        conn = await asyncpg.connect(dsn, timeout=3)
        await conn.close()

    try:  # in a thread of its own: callers may already be inside an event loop
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, probe()).result()
    except Exception as exc:
        return f"PostgreSQL at {DSN_ENV} is unreachable: {exc}"
    return None


def required() -> bool:
    """CI must run the PostgreSQL tests; elsewhere they may skip."""
    return os.environ.get("CI", "").lower() == "true"


def dsn() -> str:
    reason = unavailable()
    if reason is not None:
        if required():
            pytest.fail(f"CI=true and PostgreSQL is needed: {reason}", pytrace=False)
        pytest.skip(reason)
    return os.environ[DSN_ENV]


async def create_schema(prefix: str = "burstbot_test") -> str:
    import asyncpg

    name = f"{prefix}_{secrets.token_hex(4)}"
    conn = await asyncpg.connect(dsn())
    try:
        await conn.execute(f'CREATE SCHEMA "{name}"')
    finally:
        await conn.close()
    return name


async def drop_schema(name: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn())
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await conn.close()
