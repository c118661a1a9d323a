"""Bursts held back for capacity (the API's limits, admission.py; this process's CPU,
cpu_budget.py): nothing waits unseen."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bot.core.admission import Verdict
from bot.core.store import DueTimer

log = logging.getLogger("burstbot.admission")

MAX_WAITS_KEPT = 10_000  # past this many held bursts, those held longer than ...
WAIT_FORGOTTEN_SECONDS = 3_600.0  # ... are forgotten (another process started them)


@dataclass
class Waits:
    """The bursts this process held back for capacity, since when and for what (the last thing
    it waited for): each is announced once when it starts waiting (`capacity_wait`) and once when
    it starts (`admitted`, with `waited` seconds and `waiting_for`), logged, and recorded with its
    generation for `explain`, so a wait is never unseen."""

    emit: Callable[..., None]
    since: dict[str, tuple[float, str]] = field(default_factory=dict)
    done: dict[str, tuple[float, str]] = field(default_factory=dict)  # admitted, not collected

    def started(self, conversation_id: str) -> tuple[float, str]:
        """How long the burst a worker collects waited, and for what (0, "": it did not)."""
        return self.done.pop(conversation_id, (0.0, ""))

    def note(self, chosen: Sequence[DueTimer], verdict: Verdict, now: float) -> None:
        for index, timer in enumerate(chosen):
            cid = timer.conversation_id
            if index < verdict.granted:
                held = self.since.pop(cid, None)
                if held is not None:
                    waited, why = now - held[0], held[1]
                    log.info("conversation %s: waited %.1f s for %s", cid, waited, why)
                    self.done[cid] = (waited, why)
                    self.emit("admitted", conversation=cid, waited=waited, waiting_for=why)
            elif cid in self.since:  # still waiting: for what it waits now
                self.since[cid] = (self.since[cid][0], verdict.waiting_for)
            else:
                self.since[cid] = (now, verdict.waiting_for)
                self.emit("capacity_wait", conversation=cid, waiting_for=verdict.waiting_for,
                          until=verdict.ready_at)  # fmt: skip
        if len(self.since) > MAX_WAITS_KEPT:  # served by other processes meanwhile
            for cid, (since, _) in list(self.since.items()):
                if now - since > WAIT_FORGOTTEN_SECONDS:
                    del self.since[cid]
