"""Where a draft's message is (G10), when the record holds its key but no message id.

A draft's post outcome is unknown after a timeout, a lost response, a crash, or a stream that
stopped while its post was on its way. Before anything new is posted the draft is found:

- from this process's own post of it (`DraftPosts`): still on its way, it is awaited, so the
  reply committed while its draft's post was in flight (or the next generation after a
  supersede) waits for that post's answer, not for a lease TTL;
- else, within the platform's nonce window, by posting it again with its key (the platform
  returns the earlier message);
- else by a look-up by its key from its creation; a post in flight does not show in a read, so
  absence counts as proven only a lease TTL after the draft's creation, and until then the
  caller is told to retry (`RetryableDeliveryError`).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from bot.core.clock import Clock, cancel_all
from bot.core.errors import RetryableDeliveryError
from bot.core.events import ConversationKey, Draft
from bot.core.frontend import DraftSurface

REMEMBERED_POSTS = 256  # landed draft posts whose message id a process keeps for a late look-up


@dataclass(eq=False)
class DraftPosts:
    """This process's draft posts, by draft key: those on their way, and the message ids of the
    latest that landed (a stream stopped between a post's answer and its record)."""

    _on_the_way: dict[str, asyncio.Task[str]] = field(default_factory=dict)
    _landed: OrderedDict[str, str] = field(default_factory=OrderedDict)

    def start(self, draft_key: str, post: Coroutine[Any, Any, str]) -> asyncio.Task[str]:
        """Run `post` (the draft's post, bounded by its stream's fence) as a task of its own,
        which a stopped stream leaves running."""
        task = asyncio.ensure_future(post)
        self._on_the_way[draft_key] = task
        task.add_done_callback(lambda done: self._ended(draft_key, done))
        return task

    def _ended(self, draft_key: str, task: asyncio.Task[str]) -> None:
        if self._on_the_way.get(draft_key) is task:
            del self._on_the_way[draft_key]
        if task.cancelled() or task.exception() is not None:
            return  # the stream that started it logs its failure; its outcome stays unknown
        self._landed[draft_key] = task.result()
        while len(self._landed) > REMEMBERED_POSTS:
            self._landed.popitem(last=False)

    async def cancel(self) -> None:
        """Stop every post still on its way (shutdown): its outcome stays unknown, for the
        look-up of whoever takes the draft over."""
        await cancel_all(self._on_the_way.values())

    async def outcome(self, draft_key: str) -> str | None:
        """The message this process's post of the draft made, awaited while it is on its way
        (the caller's cancellation leaves the post alone); None when no post of it is known
        here or it failed (its outcome stays unknown)."""
        task = self._on_the_way.get(draft_key)
        if task is None:
            return self._landed.get(draft_key)
        await asyncio.wait({task})
        if task.cancelled() or task.exception() is not None:
            return None
        return task.result()


async def locate_draft(
    surface: DraftSurface,
    key: ConversationKey,
    draft: Draft,
    clock: Clock,
    settle: float,
    posts: DraftPosts,
) -> str | None:
    """The message of a draft whose post outcome is unknown, or None when posting it (again, with
    its key) cannot make a second one: within the platform's nonce window, or once a look-up by
    its key proves it absent. Raises `RetryableDeliveryError` while an earlier post of it may
    still land unseen (until `settle` seconds after its creation)."""
    if draft.message_id is not None:
        return draft.message_id
    ours = await posts.outcome(draft.key)
    if ours is not None:
        return ours
    now = clock.now()  # read after any wait for our own post
    if now < draft.created_at + surface.nonce_window:
        return None
    found = await surface.find_draft(key, draft)
    if found is not None:
        return found
    if now < draft.created_at + settle:
        wait = draft.created_at + settle - now
        raise RetryableDeliveryError(f"draft {draft.key}: its post may still land", wait)
    return None
