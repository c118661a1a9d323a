"""The scheduler loop: sleep until the earliest due timer or outbox row, then serve what is due.

It sleeps on the engine's clock until the earliest `due_at` (an index lookup; the store hands it
over on the engine's clock, as far from now as it is on the database's), wakes early when an
in-process ingest arms a sooner timer, a worker frees a slot or an answer of the API lifts a
hold (bot/core/admission.py), never before the API's limits let a due burst start, and never
sleeps longer than `poll_seconds`, so timers armed and leases abandoned by other processes (and
limits they heard) are noticed.

Never a busy loop: the next wake-up ignores the timers of conversations this process is already
serving (input past a deadline leaves such a timer due at once; the worker's end wakes the loop),
timers leased elsewhere are postponed by the engine, and while a timer that was due when a round
began stays due after it (one the engine could not start: the store failing fast) rounds never
start closer together than `FLOOR_SECONDS`. A timer due later is slept to exactly, however close,
and one that fell due during the round starts the next round at once: timers due every few
milliseconds are served on time, not at the next floor.

A store that cannot be reached (locked past its busy timeout, a database restarting, a network
partition) is logged once when the outage starts and once when it ends, not with a traceback on
every round. Failing rounds back off: the poll interval, doubled after each failure in a row up to
`STORE_BACKOFF_CAP_SECONDS`, jittered (`backoff_jitter`); an in-process arrival still wakes the
loop at once, and the first round that succeeds ends the back-off.

Each time it goes to sleep it announces `asleep` (with `until`): a test on a fake clock waits for
that, and knows nothing more happens before the clock reaches `until` or something wakes it.
"""

from __future__ import annotations

import asyncio
import logging
import math

from bot.core.backoff import Backoff
from bot.core.clock import first_of
from bot.core.engine import Engine
from bot.core.errors import StoreError
from bot.core.outbox import Outbox
from bot.core.store import BurstStore
from bot.core.wakeup import Wakeup

log = logging.getLogger("burstbot.scheduler")
FLOOR_SECONDS = 0.05
STORE_BACKOFF_CAP_SECONDS = 15.0


class Scheduler:
    """Drives `engine` and sweeps `outbox`; `timers` is the store's index of armed timers, and
    `wakeup` the alarm it sleeps on (all four handed over by the composition root)."""

    def __init__(self, engine: Engine, timers: BurstStore, outbox: Outbox, wakeup: Wakeup) -> None:
        self.engine = engine
        self.timers = timers
        self.outbox = outbox
        self.wakeup = wakeup
        self._stopping = asyncio.Event()
        self._store_failing_since: float | None = None
        self._failed_rounds = 0

    def stop(self) -> None:
        self._stopping.set()
        self.wakeup.wake()

    async def tick(self) -> float:
        """Start workers for due timers, sweep the outbox; return when the next round is wanted."""
        engine, outbox = self.engine, self.outbox
        started = engine.clock.now()
        self.wakeup.event.clear()
        await engine.run_due()
        next_outbox = await outbox.next_due_at()  # a read: the sweep's claim is a write
        if next_outbox is not None and next_outbox <= engine.clock.now():
            await outbox.deliver_due()
            next_outbox = await outbox.next_due_at()
        now = engine.clock.now()
        wanted = now + engine.settings.poll_seconds
        next_due = await self.timers.next_due_at(now, skip=engine.serving)
        if next_due is not None and engine.busy < engine.settings.max_concurrent_generations:
            wanted = min(wanted, max(next_due, engine.ready_at))  # the API's limits allow then
        if next_outbox is not None:
            wanted = min(wanted, next_outbox)
        if wanted > started:  # due later, or fell due during this round: not a stuck timer
            return wanted
        return max(wanted, started + FLOOR_SECONDS)

    async def run(self) -> None:
        engine, wakeup = self.engine, self.wakeup
        while not self._stopping.is_set():
            try:
                wanted = await self.tick()
                self._store_recovered()
                self._failed_rounds = 0
            except StoreError as exc:
                self._store_failed(exc)
                wanted = engine.clock.now() + self._backoff()
            except Exception:
                log.exception("scheduler round failed; retrying with back-off")
                wanted = engine.clock.now() + self._backoff()
            wakeup.sleeping_until = wanted
            if wakeup.event.is_set():
                continue
            engine.signals.emit("asleep", until=wanted)
            try:
                await first_of(engine.clock.sleep_until(wanted), wakeup.event.wait())
            finally:
                wakeup.sleeping_until = math.inf

    def _backoff(self) -> float:
        """The wait after this failing round: the poll interval, doubled with each failure in a
        row up to the cap, jittered (processes that lost one database do not return together)."""
        self._failed_rounds += 1
        settings = self.engine.settings
        cap = max(settings.poll_seconds, STORE_BACKOFF_CAP_SECONDS)
        backoff = Backoff(settings.poll_seconds, cap, jitter=settings.backoff_jitter)
        return backoff.delay(self._failed_rounds)

    def _store_failed(self, exc: StoreError) -> None:
        if self._store_failing_since is None:
            self._store_failing_since = self.engine.clock.now()
            cap = max(self.engine.settings.poll_seconds, STORE_BACKOFF_CAP_SECONDS)
            log.warning("store unavailable (%s); retrying with back-off up to %.0f s", exc, cap)

    def _store_recovered(self) -> None:
        if self._store_failing_since is not None:
            lasted = self.engine.clock.now() - self._store_failing_since
            self._store_failing_since = None
            log.warning("store available again after %.1f s", lasted)
