"""The schema each store ends up with after every migration, compared with the one recorded in
tests/fixtures/schema/: the SQL that builds it may be reorganised (one shared script with the
dialects' type names substituted), the tables, columns, types, defaults and indexes may not change
unnoticed. A new migration changes these on purpose: record them again with
`python -m tests.test_schema` and review the difference."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import asyncpg

from storage.postgres import PostgresStore
from storage.sqlite import SqliteStore
from tests import pg

RECORDED = Path(__file__).parent / "fixtures" / "schema"
NEW_MIGRATION = "a new migration changes this on purpose: `python -m tests.test_schema` records it"


async def sqlite_schema(path: Path) -> str:
    store = SqliteStore(str(path))
    await store.open()
    await store.close()
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
            "ORDER BY type, name"
        ).fetchall()
        version = db.execute("PRAGMA user_version").fetchone()[0]
    return "\n".join([f"user_version {version}", *(f"{t} {n}: {sql}" for t, n, sql in rows)]) + "\n"


POSTGRES_CATALOG = {
    "columns": """SELECT table_name, ordinal_position, column_name, data_type, udt_name,
                         is_nullable, column_default, is_identity, identity_generation
                  FROM information_schema.columns WHERE table_schema = $1
                  ORDER BY table_name, ordinal_position""",
    "indexes": "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY 1",
    "constraints": """SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid)
                      FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
                      WHERE n.nspname = $1 ORDER BY 1, 2""",
}


async def postgres_schema() -> str:
    schema = await pg.create_schema()
    try:
        store = PostgresStore(pg.dsn(), schema=schema, clock="caller")
        await store.open()
        await store.close()
        conn = await asyncpg.connect(pg.dsn(), server_settings={"search_path": schema})
        try:
            lines = []
            for part, query in POSTGRES_CATALOG.items():
                rows = await conn.fetch(query, schema)
                lines += [f"{part} " + " | ".join(str(v) for v in row.values()) for row in rows]
        finally:
            await conn.close()
    finally:
        await pg.drop_schema(schema)
    return "\n".join(lines).replace(schema, "SCHEMA") + "\n"


async def test_a_fresh_sqlite_database_gets_the_recorded_schema(tmp_path: Path) -> None:
    recorded = (RECORDED / "sqlite.txt").read_text(encoding="utf-8")
    assert await sqlite_schema(tmp_path / "fresh.db") == recorded, NEW_MIGRATION


async def test_a_fresh_postgres_schema_gets_the_recorded_schema() -> None:
    recorded = (RECORDED / "postgres.txt").read_text(encoding="utf-8")
    assert await postgres_schema() == recorded, NEW_MIGRATION


async def _record(folder: Path) -> None:
    (RECORDED / "sqlite.txt").write_text(await sqlite_schema(folder / "fresh.db"), "utf-8")
    (RECORDED / "postgres.txt").write_text(await postgres_schema(), "utf-8")


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(_record(Path(folder)))
