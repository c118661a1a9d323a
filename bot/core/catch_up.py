"""What a front end did not see live: threads decided later, and catch-up after downtime (G7, G11).

Both jobs are platform-neutral here; the platform side (which API, which pages, what counts) stays
in the adapter.

- `ThreadBook`: which threads are ours, remembered in the store. A front end that cannot tell from
  an event alone whether a thread reply counts (Slack: a reply, without a mention, in a thread the
  bot joined earlier) asks `status`: a thread the store holds a conversation for is ours; one a
  lookup decided is what the lookup said; an unknown one is `hold`-ed — stored durably, then
  acked — and decided in the background: the front end's lookup runs (waiting out `Retry-After`),
  the answer is remembered, and the held messages are ingested (or dropped: not ours). A lookup
  that fails leaves the message held and is tried again, so a failed lookup never turns into
  "ignore", and nothing slow runs before the ack.
- `CatchUp`: one front end's catch-up passes, requested at start, after a reconnect that may have
  lost events, and for a message whose ingest failed. A pass reads, for every conversation of the
  platform however long it was quiet, the newest message stored before the cut-off, and hands the
  front end a `CatchUpRun` listing them most recently active first: the front end fetches what
  came after (a bounded number of pages, nothing older than `max_age`), applies its usual "what
  counts" rules and ingests through `run.ingest`. `max_age` bounds the age of the messages
  answered, never the conversation's earlier activity: a quiet conversation's new message is
  found too. The store dedupes by message id, so a pass is safe to repeat, and one interrupted
  half-way is simply run again.
- A pass spends at most `max_requests` platform calls (every attempt counts, a rate-limited one
  too): the front end walks the conversations in the run's order, stops when `run.exhausted`,
  and the ones left unchecked are logged. Long walks log their progress.

The cut-off is the moment the connection that may have missed events began (the process start, a
reconnect, a failed ingest), not "now": a live message stored after the reconnect must not hide
the ones sent during the gap before it.

Both run in the background (`Background`), one run at a time per job: never before an ack, never
in a live event's way. A failed run is logged and tried again with doubling backoff.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar, runtime_checkable

from bot.core.clock import Clock
from bot.core.errors import FetchError
from bot.core.events import ConversationKey, Event, IncomingMessage
from bot.core.store import IngestResult

log = logging.getLogger("burstbot.catch_up")

T = TypeVar("T")
Ingest = Callable[[Event], Awaitable[IngestResult]]
Lookup = Callable[[ConversationKey], Awaitable[bool]]
HELD_BATCH = 200


@runtime_checkable
class FrontendMemory(Protocol):
    """What the store remembers for front ends (storage/sql_store.py)."""

    async def thread_status(self, conversation_id: str) -> bool | None:
        """True: a conversation of ours, or a lookup said so; False: a lookup said it is not;
        None: never decided."""
        ...

    async def remember_thread(self, conversation_id: str, ours: bool, now: float) -> None: ...

    async def hold(self, message: IncomingMessage, now: float) -> None:
        """Keep a message until its thread is decided; holding one id twice changes nothing.
        Held messages are thread replies in channels (never DMs)."""
        ...

    async def held(self, platform: str, limit: int) -> list[IncomingMessage]:
        """The oldest held messages of a platform, with `via="held"`."""
        ...

    async def unhold(self, message: IncomingMessage) -> None: ...

    async def catch_up_points(
        self, platform: str, before: float, now: float
    ) -> dict[str, str | None]:
        """Every conversation of `platform` → the platform id of its newest message stored before
        `before` (None: none stored before then), most recently active first. Arrival times are
        the database's: `before` crosses over by its distance from `now` (the Store protocol's
        rule)."""
        ...


@dataclass(frozen=True, slots=True)
class CatchUpSettings:
    enabled: bool = True
    max_age_seconds: float = 24 * 3600.0
    max_pages: int = 10  # pages a front end reads per conversation and pass
    retry_seconds: float = 2.0  # first wait after a failure that names no Retry-After; doubles
    max_retry_seconds: float = 300.0
    attempts: int = 6  # tries of one platform read before its run fails (and is run again)
    max_requests: int = 1000  # platform calls a pass may spend, most recently active first
    progress_every: int = 100  # conversations checked between two progress lines


async def patiently(
    read: Callable[[], Awaitable[T]], what: str, clock: Clock, settings: CatchUpSettings
) -> T:
    """One platform read, tried again after a rate limit (exactly its `Retry-After`) or a passing
    failure (backoff); a permanent failure, or the last attempt's, goes up."""
    delay = settings.retry_seconds
    for attempt in range(1, settings.attempts + 1):
        try:
            return await read()
        except FetchError as exc:
            if exc.permanent or attempt == settings.attempts:
                raise
            wait = delay if exc.retry_after is None else exc.retry_after
            log.info("%s: %s; trying again in %.1f s", what, exc, wait)
            await clock.sleep(wait)
            delay = min(delay * 2, settings.max_retry_seconds)
    raise AssertionError("unreachable")


class Background:
    """A job run in the background when requested, one run at a time; a request during a run
    makes another run follow it. A run that fails is logged and run again after a backoff."""

    def __init__(
        self,
        name: str,
        work: Callable[[], Awaitable[None]],
        clock: Clock,
        settings: CatchUpSettings,
    ) -> None:
        self.name = name
        self._work = work
        self._clock = clock
        self._settings = settings
        self._wanted = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None

    def request(self) -> None:
        self._wanted = True
        self._idle.clear()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name=self.name)

    async def idle(self) -> None:
        """Until no run is under way or wanted (a failing job stays busy while it retries)."""
        await self._idle.wait()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._idle.set()

    async def _loop(self) -> None:
        delay = self._settings.retry_seconds
        while self._wanted:
            self._wanted = False
            try:
                await self._work()
                delay = self._settings.retry_seconds
            except Exception as exc:
                log.warning("%s failed (%s); trying again in %.0f s", self.name, exc, delay)
                self._wanted = True
                await self._clock.sleep(delay)
                delay = min(delay * 2, self._settings.max_retry_seconds)
        self._idle.set()


class ThreadBook:
    """Which threads are ours (the store's answer), and messages held until a lookup decides."""

    def __init__(
        self, memory: FrontendMemory, clock: Clock, ingest: Ingest, settings: CatchUpSettings
    ) -> None:
        self.memory = memory
        self._clock = clock
        self._ingest = ingest
        self._settings = settings
        self._deciders: dict[str, Background] = {}

    async def idle(self) -> None:
        """Until every held message seen so far is decided (tests)."""
        for decider in list(self._deciders.values()):
            await decider.idle()

    async def status(self, key: ConversationKey) -> bool | None:
        return await self.memory.thread_status(key.id)

    async def hold(self, message: IncomingMessage) -> None:
        """Store the message until its thread is decided (the caller acks after this)."""
        await self.memory.hold(message, self._clock.now())
        decider = self._deciders.get(message.key.platform)
        if decider is not None:
            decider.request()

    def decide_with(self, platform: str, lookup: Lookup) -> Background:
        """Decide `platform`'s held messages with `lookup` (True: the thread is ours; raises
        `FetchError`), starting now with any an earlier run left. The caller stops the job."""
        work = functools.partial(self._decide, platform, lookup)
        job = Background(f"{platform}: deciding held threads", work, self._clock, self._settings)
        self._deciders[platform] = job
        job.request()
        return job

    async def _decide(self, platform: str, lookup: Lookup) -> None:
        """Thread by thread; one whose lookup keeps failing does not hold up the others, and
        the job runs again (after a backoff) while any is left undecided."""
        while held := await self.memory.held(platform, HELD_BATCH):
            threads: dict[ConversationKey, list[IncomingMessage]] = {}
            for message in held:
                threads.setdefault(message.key, []).append(message)
            failed: FetchError | None = None
            for key, messages in threads.items():
                try:
                    await self._settle(key, messages, lookup)
                except FetchError as exc:
                    failed = failed or exc
            if failed is not None:
                raise failed

    async def _settle(
        self, key: ConversationKey, messages: list[IncomingMessage], lookup: Lookup
    ) -> None:
        ours = await self.memory.thread_status(key.id)
        if ours is None:
            read = functools.partial(lookup, key)
            try:
                ours = await patiently(read, f"thread {key.id}", self._clock, self._settings)
            except FetchError as exc:
                if not exc.permanent:
                    raise  # still held: the job runs again after a backoff
                log.warning("thread %s cannot be read (%s): %d held message(s) not answered",
                            key.id, exc, len(messages))  # fmt: skip
                ours = False
            else:
                await self.memory.remember_thread(key.id, ours, self._clock.now())
                log.info("thread %s is %s: %d held message(s) %s", key.id,
                         "ours" if ours else "not ours", len(messages),
                         "taken in" if ours else "dropped")  # fmt: skip
        for message in messages:
            if ours:
                await self._ingest(message)
            await self.memory.unhold(message)


class CatchUpRun:
    """One pass, as the front end sees it: where to start, how far back, and where to put what it
    finds."""

    def __init__(
        self,
        catch_up: CatchUp,
        points: dict[ConversationKey, str | None],
        window_start: float,
        listened: bool,
    ) -> None:
        self.points = points
        """Conversation → platform id of its newest message stored before the cut-off (None:
        fetch from `window_start`), most recently active first: the order to walk them in."""
        self.window_start = window_start
        """Seconds since the epoch: nothing older is fetched (`catch_up.max_age_hours`)."""
        self.listened = listened
        """Also read the front end's listened channels (False: a pass for single conversations)."""
        self.max_pages = catch_up.settings.max_pages
        self.max_requests = catch_up.settings.max_requests
        self.counts: Counter[str] = Counter()
        self._catch_up = catch_up

    @property
    def exhausted(self) -> bool:
        """The pass has spent its `max_requests` platform calls: the walk stops here."""
        return self.counts["requests"] >= self.max_requests

    async def read(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """One page or lookup from the platform, waiting out rate limits (see `patiently`); each
        attempt counts against the pass's budget."""

        async def attempt() -> T:
            self.counts["requests"] += 1
            return await call()

        return await patiently(attempt, what, self._catch_up.clock, self._catch_up.settings)

    def checked(self, total: int) -> None:
        """One more conversation or channel walked, of `total`: a line every `progress_every`."""
        self.counts["checked"] += 1
        done, every = self.counts["checked"], self._catch_up.settings.progress_every
        if done % every == 0 and done < total:
            log.info("catch-up (%s): %d of %d conversation(s) checked, %d request(s), "
                     "%d new message(s) so far", self._catch_up.platform, done, total,
                     self.counts["requests"], self.counts["accepted"])  # fmt: skip

    def unchecked(self, left: int) -> None:
        """The budget ran out with `left` conversations not read (the least recently active)."""
        self.counts["unchecked"] += left
        log.warning("catch-up (%s): %d request(s) spent (catch_up.max_requests); %d less recently "
                    "active conversation(s) not checked this pass", self._catch_up.platform,
                    self.counts["requests"], left)  # fmt: skip

    async def ingest(self, where: str, messages: Iterable[IncomingMessage]) -> None:
        """Ingest what counts of one conversation or channel, oldest first, marked as caught up."""
        seen: Counter[str] = Counter()
        for message in messages:
            result = await self._catch_up.ingest(replace(message, via="catch-up"))
            seen[result.status] += 1
        self.counts.update(seen)
        if seen["accepted"]:
            log.info("catch-up %s: %d new message(s), %d already stored", where,
                     seen["accepted"], seen["duplicate"])  # fmt: skip

    def skip(self, where: str, reason: str) -> None:
        """A conversation that cannot be read (channel gone, no access): logged, left alone."""
        self.counts["skipped"] += 1
        log.warning("catch-up %s skipped: %s", where, reason)

    def truncated(self, where: str) -> None:
        """More than `max_pages` pages: the rest is left alone (logged)."""
        self.counts["truncated"] += 1
        log.warning("catch-up %s: more than %d page(s) missed; the rest is left alone", where,
                    self.max_pages)  # fmt: skip


class CatchUp:
    """One front end's catch-up passes, run in the background one at a time."""

    def __init__(
        self,
        platform: str,
        fetch: Callable[[CatchUpRun], Awaitable[None]],
        memory: FrontendMemory,
        ingest: Ingest,
        clock: Clock,
        settings: CatchUpSettings,
    ) -> None:
        self.platform = platform
        self.fetch = fetch  # the front end's `CatchUpSource.catch_up`
        self.memory = memory
        self.ingest = ingest
        self.clock = clock
        self.settings = settings
        self.passes = 0
        self._before: float | None = None
        self._everything = False
        self._only: set[ConversationKey] = set()
        self._job = Background(f"{platform} catch-up", self._pass, clock, settings)

    def request(self, before: float, only: ConversationKey | None = None) -> None:
        """Catch up what was stored before `before` and sent since: every active conversation and
        the listened channels, or only the conversation `only`."""
        self._want(before, only is None, {only} if only else set())
        self._job.request()

    async def idle(self) -> None:
        await self._job.idle()

    async def stop(self) -> None:
        await self._job.stop()

    def _want(self, before: float, everything: bool, only: set[ConversationKey]) -> None:
        self._before = before if self._before is None else min(self._before, before)
        self._everything = self._everything or everything
        self._only |= only

    async def _pass(self) -> None:
        if self._before is None:
            return
        before, everything, only = self._before, self._everything, self._only
        self._before, self._everything, self._only = None, False, set()
        try:
            await self._run(before, everything, only)
        except BaseException:
            self._want(before, everything, only)  # the retry runs this pass again
            raise

    async def _run(self, before: float, everything: bool, only: set[ConversationKey]) -> None:
        platform = self.platform
        started = self.clock.now()
        since = started - self.settings.max_age_seconds
        stored = await self.memory.catch_up_points(platform, before, started)
        points = {ConversationKey.parse(cid): newest for cid, newest in stored.items()}
        if not everything:
            known = {key: newest for key, newest in points.items() if key in only}
            points = known | {key: None for key in only if key not in known}
        hours = self.settings.max_age_seconds / 3600
        log.info("catch-up (%s): checking %d conversation(s)%s for messages of the last %g h",
                 platform, len(points), " and any listened channels" if everything else "",
                 hours)  # fmt: skip
        run = CatchUpRun(self, points, since, everything)
        await self.fetch(run)
        self.passes += 1
        counts = run.counts
        log.info(
            "catch-up (%s) done in %.1f s: %d request(s), %d new message(s), %d already stored, "
            "%d refused, %d conversation(s) skipped, %d not checked",
            platform, self.clock.now() - started, counts["requests"], counts["accepted"],
            counts["duplicate"], counts["ignored"], counts["skipped"], counts["unchecked"],
        )  # fmt: skip
