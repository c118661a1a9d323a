"""Catch-up after downtime (G11, docs/catch-up.md): what a front end did not see live, fetched in
the background.

The platform side (which API, which pages, what counts) stays in the adapter (`CatchUpSource`).

- `CatchUp`: one front end's catch-up passes, requested at start, after a reconnect that may have
  lost events, and for a message whose ingest failed; run in the background (`Background`), one
  at a time. A pass hands the front end a `CatchUpRun`: for every conversation of the platform,
  however long it was quiet, the newest message stored before the cut-off, most recently active
  first; the front end fetches what came after (nothing older than `max_age`) and ingests what
  counts through `run.ingest`. The store dedupes by message id, so a pass is safe to repeat, and
  one interrupted half-way is simply run again.
- A front end that keys a message by what is stored (Slack's agent DMs: the exchange a top-level
  message joins or opens) ingests what it finds itself, through a `Route`; `run.stored_in` tells
  it where a message seen live already is, so it keys it as it was.
- A pass spends at most `max_requests` platform calls (every attempt counts, a rate-limited one
  too): the front end stops when `run.exhausted`, and the ones left unchecked are logged.

The cut-off is the moment the connection that may have missed events began (the process start, a
reconnect, a failed ingest), not "now": a live message stored after the reconnect must not hide
the ones sent during the gap before it.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from bot.core.background import Background, patiently
from bot.core.clock import Clock
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.settings import CatchUpSettings
from bot.core.store import FrontendMemory, IngestResult
from bot.core.threads import Ingest

log = logging.getLogger("burstbot.catch_up")

T = TypeVar("T")

Route = Callable[[IncomingMessage, Ingest], Awaitable[IngestResult]]
"""A front end's own ingest of a message it found: it chooses the message's conversation (under
its own lock, as for a live one) and hands the result to the `Ingest` it is given."""


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

    async def ingest(
        self, where: str, messages: Iterable[IncomingMessage], route: Route | None = None
    ) -> None:
        """Ingest what counts of one conversation or channel, oldest first, marked as caught up;
        through `route` when the front end keys each message itself."""
        seen: Counter[str] = Counter()
        ingest = self._catch_up.ingest
        for message in messages:
            caught = replace(message, via="catch-up")
            result = await (ingest(caught) if route is None else route(caught, ingest))
            seen[result.status] += 1
        self.counts.update(seen)
        if seen["accepted"]:
            log.info("catch-up %s: %d new message(s), %d already stored", where,
                     seen["accepted"], seen["duplicate"])  # fmt: skip

    async def stored_in(self, message: IncomingMessage) -> ConversationKey | None:
        """The conversation `message` is stored in already (seen live, or by an earlier pass)."""
        key = message.key
        stored = await self._catch_up.memory.stored_in(key.platform, key.workspace,
                                                       message.message_id)  # fmt: skip
        return None if stored is None else ConversationKey.parse(stored)

    def skip(self, where: str, reason: str) -> None:
        """A conversation that cannot be read (channel gone, no access): logged, left alone."""
        self.counts["skipped"] += 1
        log.warning("catch-up %s skipped: %s", where, reason)

    def truncated(self, where: str) -> None:
        """More than `max_pages` pages: the rest is left alone (logged)."""
        self.counts["truncated"] += 1
        log.warning("catch-up %s: more than %d page(s) missed; the rest is left alone", where,
                    self.max_pages)  # fmt: skip


@dataclass(eq=False)
class CatchUp:
    """One front end's catch-up passes, run in the background one at a time."""

    platform: str
    fetch: Callable[[CatchUpRun], Awaitable[None]]  # the front end's `CatchUpSource.catch_up`
    memory: FrontendMemory
    ingest: Ingest
    clock: Clock
    settings: CatchUpSettings
    _before: float | None = field(default=None, init=False)
    _everything: bool = field(default=False, init=False)
    _only: set[ConversationKey] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self._job = Background(f"{self.platform} catch-up", self._pass, self.clock, self.settings)

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
        counts = run.counts
        log.info(
            "catch-up (%s) done in %.1f s: %d request(s), %d new message(s), %d already stored, "
            "%d refused, %d conversation(s) skipped, %d not checked",
            platform, self.clock.now() - started, counts["requests"], counts["accepted"],
            counts["duplicate"], counts["ignored"], counts["skipped"], counts["unchecked"],
        )  # fmt: skip
