"""Which threads are ours, remembered in the store, and messages held until a lookup decides (G7).

A front end that cannot tell from an event alone whether a thread reply counts (Slack: a reply,
without a mention, in a thread the bot joined earlier) asks `ThreadBook.status`: a thread the store
holds a conversation for is ours; one a lookup decided is what the lookup said; an unknown one is
`hold`-ed — stored durably, then acked — and decided in the background: the front end's lookup
runs (waiting out `Retry-After`), the answer is remembered, and the held messages are ingested (or
dropped: not ours). A lookup that fails leaves the message held and is tried again, so a failed
lookup never turns into "ignore", and nothing slow runs before the ack.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bot.core.background import Background, patiently
from bot.core.clock import Clock
from bot.core.errors import FetchError
from bot.core.events import ConversationKey, Event, IncomingMessage
from bot.core.settings import CatchUpSettings
from bot.core.store import FrontendMemory, IngestResult

log = logging.getLogger("burstbot.threads")

Ingest = Callable[[Event], Awaitable[IngestResult]]
Lookup = Callable[[ConversationKey], Awaitable[bool]]
HELD_BATCH = 200


@dataclass(eq=False)
class ThreadBook:
    """Which threads are ours (the store's answer), and messages held until a lookup decides."""

    memory: FrontendMemory
    clock: Clock
    ingest: Ingest
    settings: CatchUpSettings
    _deciders: dict[str, Background] = field(default_factory=dict, init=False)

    async def idle(self) -> None:
        """Until every held message seen so far is decided (tests)."""
        for decider in list(self._deciders.values()):
            await decider.idle()

    async def status(self, key: ConversationKey) -> bool | None:
        return await self.memory.thread_status(key.id)

    async def hold(self, message: IncomingMessage) -> None:
        """Store the message until its thread is decided (the caller acks after this)."""
        await self.memory.hold(message, self.clock.now())
        decider = self._deciders.get(message.key.platform)
        if decider is not None:
            decider.request()

    def decide_with(self, platform: str, lookup: Lookup) -> Background:
        """Decide `platform`'s held messages with `lookup` (True: the thread is ours; raises
        `FetchError`), starting now with any an earlier run left. The caller stops the job."""
        work = functools.partial(self._decide, platform, lookup)
        job = Background(f"{platform}: deciding held threads", work, self.clock, self.settings)
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
                ours = await patiently(read, f"thread {key.id}", self.clock, self.settings)
            except FetchError as exc:
                if not exc.permanent:
                    raise  # still held: the job runs again after a backoff
                log.warning("thread %s cannot be read (%s): %d held message(s) not answered",
                            key.id, exc, len(messages))  # fmt: skip
                ours = False
            else:
                await self.memory.remember_thread(key.id, ours, self.clock.now())
                log.info("thread %s is %s: %d held message(s) %s", key.id,
                         "ours" if ours else "not ours", len(messages),
                         "taken in" if ours else "dropped")  # fmt: skip
        for message in messages:
            if ours:
                await self.ingest(message)
            await self.memory.unhold(message)
