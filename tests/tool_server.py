"""A real MCP server for the tool tests, on the official `mcp` SDK: a ticket tracker.

- `search_tickets` is read-only (`readOnlyHint`); `create_ticket` is not, and declares an
  `idempotency_key` argument, as a server that dedupes would.
- Every `create_ticket` call is counted per idempotency key in the `--ledger` file, one line a
  call written when the call starts (`start <key> <title>`) and one when it returns (`done <key>
  <ticket>`), flushed at once, so a test reads the server's own count even after a kill. The
  server does not dedupe: a second call with the same key makes a second ticket, so a repeat
  shows in the count.
- With `--environ FILE`, it writes the environment it was given to FILE (JSON) as it starts.
- While the `--hold` file exists, `create_ticket` waits before answering (a slow call); with
  `--slow S` each call first takes a random time up to S seconds.

Run: `python -m tests.tool_server --ledger FILE [--hold FILE] [--http PORT]` (stdio by default).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

TICKETS = ("OPS-101: printer on fire", "OPS-102: wifi down on floor 3")


def build(ledger: Path, hold: Path | None, slow: float = 0.0) -> MCPServer:
    server = MCPServer("tracker")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def search_tickets(query: str) -> str:
        """Search open tickets by words in their titles."""
        words = query.lower().split()
        found = [t for t in TICKETS if any(w in t.lower() for w in words)]
        return "\n".join(found) or "no open tickets match"

    @server.tool(annotations=ToolAnnotations(read_only_hint=False))
    async def create_ticket(title: str, priority: str = "normal", idempotency_key: str = "") -> str:
        """Open a new ticket; returns its id."""
        with ledger.open("a") as out:
            out.write(f"start {idempotency_key or '-'} {title}\n")
            out.flush()
            os.fsync(out.fileno())
        if slow:
            await asyncio.sleep(random.uniform(0, slow))
        # the hold and the ledger are files: the test process shares nothing else with this one
        while hold is not None and hold.exists():  # noqa: ASYNC110, ASYNC240
            await asyncio.sleep(0.01)
        done = ledger.read_text().splitlines()  # noqa: ASYNC240
        number = sum(1 for line in done if line.startswith("done "))
        ticket = f"OPS-{201 + number}"
        with ledger.open("a") as out:
            out.write(f"done {idempotency_key or '-'} {ticket}\n")
            out.flush()
            os.fsync(out.fileno())
        return f"created {ticket} ({priority} priority): {title}"

    return server


def calls_per_key(ledger: Path) -> dict[str, int]:
    """The server's own count of `create_ticket` calls, per idempotency key."""
    counts: dict[str, int] = {}
    if ledger.exists():
        for line in ledger.read_text().splitlines():
            kind, key = line.split(" ", 2)[:2]
            if kind == "start":
                counts[key] = counts.get(key, 0) + 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledger", required=True, type=Path)
    parser.add_argument("--hold", type=Path)
    parser.add_argument("--http", type=int, help="serve Streamable HTTP on 127.0.0.1:PORT")
    parser.add_argument("--slow", type=float, default=0.0, help="each call takes up to this long")
    parser.add_argument("--environ", type=Path, help="write the environment given to this file")
    args = parser.parse_args()
    if args.environ is not None:
        args.environ.write_text(json.dumps(dict(os.environ)))
    server = build(args.ledger, args.hold, args.slow)
    if args.http is None:
        server.run()
    else:
        asyncio.run(server.run_streamable_http_async(host="127.0.0.1", port=args.http))


if __name__ == "__main__":
    main()
