"""Streaming (G10): a generation's text shown as it grows, still one visible message per burst.

Rules:

- A stream follows one generation, so it starts only when a generation starts (after the quiet
  window), and shows the text so far (`usage.streamed`) in the conversation's draft: one platform
  call at a time, the next no sooner than `streaming_interval_seconds` after the previous one
  ended (longer after a Retry-After).
- The draft is part of the outbox. Its key is recorded, fenced by the lease, before its first
  post, which carries the key as its idempotency key; its message id is recorded right after. A
  draft whose id was never recorded (a crash, a lost response) is found by its key before any
  new post.
- One draft per conversation, kept across superseded generations (it then shows `WAITING`) and
  takeovers, so the next generation streams into the same message. The commit hands the draft to
  the reply, whose delivery edits it to the final text (the outbox's claim, parts and order).
- No draft is started while an earlier reply of the conversation waits in the outbox (G9: the new
  message would show above it).
- A stream stops showing once its lease may have moved on: it trusts the lease until a third of
  the TTL before the expiry the database stamped (at acquire, then at each renewal), counted on
  the monotonic clock (as `ClaimFence` trusts a claim); store writes are fenced by the token
  anyway.
- Streaming is a courtesy on top of delivery: a failing platform call stops the stream (logged),
  never the burst; the reply is delivered through the outbox either way.
- A burst whose every message was deleted deletes its draft (`Drafts.discard`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from bot.core.burst import Burst
from bot.core.clock import Clock, trusted_until
from bot.core.errors import BurstbotError, RetryableDeliveryError
from bot.core.events import Draft
from bot.core.frontend import DraftSurface, Frontend, drafts_of
from bot.core.settings import EngineSettings
from bot.core.store import Store
from bot.core.supervisor import Supervision
from bot.model.replier import Usage

log = logging.getLogger("burstbot.streaming")

WAITING = "…"  # what a draft shows while newer messages are read (a superseded generation)


class Drafts:
    """Starts a stream for each generation where the conversation streams and its front end can
    draft; deletes the draft of a burst whose messages were all deleted."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        settings: Callable[[], EngineSettings],
        frontends: Mapping[str, Frontend],
        waiting: Callable[[str], Awaitable[bool]],
    ) -> None:
        self.store = store
        self.clock = clock
        self._settings = settings  # read at each use: a reload replaces them
        self.frontends = frontends
        self.waiting = waiting  # a reply of the conversation is still to be posted (the outbox)

    @property
    def settings(self) -> EngineSettings:
        return self._settings()

    def _surface(self, platform: str) -> DraftSurface | None:
        frontend = self.frontends.get(platform)
        return None if frontend is None else drafts_of(frontend)

    def follow(self, burst: Burst, usage: Usage, generation: asyncio.Future[str]) -> Stream:
        surface = self._surface(burst.key.platform)
        if surface is None or not self.settings.streams(burst.key):
            return NotStreamed()
        return DraftStream(self, surface, burst, usage, generation)

    async def discard(self, burst: Burst) -> None:
        """Delete the draft of a burst that ended up with no message (before its commit)."""
        cid, token = burst.lease.conversation_id, burst.lease.token
        surface = self._surface(burst.key.platform)
        if surface is None:
            return
        draft = await self.store.draft(cid)
        if draft is None:
            return
        try:
            await surface.delete_draft(burst.key, draft)
        except BurstbotError as exc:  # kept: the next burst of the conversation reuses it
            log.warning("conversation %s: could not delete the draft (%s); kept", cid, exc)
            return
        await self.store.drop_draft(cid, token, draft.key)


class Stream:
    """What the engine sees of a stream: lease renewals go in, the watch's outcome ends it."""

    def renewed(self, expires_at: float) -> None:
        return None

    async def stop(self, outcome: Supervision) -> None:
        return None


class NotStreamed(Stream):
    """The conversation does not stream: its reply is posted once complete."""


class DraftStream(Stream):
    def __init__(
        self,
        drafts: Drafts,
        surface: DraftSurface,
        burst: Burst,
        usage: Usage,
        generation: asyncio.Future[str],
    ) -> None:
        self.drafts = drafts
        self.surface = surface
        self.burst = burst
        self.usage = usage
        self.generation = generation
        self.clock = drafts.clock
        self.ttl = drafts.settings.lease_ttl_seconds
        self.interval = drafts.settings.streaming_interval_seconds
        self.valid_until = trusted_until(self.clock, burst.lease.expires_at, self.ttl)
        self.draft: Draft | None = None  # once this stream knows the draft's message
        self.next_call_at = self.clock.now() + self.interval
        self.calls = 0
        self._stopping = asyncio.Event()
        self._task = asyncio.ensure_future(self._run())

    def renewed(self, expires_at: float) -> None:
        self.valid_until = trusted_until(self.clock, expires_at, self.ttl)

    def _fenced(self) -> bool:
        return self.clock.monotonic() < self.valid_until

    async def stop(self, outcome: Supervision) -> None:
        """The watch ended: let a call in flight finish and keep the interval before the next
        one (the reply's final edit follows); a superseded or failed generation leaves the draft
        saying that the bot is still reading."""
        self._stopping.set()
        await asyncio.gather(self._task, return_exceptions=True)
        if self.calls == 0 or outcome is Supervision.LEASE_LOST:
            return
        await self.clock.sleep_until(self.next_call_at)
        failed = outcome is Supervision.DONE and (
            self.generation.cancelled() or self.generation.exception() is not None
        )
        if outcome is Supervision.SUPERSEDED or failed:
            await self._show_quietly(WAITING)

    async def _show_quietly(self, text: str) -> None:
        if self.draft is not None and self.draft.message_id is not None and self._fenced():
            with contextlib.suppress(BurstbotError):
                await self.surface.edit_draft(self.burst.key, self.draft.message_id, text)

    async def _run(self) -> None:
        shown, check_at = "", self.next_call_at
        while await self._pause_until(check_at):
            text = self.usage.text_so_far()
            check_at = max(self.next_call_at, self.clock.now() + self.interval)
            if not text.strip() or text == shown:
                continue
            if not self._fenced():
                return
            self.calls += 1
            try:
                showing = await self._show(text)
            except RetryableDeliveryError as exc:
                log.info("conversation %s: draft not updated (%s)", self.burst.key.id, exc)
                self.next_call_at = self.clock.now() + max(self.interval, exc.retry_after or 0.0)
                check_at = self.next_call_at
                continue
            except Exception as exc:
                log.warning("conversation %s: streaming stopped (%s)", self.burst.key.id, exc)
                return
            self.next_call_at = check_at = self.clock.now() + self.interval
            if not showing:
                return
            shown = text

    async def _pause_until(self, when: float) -> bool:
        """Sleep on the clock; False once the generation ended or the stream is stopped."""
        sleeper = asyncio.ensure_future(self.clock.sleep_until(when))
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            waits: set[asyncio.Future[Any]] = {sleeper, stopping, self.generation}
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            stopping.cancel()
        return not (self._stopping.is_set() or self.generation.done())

    async def _show(self, text: str) -> bool:
        if self.draft is not None and self.draft.message_id is not None:
            await self.surface.edit_draft(self.burst.key, self.draft.message_id, text)
            return True
        return await self._open(text)

    async def _open(self, text: str) -> bool:
        """The first call of this stream: the conversation's draft, or a new one."""
        store, cid, token = self.drafts.store, self.burst.key.id, self.burst.lease.token
        draft = await store.draft(cid)
        if draft is not None and draft.message_id is not None:
            self.draft = draft
            return await self._show(text)
        lost = draft is not None  # recorded, posted perhaps, its id never recorded
        if draft is None:
            if await self.drafts.waiting(cid):
                return False
            draft = Draft("d" + secrets.token_hex(10))  # 21 characters: a Discord nonce
            if not await store.record_draft(cid, token, draft):
                return False
        if not self._fenced():
            return False
        reply_to = self.burst.messages[-1].message_id
        message_id = await self.surface.post_draft(self.burst.key, draft.key, text, reply_to, lost)
        self.draft = Draft(draft.key, message_id)
        if not await store.record_draft(cid, token, self.draft):
            return False
        if lost:  # the message found shows what the lost post said
            await self.surface.edit_draft(self.burst.key, message_id, text)
        return True
