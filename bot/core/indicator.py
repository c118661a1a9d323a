"""The thinking indicator: on once a burst has waited `delay` past its close, off once answered.

Rules:

1. A burst "closes" when its timer falls due (`due_at`). The indicator is not shown before
   `due_at + delay`: a reply posted within `delay` of the close costs no indicator call at all.
   Each new message of the burst moves that moment with the timer, and the message it goes on.
2. Coalesced: at most one "on" and one "off" call per conversation and burst. Messages that arrive
   while the indicator is on change nothing on the platform.
3. Recorded in the store before it is shown (`record_indicator`, refused once the burst is
   answered or while another process shows one), and taken down by whoever deletes the record:
   the process that marks the reply sent (`mark_sent` takes it in the same transaction), so
   an indicator turned on by a process killed since still goes off. While on, the process that
   turned it on asks every `recheck` seconds whether the conversation was answered elsewhere.
4. Ordered per conversation: each platform call waits for the conversation's previous one to
   end, so an "off" never overtakes a slow "on" (which would leave the indicator up for good).
5. It is a courtesy: it runs in the background on a best-effort basis, a slow or failing platform
   call never holds up a transition, and failures are only logged at debug level.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field

from bot.core.clock import Clock
from bot.core.events import ConversationKey
from bot.core.frontend import Frontend
from bot.core.store import IndicatorMarks

log = logging.getLogger("burstbot.indicator")
Call = asyncio.Future[None]


@dataclass
class _Shown:
    """One conversation's indicator: waiting to go on (`on_at`), or on (`on_at` is None)."""

    on_at: float | None
    version: int  # the newest accepted version seen; answered past it → off
    at: str  # the message it goes on: the burst's newest, until it is on
    task: asyncio.Task[None] | None = None


@dataclass(eq=False)
class Indicator:
    """Shows and clears the indicator through the front end serving the conversation, if any."""

    frontends: Mapping[str, Frontend]
    clock: Clock
    store: IndicatorMarks
    delay: float = 1.0
    recheck: float = 10.0
    running: set[asyncio.Task[None]] = field(default_factory=set, init=False)  # calls in flight
    _last_call: dict[ConversationKey, Call] = field(default_factory=dict, init=False)  # the newest
    _shown: dict[ConversationKey, _Shown] = field(default_factory=dict, init=False)
    _working: set[Call] = field(default_factory=set, init=False)  # followers checking the store

    def show(self, key: ConversationKey, due_at: float | None, version: int, at: str) -> None:
        """Message `at` was accepted: its burst closes at `due_at` (now, if unknown)."""
        if key.platform not in self.frontends:
            return
        on_at = (self.clock.now() if due_at is None else due_at) + self.delay
        shown = self._shown.get(key)
        if shown is None:
            shown = self._shown[key] = _Shown(on_at, version, at)
            shown.task = asyncio.ensure_future(self._follow(key, shown))
            return
        shown.version = max(shown.version, version)
        if shown.on_at is not None:
            shown.on_at = max(shown.on_at, on_at)
            shown.at = at

    def sent(self, key: ConversationKey, indicator_at: str | None) -> None:
        """A reply was marked sent, taking the recorded indicator (shown at `indicator_at`, by
        this process or another) down with it: off there, and stop following."""
        self._stop_following(key)
        if indicator_at is not None:
            self._call(key, indicator_at, busy=False)

    def clear(self, key: ConversationKey) -> None:
        """The conversation needs no reply: whatever indicator is recorded goes off."""
        self._stop_following(key)
        self._in_background(self._take_down(key))

    def close(self) -> None:
        """Shutdown: nothing more goes on; what this process turned on goes off."""
        for key, shown in list(self._shown.items()):
            self._stop_following(key)
            if shown.on_at is None:
                self._in_background(self._take_down(key))

    def _stop_following(self, key: ConversationKey) -> None:
        shown = self._shown.pop(key, None)
        if shown is not None and shown.task is not None:
            shown.task.cancel()

    async def idle(self) -> None:
        """Wait until no check or call is in progress: every follower is asleep on the clock
        (tests step a fake clock after this)."""
        while pending := [*self.running, *self._working]:
            await asyncio.gather(*pending, return_exceptions=True)

    async def _follow(self, key: ConversationKey, shown: _Shown) -> None:
        """Wait out the delay, turn the indicator on, then watch for an answer elsewhere."""
        with contextlib.suppress(asyncio.CancelledError):
            while shown.on_at is not None and (wait := shown.on_at - self.clock.now()) > 0:
                await self.clock.sleep(wait)
            with self._at_work():
                at = shown.at  # a message arriving meanwhile must not move it: on where recorded
                if not await self._record(key, at, shown.version):  # answered, or shown elsewhere
                    self._forget(key, shown)
                    return
                shown.on_at = None
                self._call(key, at, busy=True)
            while True:
                await self.clock.sleep(self.recheck)
                with self._at_work():
                    if not await self._unanswered(key, shown):
                        self._forget(key, shown)
                        await self._take_down(key)
                        return

    @contextlib.contextmanager
    def _at_work(self) -> Iterator[None]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._working.add(done)
        try:
            yield
        finally:
            self._working.discard(done)
            done.set_result(None)

    async def _record(self, key: ConversationKey, at: str, version: int) -> bool:
        try:
            return await asyncio.shield(self.store.record_indicator(key.id, at, version))
        except Exception:  # best effort: not recorded, not shown
            log.debug("thinking indicator: cannot record %s", key.id, exc_info=True)
            return False

    async def _take_down(self, key: ConversationKey) -> None:
        try:
            at = await asyncio.shield(self.store.take_indicator(key.id))
        except Exception:  # best effort: the reply's mark_sent takes it down later
            log.debug("thinking indicator: cannot take down %s", key.id, exc_info=True)
            return
        if at is not None:
            self._call(key, at, busy=False)

    async def _unanswered(self, key: ConversationKey, shown: _Shown) -> bool:
        try:
            state = await asyncio.shield(self.store.conversation_state(key.id))
        except Exception:  # best effort: when in doubt, keep the indicator as it is
            log.debug("thinking indicator: cannot read %s", key.id, exc_info=True)
            return True
        return state is not None and state.answered_version < shown.version

    def _forget(self, key: ConversationKey, shown: _Shown) -> None:
        if self._shown.get(key) is shown:
            del self._shown[key]

    def _call(self, key: ConversationKey, at: str, *, busy: bool) -> None:
        """The platform call, after the conversation's previous one has ended (rule 4)."""
        frontend = self.frontends.get(key.platform)
        if frontend is None:
            return
        previous = self._last_call.get(key)
        call = self._in_background(
            _in_turn(previous, lambda: frontend.show_busy(key, busy, at), key.id, busy)
        )
        self._last_call[key] = call

        def forget(done: asyncio.Future[None]) -> None:
            if self._last_call.get(key) is done:
                del self._last_call[key]

        call.add_done_callback(forget)

    def _in_background(self, work: Awaitable[None]) -> asyncio.Future[None]:
        task = asyncio.ensure_future(work)
        self.running.add(task)
        task.add_done_callback(self.running.discard)
        return task


async def _in_turn(
    previous: asyncio.Future[None] | None,
    work: Callable[[], Awaitable[None]],
    conversation: str,
    busy: bool,
) -> None:
    if previous is not None:
        await asyncio.wait([previous])  # its outcome is its own; only its end matters here
    try:
        await work()
    except Exception:
        log.debug("thinking indicator %s in %s failed", "on" if busy else "off", conversation,
                  exc_info=True)  # fmt: skip
