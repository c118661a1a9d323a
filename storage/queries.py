"""SQL kept as data: `.sql` files of named statements, loaded once.

A file holds blocks that start with `-- name: NAME`; everything up to the next marker is that
statement. A store loads the shared file and its dialect's file together; a name defined twice, in
one file or across them, is an error. Migrations are the blocks named `migration_1`, `migration_2`,
... in order. A number may be missing while changes developed side by side are merged (each takes
its own number): it is recorded as applied and runs nothing, and a merge fills it.
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


NOTHING_TO_MIGRATE = "SELECT 1"


def migrations(queries: dict[str, str]) -> list[str]:
    numbered = {int(n[10:]): q for n, q in queries.items() if n.startswith("migration_")}
    if numbered and min(numbered) < 1:
        raise ValueError("migrations are numbered from 1")
    return [
        numbered.get(number, NOTHING_TO_MIGRATE)
        for number in range(1, max(numbered, default=0) + 1)
    ]
