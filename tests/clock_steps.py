"""Stepping a fake clock past work that does real I/O before it sleeps.

`FakeClock.advance` wakes only the sleepers already waiting. A task that must first finish a
store write or an HTTP call to a fake server before it sleeps again may not be asleep yet when the
test advances, and would then sleep through the step (and a test awaiting it would wait forever).
`step` gives such a task a bounded (real-time) chance to fall asleep within the step first.
"""

from __future__ import annotations

import asyncio

from testkit.clock import FakeClock


async def step(clock: FakeClock, seconds: float, within: float = 2.0) -> None:
    """Advance by `seconds` once something sleeps until within them and no new sleeper has
    appeared for a few polls (the I/O before it has settled), or once `within` has passed (then
    nothing was going to sleep, and the step is taken anyway)."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + within
    seen: tuple[float, ...] = ()
    quiet_polls = 0
    while loop.time() < give_up and quiet_polls < 5:
        sleepers = clock.waiting()
        due = any(wake <= clock.now() + seconds for wake in sleepers)
        quiet_polls = quiet_polls + 1 if due and sleepers == seen else 0
        seen = sleepers
        await asyncio.sleep(0.004)
    await clock.advance(seconds)
