"""Statements on aiosqlite's thread that run to their end even when their caller is cancelled.

aiosqlite queues every call for one worker thread per connection and hands back a future.
Cancelling the awaiting coroutine cancels only that future: the statement still runs later, on
the shared connection. A caller that then decides what to do next (ROLLBACK or not, release the
lock) from the connection's state would decide before the statement ran. So every statement is
awaited to its end here, and only then is the cancellation passed on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def to_completion(statement: Awaitable[T]) -> T:
    """Await a statement to its end even through cancellation, then re-raise the cancellation,
    also when the statement failed meanwhile: a lost cancellation would leave its task running
    on (a retried loop that never stops at shutdown)."""
    task = asyncio.ensure_future(statement)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if not task.cancelled():
            task.exception()  # the statement's own failure is superseded by the cancellation
        raise asyncio.CancelledError
    return task.result()
