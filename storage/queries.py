"""SQL kept as data: `.sql` files of named statements, loaded once.

A file holds blocks that start with `-- name: NAME`; everything up to the next marker is that
statement. A store loads the shared file and its dialect's file together; a name defined twice, in
one file or across them, is an error. Migrations are the blocks named `migration_1`, `migration_2`,
... in order.

Two placeholders name the protocol's clock (see sql_store.sql) and each dialect says what they are
(`on_clock`): `:db_now`, the database's now, and `:skew`, the caller's clock minus the database's.
"""

from __future__ import annotations

import re
from importlib import resources

_MARKER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def load_queries(*filenames: str) -> dict[str, str]:
    queries: dict[str, str] = {}
    for filename in filenames:
        text = resources.files("storage").joinpath(filename).read_text(encoding="utf-8")
        parts = _MARKER.split(text)
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in queries:
                raise ValueError(f"{filename}: query {name} defined twice")
            queries[name] = body.strip()
    return queries


def migrations(queries: dict[str, str]) -> list[str]:
    numbered = {int(n[10:]): q for n, q in queries.items() if n.startswith("migration_")}
    if sorted(numbered) != list(range(1, len(numbered) + 1)):
        raise ValueError("migrations must be numbered 1, 2, 3, ... without gaps")
    return [numbered[number] for number in sorted(numbered)]


_DB_NOW = re.compile(r"(?<!:):db_now\b")
_SKEW = re.compile(r"(?<!:):skew\b")


def on_clock(sql: str, db_now: str, skew: str) -> str:
    """`sql` with the dialect's expressions for `:db_now` and `:skew` (each in parentheses)."""
    return _SKEW.sub(f"({skew})", _DB_NOW.sub(f"({db_now})", sql))
