"""A gateway event discord.py cannot read costs one log line, not the connection.

discord.py hands each dispatch to a parser (`ConnectionState.parsers`) inside the gateway's read
loop, without a guard: a payload with a missing or unexpected field (a `GUILD_MEMBER_ADD` whose
member has no `flags`, as in the example of Discord's own API docs) raises there, ends the
connection and, through it, the process. Each parser is wrapped so that such an event is logged
once, with its type and the error (never its content), and dropped; the connection stays up and
every other event is read as before. `READY` is left alone: a session whose start cannot be read
is no session, and the connection's failure is the clear report.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("burstbot.discord")

UNGUARDED = frozenset({"READY"})


def guard_parsers(parsers: dict[str, Callable[[Any], None]]) -> None:
    """Wrap each parser (in place) so that one that raises drops its event with a log line."""
    for event, parse in list(parsers.items()):
        if event not in UNGUARDED:
            parsers[event] = _guarded(event, parse)


def _guarded(event: str, parse: Callable[[Any], None]) -> Callable[[Any], None]:
    @functools.wraps(parse)
    def read(data: Any) -> None:
        try:
            parse(data)
        except Exception as exc:
            log.warning("discord: a %s event could not be read (%s: %s); dropped", event,
                        type(exc).__name__, exc)  # fmt: skip

    return read
