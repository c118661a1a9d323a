"""PostgreSQL for the benchmarks: each workload fills a schema of its own, dropped afterwards.

The server comes from `--postgres-dsn` or `BURSTBOT_TEST_POSTGRES_DSN`; without one the
PostgreSQL rows are left out of the report (the quick profile only runs them when asked)."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

DSN_ENV = "BURSTBOT_TEST_POSTGRES_DSN"


def chosen_dsn(option: str | None, quick: bool) -> str | None:
    """The option wins; the environment's DSN counts for the full profile only (CI stays fast)."""
    if option:
        return option
    return None if quick else os.environ.get(DSN_ENV) or None


@asynccontextmanager
async def scratch_schema(dsn: str, prefix: str) -> AsyncIterator[str]:
    """A fresh, empty schema for one workload; dropped with everything in it at the end."""
    import asyncpg

    name = f"{prefix}_{secrets.token_hex(4)}"
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'CREATE SCHEMA "{name}"')
    finally:
        await conn.close()
    try:
        yield name
    finally:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f'DROP SCHEMA "{name}" CASCADE')
        finally:
            await conn.close()
