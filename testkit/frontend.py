"""A recording front end: the platform side of an engine test or a benchmark, in memory.

`RecordingFrontend` records every raw post (one per part) and dedupes only the way a platform lets
an adapter: by reading back what is already shown. With `drafts=True` it streams too: a draft is
one raw post, its edits are recorded apart (`edits`), and `visible` shows what each message says
now.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.core.clock import Clock
from bot.core.errors import BurstbotError, MessageGone
from bot.core.events import ConversationKey, Draft, Reply
from bot.core.frontend import Drafting, Host


@dataclass(frozen=True)
class Post:
    """One raw post as the platform received it: one part of one reply."""

    reply_id: str
    key: ConversationKey
    text: str
    covers_to_version: int
    part: int = 0

    @property
    def message_id(self) -> str:
        return f"{self.reply_id}-p{self.part}"


@dataclass(frozen=True)
class Fault:
    """A platform call that fails: before it takes effect, or after (`landed`: the response was
    lost). A post fault names the part whose post fails: a later part fails between parts."""

    error: BurstbotError
    landed: bool = False
    part: int = 0


@dataclass(frozen=True)
class Edit:
    """One edit of a message (a draft growing, or finished by its reply), at `at` on the clock."""

    message_id: str
    text: str
    at: float


class RecordingFrontend(Drafting):
    """A front end over a platform that records every raw post and dedupes nothing by itself.

    It behaves like the real adapters over a platform like Slack, and never helps: a first attempt
    posts straight away; a later attempt (`reply.attempt > 1`) first reads back the parts of that
    reply the platform already shows and posts only the others. A part still in flight is not
    shown yet, so two deliveries of one reply at once both post it, as they would on Slack.
    Each message carries a label (a post's reply id, a draft's key) that the read-back and
    `find_draft` go by; the edit that finishes a draft relabels it as its reply's part 0, as
    Slack's `chat.update` with the reply's metadata does, so a later attempt reads it back as the
    reply's own and a look-up by the draft's key no longer finds it.

    `parts` splits each reply into that many posts; `post_seconds` makes every post take that long
    on `clock` (a slow platform); `failures` are raised by the next calls, in order (a
    `RetryableDeliveryError` with `retry_after` is a 429 with Retry-After), before they post
    anything. `post_faults` fail the next raw posts (of the part each names, so a later part fails
    between parts), `final_edit_faults` the next edits that finish a draft; a `Fault` that
    `landed` takes effect on the platform first, and the call raises all the same (the response
    was lost). `person_deletes` is someone deleting one of the bot's messages.
    """

    def __init__(
        self,
        platform: str = "test",
        *,
        parts: int = 1,
        post_seconds: float = 0.0,
        clock: Clock | None = None,
        drafts: bool = False,
    ) -> None:
        self.platform = platform
        self.drafts = self if drafts else None
        self.edits: list[Edit] = []
        self.edit_failures: list[BurstbotError] = []
        self.shown: dict[str, str] = {}  # message id -> its text now, once edited
        self.labels: dict[str, str] = {}  # message id -> the reply a final edit relabelled it to
        self.deleted: set[str] = set()
        self.parts = parts
        self.post_seconds = post_seconds
        self.clock = clock
        self.posts: list[Post] = []
        self.attempts: list[str] = []
        self.busy: dict[ConversationKey, bool] = {}
        self.failures: list[BurstbotError] = []
        self.post_faults: list[Fault] = []
        self.final_edit_faults: list[Fault] = []
        self.deleted_by_people: set[str] = set()
        self.cards: dict[str, str] = {}  # message id -> what its Approve and Deny buttons name
        self.host: Host | None = None

    async def start(self, host: Host) -> None:
        self.host = host

    async def stop(self) -> None:
        self.host = None

    async def deliver(self, reply: Reply) -> list[str]:
        self.attempts.append(reply.id)
        if self.failures:
            raise self.failures.pop(0)
        if reply.ends_card is not None:  # an approval card's ending: an edit, safe to repeat
            reply.fence.check()
            try:
                await self.edit_draft(reply.key, reply.ends_card, reply.text)
            except MessageGone:  # someone deleted the card: the ending is a message of its own
                return [self._post(Post(reply.id, reply.key, reply.text, 0))]
            return [reply.ends_card]
        if reply.card is not None:
            self.cards[f"{reply.id}-p0"] = reply.card
        mine = [p for p in self.posts if self.label(p) == reply.id]
        shown = {p.part for p in mine} if reply.attempt > 1 else set()
        ids = []
        for part, text in enumerate(split_evenly(reply.text, self.parts)):
            if part == 0 and reply.draft is not None and part not in shown:
                reply.fence.check()
                ids.append(await self._finish_draft(reply, reply.draft, text))
                await reply.fence.posted(part, ids[-1])
                continue
            if part not in shown:
                reply.fence.check()
                if self.post_seconds and self.clock is not None:
                    await self.clock.sleep(self.post_seconds)
                self._post(Post(reply.id, reply.key, text, reply.covers_to_version, part))
                await reply.fence.posted(part, f"{reply.id}-p{part}")
            ids.append(f"{reply.id}-p{part}")
        return ids

    def _post(self, post: Post) -> str:
        """One raw post, unless the next post fault (for this part) fails it."""
        fault = self.post_faults[0] if self.post_faults else None
        if fault is None or fault.part != post.part:
            self.posts.append(post)
            return post.message_id
        self.post_faults.pop(0)
        if fault.landed:
            self.posts.append(post)
        raise fault.error

    async def _finish_draft(self, reply: Reply, draft: Draft, text: str) -> str:
        """The draft's message (posted first if the outbox found it never landed), edited to the
        reply's first part; a deleted draft is replaced by a fresh post of the part."""
        message_id = draft.message_id or await self.post_draft(reply.key, draft, text)
        try:
            if self.final_edit_faults:
                fault = self.final_edit_faults.pop(0)
                if fault.landed:
                    await self._final_edit(reply, message_id, text)
                raise fault.error
            await self._final_edit(reply, message_id, text)
        except MessageGone:
            return self._post(Post(reply.id, reply.key, text, reply.covers_to_version, 0))
        return message_id

    async def _final_edit(self, reply: Reply, message_id: str, text: str) -> None:
        """The draft's message edited to the reply's first part and labelled as that part."""
        await self.edit_draft(reply.key, message_id, text)
        self.labels[message_id] = reply.id

    def label(self, post: Post) -> str:
        """Whose message a read-back takes `post` for: its reply's, or its draft's key until the
        reply that finishes it relabels it."""
        return self.labels.get(post.message_id, post.reply_id)

    nonce_window = 0.0  # like Slack: a repeated post is a second message

    async def post_draft(self, key: ConversationKey, draft: Draft, text: str) -> str:
        return self._post(Post(draft.key, key, text, 0))

    async def find_draft(self, key: ConversationKey, draft: Draft) -> str | None:
        found = [p.message_id for p in self.posts if self.label(p) == draft.key]
        return next((m for m in found if m not in self.deleted), None)

    async def edit_draft(self, key: ConversationKey, message_id: str, text: str) -> None:
        if self.edit_failures:
            raise self.edit_failures.pop(0)
        if message_id in self.deleted:
            raise MessageGone(f"message {message_id}: deleted")
        self.edits.append(Edit(message_id, text, self.clock.now() if self.clock else 0.0))
        self.shown[message_id] = text

    async def delete_draft(self, key: ConversationKey, message_id: str) -> None:
        self.deleted.add(message_id)

    def person_deletes(self, message_id: str) -> None:
        """Someone deletes one of the bot's messages (a draft, or a part of a reply)."""
        self.deleted.add(message_id)
        self.deleted_by_people.add(message_id)

    def visible(self, key: ConversationKey | None = None) -> list[str]:
        """What the conversation shows now: each message (post or draft) with its latest text."""
        return [
            self.shown.get(p.message_id, p.text)
            for p in self.posts
            if (key is None or p.key == key) and p.message_id not in self.deleted
        ]

    async def show_busy(self, key: ConversationKey, busy: bool, message_id: str) -> None:
        self.busy[key] = busy

    def post_text(self, key: ConversationKey, text: str) -> str:
        """One raw post by a bot with no outbox (a benchmark's baseline): a reply of its own."""
        return self._post(Post(f"direct-{len(self.posts)}", key, text, 0))

    def texts(self, key: ConversationKey | None = None) -> list[str]:
        return [p.text for p in self.posts if key is None or p.key == key]

    def replies(self) -> dict[str, list[int]]:
        """Raw posts grouped by reply id: the parts each reply was posted as, in posting order."""
        grouped: dict[str, list[int]] = {}
        for post in self.posts:
            grouped.setdefault(post.reply_id, []).append(post.part)
        return grouped


def split_evenly(text: str, parts: int) -> list[str]:
    if parts <= 1:
        return [text]
    size = -(-len(text) // parts) or 1
    return [text[i * size : (i + 1) * size] for i in range(parts)]
