"""This process's CPU as a bound on starts (docs/scaling.md), beside the API's limits.

A generation is mostly a waiting HTTP stream, but every streamed token costs this process some
CPU (the SDK's parsing, the draft's rendering, the store's writes), and so do the platforms'
events. One event loop runs on one core: once it is busy most of the time, one more stream slows
every stream already running and every acknowledgement. Rules:

- **measured**: the CPU seconds this process spent per wall second (`busy share`, 1.0 = one core
  busy), over windows of `WINDOW_SECONDS`, from the meter the budget is given (`time.process_time`
  against `time.monotonic` in a running bot: real CPU, whatever clock the engine runs on).
- **saturated holds**: while the last window's share is at `TARGET` or more, no generation
  starts; they wait for "this process's CPU" until a window says it recovered. Except one when
  none is running: then the generations are not what keeps the process busy, and holding them
  would relieve nothing.
- **learned per generation**: each window with generations running teaches what one of them
  costs (the share divided by the generations running: the rest of the process counted in, so
  the figure errs high), smoothed as admission smooths its token estimates; the headroom left
  below `TARGET`, less what the starts granted since the window began will cost, says how many
  more may start before the next window measures them (one at least while there is headroom).
- **unmeasured admits**: before the first window, or before any window had a generation
  running, only the API's limits and `max_concurrent_generations` bound.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

TARGET = 0.8  # of one core: past it the event loop is saturated and starts wait
WINDOW_SECONDS = 1.0  # the busy share is measured over windows this long
WEIGHT = 0.2  # each window's share of the running per-generation estimate
WAITING_FOR = "this process's CPU"


class CpuBudget:
    """Asked by the engine before each round of starts (`allowed`), told what it started
    (`granted`). `cpu` and `wall` are the meter: seconds of CPU and of wall time, both counting
    up (a test gives its own)."""

    def __init__(
        self,
        cpu: Callable[[], float] = time.process_time,
        wall: Callable[[], float] = time.monotonic,
        target: float = TARGET,
        window: float = WINDOW_SECONDS,
    ) -> None:
        self.cpu = cpu
        self.wall = wall
        self.target = target
        self.window = window
        self.share: float | None = None  # the last window's busy share (None: none measured)
        self.per_generation: float | None = None  # one generation's share of a core, learned
        self._mark = (wall(), cpu())
        self._granted = 0  # starts granted since the last window ended (not measured yet)

    def allowed(self, running: int) -> int | None:
        """How many more generations may start now, with `running` going (None: no bound)."""
        self._measure(running)
        if self.share is None:
            return None
        headroom = self.target - self.share
        if self.per_generation is not None:
            headroom -= self._granted * self.per_generation
        if headroom <= 0:
            # with none running the generations are not what keeps the CPU busy: holding them
            # would relieve nothing, and a process busy with other work would answer nobody
            return 0 if running > 0 else 1
        if self.per_generation is None or self.per_generation <= 0:
            return None
        return max(1, math.floor(headroom / self.per_generation))

    def granted(self, starts: int) -> None:
        self._granted += starts

    @property
    def retry_in(self) -> float:
        """Wall seconds until the next window measures again."""
        return max(0.0, self._mark[0] + self.window - self.wall())

    def _measure(self, running: int) -> None:
        wall, cpu = self.wall(), self.cpu()
        elapsed = wall - self._mark[0]
        if elapsed < self.window:
            return
        self.share = max(0.0, cpu - self._mark[1]) / elapsed
        if running > 0:
            each = self.share / running
            known = self.per_generation
            self.per_generation = each if known is None else (1 - WEIGHT) * known + WEIGHT * each
        self._mark, self._granted = (wall, cpu), 0
