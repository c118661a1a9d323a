"""Admission: a generation starts when the Messages API's own limits allow it (docs/scaling.md).

A generation is a waiting HTTP stream, not work: what bounds how many run at once is the
organisation's rate limit, which the API announces on every response. Rules:

- **learned from the API**: each response, every attempt and errors too, carries the remaining
  requests, input tokens and output tokens of the minute and when each is full again; between
  two responses they replenish continuously, as the API's do. A 429 holds every start for its
  `retry-after`; a 529 (overloaded) for a wait that doubles with each one in a row.
- **probed**: before the first answer at most `FIRST_STARTS` start (the fixed policy's 8 slots),
  and after 529s one start goes alone; the next wait for an answer (at most `PROBE_SECONDS`): a
  hundred bursts due at once never meet an unknown limit or an overloaded API together.
- **shared**: the state lives in the store, one row per API key (`scope`), so every process on
  one database learns what any of them heard. Starting takes its request and estimated tokens
  from that row in one compare-and-swap, for all the starts of a round at once.
- **estimated**: a start takes one request, and the input and output tokens of an average
  generation of this process (learned from each one's usage); the API's next answer corrects
  the remaining counts (the lower of the two is kept).
- **unused starts give back**: a start whose worker never heard the API answer (the lease was
  taken elsewhere, there was nothing to answer, a guard refused it, newer input came before the
  call) returns its request and estimated tokens to the row, so estimates taken for nothing do
  not hold others back. A start knows it was used when an answer of the API reaches `heard` from
  within its worker (a context variable the generation's task inherits).
- **unknown limits admit**: before any header is heard (or with a replier that sends none),
  only `max_concurrent_generations` bounds.

Which due bursts go first when not all may start is `fair_order` (bot/core/shares.py); how a
burst held back is told and recorded, `Waits` (bot/core/waits.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Protocol

from bot.core.clock import Clock
from bot.core.errors import StoreError

log = logging.getLogger("burstbot.admission")

LIMITS = ("requests", "input-tokens", "output-tokens")
FIRST_INPUT_ESTIMATE = 1_000.0  # input tokens of a generation before any was measured
FIRST_OUTPUT_ESTIMATE = 300.0
ESTIMATE_WEIGHT = 0.2  # each measured generation's share of the running estimate
RATE_LIMITED_SECONDS = 1.0  # a 429 that names no retry-after holds this long
OVERLOAD_FIRST_SECONDS = 1.0  # a 529's hold, doubled with each one in a row ...
OVERLOAD_CAP_SECONDS = 60.0  # ... up to this
PROBE_SECONDS = 10.0  # a probing start holds the next this long at most (its answer ends it)
FIRST_STARTS = 8  # starts before any answer was heard (what the fixed policy ran at once)
FIRST_ANSWER = "the API's first answer"
OVERLOADED = "529 overloaded"
ANSWER_AFTER_OVERLOAD = "an answer after 529 overloaded"
SAVE_ATTEMPTS = 5  # compare-and-swap rounds before a save gives up (other processes won each)


@dataclass(frozen=True, slots=True)
class Budget:
    """One per-minute limit as last heard: `remaining` of `limit`, replenished at `per_second`."""

    limit: float
    remaining: float
    per_second: float

    def aged(self, seconds: float) -> Budget:
        grown = self.remaining + max(0.0, seconds) * self.per_second
        return replace(self, remaining=min(self.limit, grown))

    def wait_for(self, amount: float) -> float:
        """Seconds until `amount` fits (more than the whole limit waits for a full one)."""
        missing = min(amount, self.limit) - self.remaining
        return max(0.0, missing) / self.per_second if missing > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Limits:
    """What the processes sharing one API key know of its limits, as of one moment: the budgets
    heard (by `LIMITS` name), and a hold (`held` seconds from then) after a 429 or 529."""

    budgets: Mapping[str, Budget]
    held: float = 0.0
    reason: str = ""  # why starts are held (or were, last)
    overloads: int = 0  # 529s in a row
    answered: bool = False  # an answer was heard (else starts probe, `FIRST_STARTS` at most)
    unheard: int = 0  # starts made before any answer was heard

    def aged(self, seconds: float) -> Limits:
        budgets = {name: b.aged(seconds) for name, b in self.budgets.items()}
        return replace(self, budgets=budgets, held=max(0.0, self.held - max(0.0, seconds)))

    def wait(self, needs: Mapping[str, float]) -> tuple[float, str]:
        """Seconds until one more start fits (0: now), and what it waits for."""
        if self.held > 0:
            return self.held, self.reason
        waits = [(b.wait_for(needs[name]), name) for name, b in self.budgets.items()]
        longest, name = max(waits, default=(0.0, ""))
        per_minute = f"{name.replace('-', ' ')} per minute"
        return (longest, per_minute) if longest > 0 else (0.0, "")

    def take(self, needs: Mapping[str, float]) -> Limits:
        budgets = {
            name: replace(b, remaining=b.remaining - needs[name])
            for name, b in self.budgets.items()
        }
        if self.overloads:  # one start alone, until its answer
            return replace(self, budgets=budgets, held=PROBE_SECONDS, reason=ANSWER_AFTER_OVERLOAD)
        if not self.answered:  # a few, until the first answer tells the limits
            unheard, held, reason = self.unheard + 1, self.held, self.reason
            if unheard >= FIRST_STARTS:
                held, reason = PROBE_SECONDS, FIRST_ANSWER
            return replace(self, budgets=budgets, unheard=unheard, held=held, reason=reason)
        return replace(self, budgets=budgets)

    def give_back(self, needs: Mapping[str, float]) -> Limits:
        """A start taken that never reached the API: its share returns, and a probe it was
        (before the first answer, or after 529s) no longer holds the others."""
        budgets = {
            name: replace(b, remaining=min(b.limit, b.remaining + needs.get(name, 0.0)))
            for name, b in self.budgets.items()
        }
        held, reason, unheard = self.held, self.reason, self.unheard
        if not self.answered and unheard > 0:
            unheard -= 1
        if reason in (FIRST_ANSWER, ANSWER_AFTER_OVERLOAD) and held > 0:
            held, reason = 0.0, ""
        return replace(self, budgets=budgets, held=held, reason=reason, unheard=unheard)

    def heard(
        self, status: int, headers: Mapping[str, str], wall: float, late: float = 0.0
    ) -> Limits:
        """An answer of the API (`wall`: when it came, on the clock its `-reset` times are
        compared to), told `late` seconds after (it waited for its turn at the row): what it
        announced has replenished, and its hold run, that long since."""
        budgets = dict(self.budgets)
        for name in LIMITS:
            announced = _budget(headers, name, wall)
            if announced is None:
                continue
            announced = announced.aged(late)
            known = budgets.get(name)
            if known is not None and known.limit == announced.limit:
                fewer = min(known.remaining, announced.remaining)  # ours counts starts in flight
                announced = replace(announced, remaining=fewer)
            budgets[name] = announced
        held, reason, overloads = self.held, self.reason, self.overloads
        probing = reason in (FIRST_ANSWER, ANSWER_AFTER_OVERLOAD)
        kept = 0.0 if probing else held  # a probe's hold ends with its answer, whatever it is
        if status == 429:
            wait = _retry_after(headers)
            held = max(kept, (RATE_LIMITED_SECONDS if wait is None else wait) - late)
            reason = "429 rate limited"
        elif status == 529:
            if not (reason == OVERLOADED and held > 0):  # not a straggler of the same wave
                overloads += 1
            doubling = OVERLOAD_FIRST_SECONDS * 2 ** min(overloads - 1, 16)
            wait = _retry_after(headers) or min(OVERLOAD_CAP_SECONDS, doubling)
            held, reason = max(kept, wait - late), OVERLOADED
        elif status < 500 and probing:  # the probe is answered (a 4xx is one burst's fault)
            overloads, held, reason = 0, 0.0, ""
        return Limits(budgets, held, reason, overloads, answered=True, unheard=self.unheard)

    def to_json(self) -> str:
        return json.dumps(
            asdict(self) | {"budgets": {k: asdict(b) for k, b in self.budgets.items()}}
        )

    @classmethod
    def from_json(cls, text: str) -> Limits:
        data = json.loads(text)
        budgets = {name: Budget(**b) for name, b in data.pop("budgets").items()}
        return cls(budgets, **data)


UNKNOWN = Limits({})


def _budget(headers: Mapping[str, str], name: str, wall: float) -> Budget | None:
    """`anthropic-ratelimit-<name>-limit/-remaining/-reset`: the replenishing rate is a minute's
    worth a minute, or slower when the reset time says so."""
    prefix = f"anthropic-ratelimit-{name}"
    try:
        limit = float(headers[f"{prefix}-limit"])
        remaining = float(headers[f"{prefix}-remaining"])
    except (KeyError, ValueError):
        return None
    if limit <= 0:
        return None
    per_second = limit / 60.0
    reset = headers.get(f"{prefix}-reset")
    if reset and remaining < limit:
        try:
            full_in = datetime.fromisoformat(reset.replace("Z", "+00:00")).timestamp() - wall
        except ValueError:
            full_in = 0.0
        if full_in > 0:
            per_second = min(per_second, (limit - remaining) / full_in)
    return Budget(limit, min(remaining, limit), per_second)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    for name, unit in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            return max(0.0, float(headers[name]) / unit)
        except (KeyError, ValueError):
            continue
    return None


@dataclass(frozen=True, slots=True)
class SharedLimits:
    """The stored row: its state, how long ago (on the database's clock) it was saved, and the
    version a save must find to replace it."""

    limits: Limits
    age: float
    version: int


@dataclass(slots=True)
class Start:
    """One admitted start's share of the limits (`needs`), until an answer of the API tells
    that it was used (`used`)."""

    needs: dict[str, float]
    used: bool = False


_START: ContextVar[Start | None] = ContextVar("burstbot_admitted_start", default=None)


class LimitBook(Protocol):
    """The store's side: one row per API key, replaced by compare-and-swap on its version."""

    async def api_limits(self, scope: str, now: float) -> SharedLimits | None: ...

    async def save_api_limits(
        self, scope: str, limits: Limits, version: int | None, now: float
    ) -> bool:
        """Save as of `now`: False if the row is no longer at `version` (None: is there)."""
        ...


@dataclass(frozen=True, slots=True)
class Verdict:
    """A round's answer: how many may start now, and else when the next fits and why."""

    granted: int
    ready_at: float
    waiting_for: str


class Admission:
    """Asked by the engine before it starts generations; told by the replier what the API said.
    `scope` names the API key (never the key itself): processes with the same one share."""

    def __init__(
        self, book: LimitBook, clock: Clock, scope: str, wake: Callable[[], None] = lambda: None
    ) -> None:
        self.book = book
        self.wake = wake  # the scheduler's alarm: an answer may let waiting bursts start
        self.clock = clock
        self.scope = scope
        self.input_estimate = FIRST_INPUT_ESTIMATE
        self.output_estimate = FIRST_OUTPUT_ESTIMATE
        self.last = Verdict(0, 0.0, "")
        self._turn = asyncio.Lock()
        """This process's reads and saves of the row go one at a time: a wave of answers heard
        together would otherwise lose their compare-and-swaps to each other, and with them what
        the API said (the compare-and-swap is for other processes)."""

    @property
    def needs(self) -> dict[str, float]:
        return {
            "requests": 1.0,
            "input-tokens": self.input_estimate,
            "output-tokens": self.output_estimate,
        }

    async def admit(self, wanted: int) -> Verdict:
        """Take up to `wanted` starts from the shared limits in one compare-and-swap."""
        if wanted <= 0:
            return Verdict(0, self.clock.now(), "")
        async with self._turn:
            return await self._admit(wanted)

    async def _shared(self) -> tuple[Limits, int | None, float]:
        """The row as of now (aged; UNKNOWN and no version when there is none) and the time a
        save stamps it with: now, read after this process's turn came (a time taken before
        waiting would date the row back, and the wait would be replenished twice), or the row's
        own time if another process saved it later by its clock."""
        now = self.clock.now()
        shared = await self.book.api_limits(self.scope, now)
        if shared is None:
            return UNKNOWN, None, now
        return shared.limits.aged(shared.age), shared.version, now - min(0.0, shared.age)

    async def _admit(self, wanted: int) -> Verdict:
        for _ in range(SAVE_ATTEMPTS):
            limits, version, now = await self._shared()
            granted = 0
            wait, why = limits.wait(self.needs)
            while granted < wanted and wait <= 0:
                limits, granted = limits.take(self.needs), granted + 1
                wait, why = limits.wait(self.needs)
            if granted and not await self.book.save_api_limits(self.scope, limits, version, now):
                continue
            self.last = Verdict(granted, now + wait if granted < wanted else now, why)
            return self.last
        now = self.clock.now()
        self.last = Verdict(0, now, "the shared limits, saved by other processes meanwhile")
        return self.last

    async def heard(self, status: int, headers: Mapping[str, str]) -> None:
        """One answer of the API (an attempt's: the SDK's own retries too). A store that fails
        here costs one lesson, logged; the request goes on."""
        answered_at = self.clock.now()
        start = _START.get()
        if start is not None:
            start.used = True
        try:
            async with self._turn:
                await self._heard(status, headers, answered_at)
        except StoreError as exc:
            log.warning(
                "cannot save the API's limits (%s); learned again from the next answer", exc
            )

    def starting(self) -> Start:
        """Called by a worker as it begins: the answers heard from within it (its generation's
        task inherits the context) mark its start used."""
        start = Start(self.needs)
        _START.set(start)
        return start

    async def unused(self, start: Start) -> None:
        """The worker is done: a start that never heard the API gives its share back (one
        compare-and-swap; a store that fails costs the refund, logged)."""
        if start.used:
            return
        try:
            async with self._turn:
                await self._give_back(start)
        except StoreError as exc:
            log.warning("cannot give back an unused start (%s); the limits replenish anyway", exc)

    async def _give_back(self, start: Start) -> None:
        for _ in range(SAVE_ATTEMPTS):
            limits, version, now = await self._shared()
            if version is None:
                return
            if await self.book.save_api_limits(self.scope, limits.give_back(start.needs),
                                               version, now):  # fmt: skip
                self.wake()
                return

    async def _heard(self, status: int, headers: Mapping[str, str], answered_at: float) -> None:
        """What the answer announced is as of `answered_at`, aged to now when it is saved."""
        for _ in range(SAVE_ATTEMPTS):
            known, version, now = await self._shared()
            learned = known.heard(status, headers, answered_at, late=max(0.0, now - answered_at))
            if learned == known and version is not None:
                return
            if await self.book.save_api_limits(self.scope, learned, version, now):
                if status in (429, 529):
                    log.warning("Claude API %d: generations held %.1f s", status, learned.held)
                elif known.held > 0 and learned.held <= 0:
                    self.wake()
                return
        log.info("the API's limits were saved by other processes %d times in a row; this answer's "
                 "lesson is left to the next one", SAVE_ATTEMPTS)  # fmt: skip

    def spent(self, input_tokens: int, output_tokens: int) -> None:
        """A generation's measured usage moves the estimates a start takes."""
        if input_tokens <= 0 and output_tokens <= 0:
            return
        w = ESTIMATE_WEIGHT
        self.input_estimate = (1 - w) * self.input_estimate + w * input_tokens
        self.output_estimate = (1 - w) * self.output_estimate + w * output_tokens
