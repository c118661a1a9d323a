"""Step 4's watch: while the model streams, keep the lease and look for newer input.

Rules:

- Renew the lease every ttl/3 (a conditional update on its fencing token), the first time when
  two thirds of the TTL are left of the expiry the database stamped at acquire; the schedule
  counts down on the monotonic clock. A failed renewal cancels the stream: another worker may own
  the conversation now.
- Whatever ends the watch (done, superseded, lease lost, cancelled, a store error), the stream
  is not left running: it is cancelled in `finally`.
- Watch the version: this process's ingest says so at once, and a poll every `poll_seconds` sees
  input that other processes stored. Newer input before the burst's deadline cancels the stream at
  once, so nobody pays for tokens nobody will read; past the deadline the generation runs on (G4).
- A decided stop (a click, bot/core/clicks.py) moves the version too, and cancels the stream
  whether or not the deadline has passed: the watch ends `STOPPED`.
- This process's own news (`newer_input`: the committed version, or a decided stop) cancels the
  stream in the call that reports it, before any store read: on one SQLite connection a read
  waits its turn behind every queued transaction, and the person who clicked Stop, or whose
  newer message made the answer stale, would wait for that queue (docs/benchmarks.md, Stop).
  The store is read afterwards, only to tell a supersede from a stop decided in another process.
- Each look announces `looked` (with `superseded`), so a test can wait for the decision instead of
  sleeping and hoping it was made.

The engine decides what each outcome means (`engine.py`, step 4).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from bot.core.clock import Clock, cancel_all, first_of, trusted_until
from bot.core.settings import EngineSettings
from bot.core.signals import Signals
from bot.core.store import BurstStore, Lease


class Supervision(enum.Enum):
    """How watching a generation ended."""

    DONE = "done"
    SUPERSEDED = "superseded"  # newer input before the deadline: the stream was cancelled
    LEASE_LOST = "lease_lost"  # a renewal failed: the stream was cancelled
    STOPPED = "stopped"  # a person stopped the burst: the stream was cancelled


@dataclass(eq=False)
class _Watched:
    """A generation this process watches, and what its own news decided for it."""

    generation: asyncio.Future[str]
    version: int  # the lease's: news of a later version is newer input
    deadline: float
    news: asyncio.Event = field(default_factory=asyncio.Event)
    cut: Supervision | None = None  # cancelled by news: SUPERSEDED (to be confirmed) or STOPPED


@dataclass(eq=False)
class Supervisor:
    store: BurstStore
    clock: Clock
    settings: EngineSettings
    signals: Signals
    _watched: dict[str, _Watched] = field(default_factory=dict, init=False)

    def newer_input(
        self, conversation_id: str, version: int | None = None, stopped: bool = False
    ) -> None:
        """This process committed newer input (`version`, the conversation's after it) or a stop
        (`stopped`): a watched stream it ends is cancelled now; other news makes the watch look
        in the store at once."""
        watched = self._watched.get(conversation_id)
        if watched is None:
            return
        if watched.cut is None and not watched.generation.done():
            newer = version is not None and version > watched.version
            if stopped:
                watched.cut = Supervision.STOPPED
            elif newer and self.clock.now() < watched.deadline:
                watched.cut = Supervision.SUPERSEDED
            if watched.cut is not None:
                watched.generation.cancel()
        watched.news.set()

    async def _newer(self, cid: str, version: int, in_time: bool) -> Supervision | None:
        """What newer input means for a generation of `version`: nothing, a supersede (before
        the deadline) or a stop (at any time)."""
        if await self.store.current_version(cid) <= version:
            return None
        if await self.store.pending_stop(cid) is not None:
            return Supervision.STOPPED
        return Supervision.SUPERSEDED if in_time else None

    async def watch(
        self,
        generation: asyncio.Task[str],
        lease: Lease,
        deadline: float,
        on_renewed: Callable[[float], None] = lambda expires_at: None,
    ) -> Supervision:
        """Wait for the generation while renewing the lease (`on_renewed` hears each new expiry,
        on the engine's clock) and watching for newer input before `deadline`."""
        cid, ttl, clock = lease.conversation_id, self.settings.lease_ttl_seconds, self.clock
        watched = self._watched[cid] = _Watched(generation, lease.version, deadline)
        bumped = watched.news
        next_renew = trusted_until(clock, lease.expires_at, ttl) - ttl / 3
        next_poll = clock.monotonic() + self.settings.poll_seconds
        try:
            while not generation.done() and watched.cut is None:
                wait = min(next_renew, next_poll) - clock.monotonic()
                await first_of(generation, clock.sleep(wait), bumped.wait())
                if generation.done() or watched.cut is not None:
                    break
                ticked = clock.monotonic()
                if bumped.is_set() or ticked >= next_poll:
                    bumped.clear()
                    next_poll = ticked + self.settings.poll_seconds
                    ended = await self._newer(cid, lease.version, clock.now() < deadline)
                    self.signals.emit("looked", conversation=cid, superseded=ended is not None)
                    if ended is not None:
                        await self._end(watched)
                        return ended
                if ticked >= next_renew:
                    expires_at = await self.store.renew_lease(
                        cid, lease.token, lease.version, clock.now(), ttl
                    )
                    if expires_at is None:
                        await self._end(watched)
                        return Supervision.LEASE_LOST
                    next_renew = ticked + ttl / 3
                    on_renewed(expires_at)
            if watched.cut is not None:
                return await self._after_cut(cid, watched, watched.cut)
            return Supervision.DONE
        finally:
            # Whatever ends the watch (cancellation, a store error), no stream runs on unwatched.
            if not generation.done():
                await cancel_all([generation])
            if self._watched.get(cid) is watched:
                del self._watched[cid]

    @staticmethod
    async def _end(watched: _Watched) -> None:
        """Cancel the stream, unless news did already, and wait until it has ended: cancelled
        once, for a second cancel would cut short what it finishes first (a tool call's effect
        being recorded, bot/core/tool_calls.py rule 6)."""
        if watched.cut is None:
            watched.generation.cancel()
        await asyncio.wait([watched.generation])

    async def _after_cut(self, cid: str, watched: _Watched, cut: Supervision) -> Supervision:
        """News cancelled the stream: once it has ended, a supersede is a stop after all if one
        is pending (decided in another process, not heard of here yet)."""
        await self._end(watched)
        if cut is Supervision.SUPERSEDED and await self.store.pending_stop(cid) is not None:
            cut = Supervision.STOPPED
        self.signals.emit("looked", conversation=cid, superseded=True)
        return cut
