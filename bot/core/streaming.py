"""Streaming (G10): a generation's text shown as it grows, still one visible message per burst
(docs/delivery.md#streaming).

Rules:

- A stream follows one generation and shows nothing before the burst's window closes (G4; a
  generation may start earlier: `speculation.py`); then it shows the text so far in the
  conversation's draft: the first call as soon as the model wrote a word, then one platform call
  at a time, `streaming_interval_seconds` after the previous one ended (longer after a
  Retry-After). Where the platform's budget is shared (`draft_turn`, `pacing.py`) a call with no
  budget is skipped, never waited for, and a draft that could not be posted is never recorded:
  the reply is posted whole. A generation never waits for a draft.
- The draft belongs to the conversation's pending burst, not to one generation. Its key, the time
  it was created and the message it answers are recorded, fenced by the lease, before its first
  post, which carries the key as its idempotency key; its message id is recorded right after.
- A draft whose post outcome is unknown is found before anything new is posted (`locate_draft`);
  until it is, nothing is posted.
- Superseded and failed generations, and commits the final check discarded, leave the draft
  showing `WAITING`: the next generation streams into the same message. A burst that ends with
  no reply deletes it. The commit hands the draft to the reply, whose delivery edits it to the
  final text, so a draft never shows text that is not the conversation's answer for long.
- A draft a person deleted (`MessageGone` on an edit) is replaced by a fresh post, once per
  stream; the reply's delivery posts anew too if its draft is gone.
- Every platform call of a stream ends with the lease's fence (`trusted_until`, as `ClaimFence`
  trusts a claim): a call still running then is cancelled, so no library-level resend (discord.py
  sleeps out a 429 and sends again) lands after another worker may have taken over. Stopping a
  stream cancels its call in flight, except a draft's post when the generation ended, was
  superseded or its commit is coming: that post runs on to its fence (`DraftPosts`), so whoever
  here uses the draft next awaits its answer instead of a lease TTL.
- Streaming is a courtesy on top of delivery: a failing platform call stops the stream (logged),
  never the burst.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from bot.core.burst import Burst
from bot.core.clock import Clock, cancel_all, first_of, trusted_until
from bot.core.draft_lookup import DraftPosts, locate_draft
from bot.core.errors import BurstbotError, MessageGone, RetryableDeliveryError
from bot.core.events import Draft
from bot.core.frontend import DraftSurface, Frontend, draft_turn, drafts_of, paces
from bot.core.replier import GenerationProgress, same_draft
from bot.core.settings import EngineSettings
from bot.core.speculation import Window
from bot.core.store import DraftStore
from bot.core.supervisor import Supervision

log = logging.getLogger("burstbot.streaming")

WAITING = "…"  # what a draft shows while newer messages are read (a superseded generation)
T = TypeVar("T")


def new_draft(now: float, reply_to: str | None) -> Draft:
    """A draft not posted yet: a fresh key (21 characters: a Discord nonce), created `now`."""
    return Draft("d" + secrets.token_hex(10), None, now, reply_to)


class Drafts:
    """Starts a stream for each generation where the conversation streams and its front end can
    draft; deletes the draft of a burst that ends without a reply."""

    def __init__(
        self,
        store: DraftStore,
        clock: Clock,
        settings: Callable[[], EngineSettings],
        frontends: Mapping[str, Frontend],
        waiting: Callable[[str], Awaitable[bool]],
        posts: DraftPosts,
        announce: Callable[..., None] = lambda name, /, **fields: None,
    ) -> None:
        self.store = store
        self.announce = announce  # `draft_call`: each post and edit of a draft, for traces
        self.clock = clock
        self._settings = settings  # read at each use: a reload replaces them
        self.frontends = frontends
        self.waiting = waiting  # a reply of the conversation is still to be posted (the outbox)
        self.posts = posts  # this process's draft posts (shared with the outbox)

    @property
    def settings(self) -> EngineSettings:
        return self._settings()

    def surface(self, platform: str) -> DraftSurface | None:
        frontend = self.frontends.get(platform)
        return None if frontend is None else drafts_of(frontend)

    def follow(
        self,
        burst: Burst,
        usage: GenerationProgress,
        generation: asyncio.Future[str],
        window: Window,
    ) -> Stream:
        """A stream of `generation`, showing nothing before its burst's `window` closes."""
        surface = self.surface(burst.key.platform)
        if surface is None or not self.settings.streams(burst.key):
            return NotStreamed()
        return DraftStream(self, surface, burst, usage, generation, window)

    async def discard(self, burst: Burst) -> None:
        """Delete the draft of a burst that ends without a reply (before its commit). One that
        cannot be deleted now stays recorded: the conversation's next burst reuses it."""
        cid, token = burst.lease.conversation_id, burst.lease.token
        surface = self.surface(burst.key.platform)
        draft = await self.store.draft(cid)
        if surface is None or draft is None:
            return
        ttl = self.settings.lease_ttl_seconds
        try:
            message_id = await locate_draft(surface, burst.key, draft, self.clock, ttl, self.posts)
            if message_id is None and draft.message_id is None and surface.nonce_window:
                message_id = await surface.post_draft(burst.key, draft, WAITING)
            if message_id is not None:
                await surface.delete_draft(burst.key, message_id)
        except BurstbotError as exc:
            log.warning("conversation %s: could not delete the draft (%s); kept", cid, exc)
            return
        await self.store.drop_draft(cid, token, draft.key)


class Stream:
    """What the engine sees of a stream: lease renewals go in, the watch's outcome ends it."""

    def renewed(self, expires_at: float) -> None:
        return None

    async def stop(self, outcome: Supervision) -> None:
        return None

    async def still_reading(self) -> None:
        """The generation will not be the reply after all (its commit was discarded)."""
        return None

    def abort(self) -> None:
        """Cancelled (shutdown): stop at once, leaving the draft to whoever answers next."""
        return None


class NotStreamed(Stream):
    """The conversation does not stream: its reply is posted once complete."""


class FenceEnded(Exception):
    """The lease may have moved on: a stream's platform call was cancelled."""


class NoBudget(Exception):
    """The platform's budget has no token to spare for this draft call now: skipped."""


class DraftStream(Stream):
    def __init__(
        self,
        drafts: Drafts,
        surface: DraftSurface,
        burst: Burst,
        usage: GenerationProgress,
        generation: asyncio.Future[str],
        window: Window,
    ) -> None:
        self.drafts = drafts
        self.window = window
        self.store = drafts.store
        self.surface = surface
        self.burst = burst
        self.usage = usage
        self.generation = generation
        self.clock = drafts.clock
        self.ttl = drafts.settings.lease_ttl_seconds
        self.interval = drafts.settings.streaming_interval_seconds
        self.valid_until = trusted_until(self.clock, burst.lease.expires_at, self.ttl)
        self.draft: Draft | None = None  # once this stream knows the draft's message
        self._posting: asyncio.Task[str] | None = None  # its draft's post, once made
        self.replaced = False  # a fresh post replaced a draft a person deleted (once a stream)
        self.next_call_at = self.clock.now()  # the first word is shown at once
        self.calls = 0
        self._stopping = asyncio.Event()
        self._task = asyncio.ensure_future(self._run())

    def renewed(self, expires_at: float) -> None:
        self.valid_until = trusted_until(self.clock, expires_at, self.ttl)

    def _fenced(self) -> bool:
        return self.clock.monotonic() < self.valid_until

    def _fence_ends_at(self) -> float:
        """The fence's end on `clock.now()`'s scale, which the stream sleeps on."""
        return self.clock.now() + (self.valid_until - self.clock.monotonic())

    def abort(self) -> None:
        self._halt()
        if self._posting is not None:
            self._posting.cancel()

    def _halt(self) -> None:
        self._stopping.set()
        self._task.cancel()

    async def stop(self, outcome: Supervision) -> None:
        """The watch ended: cancel a call in flight (the lease is no longer renewed), but a
        draft's post, which runs on to its fence unless the lease was lost (whoever uses the
        draft next here awaits it); keep the interval before the next call (the reply's final
        edit follows), within the fence; leave a superseded or failed generation's draft saying
        that the bot is still reading."""
        self._halt()
        await asyncio.gather(self._task, return_exceptions=True)
        if outcome is Supervision.LEASE_LOST and self._posting is not None:
            self._posting.cancel()
        if outcome is Supervision.LEASE_LOST or self.calls == 0:
            return
        done = outcome is Supervision.DONE and not self.generation.cancelled()
        if not (done and self.generation.exception() is None and paces(self.surface)):
            # a surface that paces puts the final edit first; others keep the interval
            await self.clock.sleep_until(min(self.next_call_at, self._fence_ends_at()))
        failed = outcome is Supervision.DONE and (
            self.generation.cancelled() or self.generation.exception() is not None
        )
        if outcome is Supervision.SUPERSEDED or failed:
            await self.still_reading()

    async def still_reading(self) -> None:
        draft = self.draft or await self.store.draft(self.burst.key.id)
        if draft is None or draft.message_id is None:
            return
        if self.next_call_at >= self._fence_ends_at():
            return  # no room for another call inside the fence: the next generation edits it
        await self.clock.sleep_until(self.next_call_at)
        self.next_call_at = self.clock.now() + self.interval
        try:
            if not await self._within_fence(draft_turn(self.surface, self.burst.key, False)):
                return  # no budget now: the next generation edits it
            await self._within_fence(
                self.surface.edit_draft(self.burst.key, draft.message_id, WAITING)
            )
        except (BurstbotError, FenceEnded) as exc:
            log.info("conversation %s: draft not set to waiting (%s)", self.burst.key.id, exc)

    async def _within_fence(self, call: Awaitable[T], named: str | None = None) -> T:
        """Await a platform call, cancelling it once the lease's fence ends (renewals move it).
        A call whose fence already ended (the process stalled while it slept) is not made.
        A `named` call (the draft's `post`, an `edit`) is announced once it ended, how long it
        took and how it ended (`draft_call`)."""
        if not self._fenced():
            if asyncio.iscoroutine(call):
                call.close()
            raise FenceEnded("the lease's fence ended before a draft call")
        task = asyncio.ensure_future(call)
        started, outcome = time.monotonic(), "done"
        try:
            while True:
                await first_of(task, self.clock.sleep_until(self._fence_ends_at()))
                if task.done():
                    return task.result()
                if not self._fenced():
                    raise FenceEnded("the lease's fence ended during a draft call")
        except BaseException as exc:
            outcome = "cancelled" if isinstance(exc, asyncio.CancelledError) else type(exc).__name__
            raise
        finally:
            if not task.done():
                await cancel_all([task])
            if named is not None:
                self.drafts.announce("draft_call", conversation=self.burst.key.id, call=named,
                                     platform=self.burst.key.platform, outcome=outcome,
                                     seconds=time.monotonic() - started)  # fmt: skip

    async def _run(self) -> None:
        window = self.window
        if window.speculative:
            opened = await self._window_closed(window.closed)
            if not opened or window.finished_early:
                return  # a generation done before the close is committed at once: no draft
        self.next_call_at = self.clock.now()  # at the close, the text so far shows at once
        shown, check_at = "", self.next_call_at + self.interval
        first_word = getattr(self.usage.streamed, "arrived", None)  # set by the first word
        while await self._pause_until(check_at, None if self.calls else first_word):
            text = self.usage.text_so_far()
            check_at = max(self.next_call_at, self.clock.now() + self.interval)
            if not text.strip() or same_draft(text, shown):
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
            except FenceEnded:
                return
            except NoBudget:
                continue  # skipped: the next call, an interval on, carries the newer text
            except Exception as exc:
                log.warning("conversation %s: streaming stopped (%s)", self.burst.key.id, exc)
                return
            self.next_call_at = check_at = self.clock.now() + self.interval
            if showing is None:
                return
            shown = showing

    async def _window_closed(self, closed: asyncio.Event) -> bool:
        """Wait for a speculation's window to close (G4: nothing shows before); False when the
        generation ended or the stream stopped first."""
        await first_of(closed.wait(), self._stopping.wait(), self.generation)
        return closed.is_set() and not (self._stopping.is_set() or self.generation.done())

    async def _pause_until(self, when: float, first_word: asyncio.Event | None = None) -> bool:
        """Sleep on the clock (or until the first word, while waiting for it); False once the
        generation ended or the stream is stopped."""
        waits: list[Awaitable[object]] = [
            self.clock.sleep_until(when),
            self._stopping.wait(),
            self.generation,
        ]
        if first_word is not None:
            waits.append(first_word.wait())
        await first_of(*waits)
        return not (self._stopping.is_set() or self.generation.done())

    async def _show(self, text: str) -> str | None:
        """Show the text so far; returns what was shown (the newest text: a turn may have
        waited), None once the stream should stop."""
        if self.draft is None or self.draft.message_id is None:
            return await self._open(text)
        if not await self._within_fence(draft_turn(self.surface, self.burst.key, False)):
            raise NoBudget("no budget for a draft edit now")
        text = self.usage.text_so_far() or text
        try:
            await self._within_fence(
                self.surface.edit_draft(self.burst.key, self.draft.message_id, text), "edit"
            )
        except MessageGone:
            return await self._replace(text)
        return text

    async def _replace(self, text: str) -> str | None:
        """A person deleted the draft: close its record and post a fresh one, once."""
        assert self.draft is not None
        cid, token = self.burst.key.id, self.burst.lease.token
        log.info("conversation %s: the draft was deleted; posting it anew", cid)
        closed = await self.store.drop_draft(cid, token, self.draft.key)
        self.draft = None
        if not closed or self.replaced:
            return None
        self.replaced = True
        return await self._open(text)

    async def _open(self, text: str) -> str | None:
        """The first call of this stream: the conversation's draft (found again if its post's
        outcome is unknown), or a new one."""
        store, key, token = self.store, self.burst.key, self.burst.lease.token
        draft = await store.draft(key.id)
        reused = draft is not None
        message_id: str | None = None
        turn_taken = False
        if draft is None:
            if await self.drafts.waiting(key.id):
                return None  # G9: a draft would show above a reply still to be posted
            if not await self._within_fence(draft_turn(self.surface, key, posting=True)):
                raise NoBudget("no budget for a new draft now")  # not recorded: none to find
            turn_taken = True
            draft = new_draft(self.clock.now(), self.burst.messages[-1].message_id)
            if not await store.record_draft(key.id, token, draft):
                return None
        else:
            located = locate_draft(
                self.surface, key, draft, self.clock, self.ttl, self.drafts.posts
            )
            message_id = await self._within_fence(located)
        if not self._fenced():
            return None
        if message_id is None:
            if not turn_taken and not await self._within_fence(draft_turn(self.surface, key, True)):
                raise NoBudget("no budget to post the draft now")
            text = self.usage.text_so_far() or text
            post = self._within_fence(self.surface.post_draft(key, draft, text), "post")
            self._posting = self.drafts.posts.start(draft.key, post)
            message_id = await asyncio.shield(self._posting)  # a stopped stream leaves it on
        self.draft = Draft(draft.key, message_id, draft.created_at, draft.reply_to)
        recorded = draft.message_id == message_id or await store.record_draft(
            key.id, token, self.draft
        )
        if not recorded:
            return None
        if reused:  # the message shows what an earlier generation (or post) left there
            return await self._show(text)
        return text
