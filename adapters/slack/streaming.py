"""Slack drafts (the core's `DraftSurface`): `chat.postMessage` once, then `chat.update`.

The draft is posted with message `metadata` naming its key (as reply parts name their reply), so a
post whose response was lost is found by reading the conversation back, from the draft's creation,
before posting again. The reply that finishes a draft updates it to its first part and re-labels
its metadata with the reply's id, so a re-delivery of that reply finds part 0 like any posted part
(looking from the draft's creation, which may be older than the message the reply answers). How
draft calls share the workspace's budget is docs/streaming-limits.md's (`draft_turn`).

`chat.update` is the path every workspace supports (threads, channels, DMs). Such a draft shows
a Stop button under its text, and the reply that finishes it removes the button (stop_button.py);
where a thread's agent session shows Slack's own Stop (agent_sessions.py) the draft has none.
In assistant threads (`native`) a draft is Slack's native stream instead while its text only
grows: native_stream.py says how each of the rules above is kept there (no button: stopping an
assistant thread's answer is Slack's own control there). Its steps show as tasks, chunks while
it streams and task cards in every update after (and in the answer that finishes it): an update
without steps sets no blocks, so a superseded generation's cards never stay.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from adapters.markdown import settle_partial
from adapters.showing import Showing, paced_turn
from adapters.slack.calls import call, slack_code
from adapters.slack.feedback import feedback_blocks, shows_feedback
from adapters.slack.inbound import split_message_id
from adapters.slack.mrkdwn import split_mrkdwn, to_mrkdwn
from adapters.slack.native_stream import (
    NativeStreams,
    StreamsUnavailable,
    TaskDisplay,
    task_blocks,
    text_sections,
)
from adapters.slack.outbound import (
    CLOCK_MARGIN,
    POST,
    UPDATE,
    Outbound,
    conversation,
    part_metadata,
)
from adapters.slack.stop_button import draft_blocks, shows_stop, stop_value
from bot.core.errors import DeliveryError, MessageGone, RetryableDeliveryError
from bot.core.events import ConversationKey, Draft, Reply
from bot.core.frontend import PacedDrafts
from bot.core.replier import DraftText, SearchStep

log = logging.getLogger("burstbot.slack")

GONE = frozenset({"message_not_found", "cant_delete_message"})  # a delete with nothing to do
REMEMBERED_DRAFTS = 1_000  # drafts whose Stop button value a process remembers


def native_parts(text: str) -> tuple[str, tuple[SearchStep, ...]]:
    """What a native stream shows of a draft's text: while it names steps (searches, tool calls,
    approvals), the text alone and the steps (tasks, not the activity line); else the text as
    every draft shows it."""
    if isinstance(text, DraftText) and text.steps:
        return text.body, text.steps
    return text, ()


class SlackDrafts(PacedDrafts):
    nonce_window = 0.0  # Slack never dedupes a post: a draft is found by its metadata

    def __init__(
        self,
        outbound: Outbound,
        native: Callable[[ConversationKey], Awaitable[bool]] | None = None,
        session_stops: Callable[[ConversationKey], bool] = lambda key: False,
        streams: NativeStreams | None = None,
    ) -> None:
        self.outbound = outbound
        self.client = outbound.client
        self._native = native  # where drafts are native streams (assistant threads)
        self._session_stops = session_stops  # where Slack's agent session shows the Stop
        self.streams = streams or NativeStreams(outbound.client, outbound.identity)
        self._steps: OrderedDict[str, tuple[SearchStep, ...]] = OrderedDict()  # shown, by message
        self._labels: dict[str, str] = {}  # a native draft's message id → the draft's key
        self.showing = Showing()  # what each message we posted or updated shows now
        self.native_refused = ""  # Slack's reason, once it refused to start a stream
        self._stops: OrderedDict[str, str] = OrderedDict()  # a draft message → its button's value
        self._buttoned: set[str] = set()  # messages our last post or update gave the button
        self._blocks: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()  # as last sent

    async def native(self, key: ConversationKey) -> bool:
        if self.native_refused or self._native is None or not key.thread:
            return False
        return await self._native(key)

    async def task_display(self, key: ConversationKey) -> TaskDisplay | None:
        """How the conversation shows the model's steps as tasks (`[slack] task_display`); None
        where it shows none (its drafts are not native streams)."""
        return self.streams.display if await self.native(key) else None

    def draft_text(self, text: str) -> str:
        """What a draft shows of the text so far: rendered whole, one part's worth."""
        parts = split_mrkdwn(to_mrkdwn(settle_partial(text)))
        return parts[0] if parts and parts[0].strip() else "…"

    async def draft_turn(self, key: ConversationKey, posting: bool) -> bool:
        """Updates on the workspace's `chat.update` budget, posts on the channel's
        `chat.postMessage` one (as is a reply posted whole)."""
        update = (UPDATE, self.outbound.identity.team_id)
        return paced_turn(self.outbound.pacer, posting, update, (POST, key.channel))

    async def post_draft(self, key: ConversationKey, draft: Draft, text: str) -> str:
        """The stream took this post's turn (`draft_turn`); a post from elsewhere takes its own."""
        if await self.native(key):
            try:
                message_id = await self.streams.start(key, *native_parts(text))
            except StreamsUnavailable as refused:  # Slack answered: nothing was posted
                self.native_refused = str(refused)
                log.warning("slack: chat.startStream refused (%s): drafts are posted and updated "
                            "instead", refused)  # fmt: skip
            else:
                self._labels[message_id] = draft.key
                self._note_steps(message_id, native_parts(text)[1])
                return message_id
        return await self._post(key, draft, text)

    async def _post(self, key: ConversationKey, draft: Draft, text: str, taken: bool = True) -> str:
        metadata, shown = part_metadata(draft.key, 0, key), self.draft_text(text)
        what, value = f"draft {draft.key}", stop_value(draft.key, key)
        button = not self._session_stops(key)
        blocks = draft_blocks(shown, value) if button else None
        message_id = await self.outbound.post(key, shown, metadata, what, taken, blocks)
        self.showing.note(message_id, shown, metadata)
        self._remember_stop(message_id, value)
        if button:
            self._buttoned.add(message_id)
            self._note_blocks(message_id, blocks or [])
        return message_id

    def _remember_stop(self, message_id: str, value: str) -> None:
        self._stops[message_id] = value
        self._stops.move_to_end(message_id)
        while len(self._stops) > REMEMBERED_DRAFTS:
            self._stops.popitem(last=False)

    async def _stop_value(self, key: ConversationKey, message_id: str) -> str:
        """The Stop button's value for a draft message: known here since its post, or read
        from its metadata (a draft another process posted: its label is the draft's key)."""
        value = self._stops.get(message_id)
        if value is not None:
            return value
        message = await self._read_back(key, message_id, quiet=False)
        if message is None:
            raise MessageGone(f"draft {message_id}: not found")
        payload = (message.get("metadata") or {}).get("event_payload") or {}
        if not isinstance(payload.get("reply_id"), str):
            raise RetryableDeliveryError(f"draft {message_id}: cannot tell which draft it is")
        value = stop_value(payload["reply_id"], key)
        self._remember_stop(message_id, value)
        return value

    async def find_draft(self, key: ConversationKey, draft: Draft) -> str | None:
        """The draft's message, if a post of it shows: read back by its metadata from its
        creation (not from the burst's newest message, which may be younger than the draft);
        in an assistant thread also a native stream still running (it has no metadata yet)."""
        oldest = f"{max(0.0, draft.created_at - CLOCK_MARGIN):.6f}"
        probe = Reply(draft.key, key, "", 0, attempt=2)
        found = (await self.outbound.posted_parts(probe, oldest)).get(0)
        if found is None and await self.native(key):
            found = await self.streams.find_unlabelled(key, oldest)
            if found is not None:
                log.info("draft %s: found its stream %s", draft.key, found)
                self._labels[found] = draft.key
        return found

    async def edit_draft(self, key: ConversationKey, message_id: str, text: str) -> None:
        """Append to the draft's native stream while the text grows it (steps go as task
        chunks, so a search does not end the stream); else (a stream that ended or is older
        than `stream_max_seconds`, another generation's text, the waiting mark) stop it and
        update the message, the steps as task cards. The stream took this call's turn on the
        budget (`draft_turn`)."""
        if await self.native(key):
            body, steps = native_parts(text)
            self._note_steps(message_id, steps)
            if self.streams.extends(message_id, body) and await self.streams.grow(
                message_id, body, steps
            ):
                return
            await self._stop(key, message_id)
            label = self._labels.get(message_id)
            metadata = None if label is None else part_metadata(label, 0, key)
            shown = self.draft_text(body if steps else text)
            # the steps as task cards above the text; none (another generation's text, the
            # waiting mark) takes every earlier card off the message
            await self._update(message_id, shown, metadata, blocks=self._step_blocks(steps, shown))
            return
        shown = self.draft_text(text)
        if self._session_stops(key):  # Slack's session shows the Stop: none of ours
            await self._update(message_id, shown, blocks=[])
            return
        blocks = draft_blocks(shown, await self._stop_value(key, message_id))
        await self._update(message_id, shown, blocks=blocks)

    async def _stop(self, key: ConversationKey, message_id: str) -> None:
        """Stop the message's native stream if it may run, labelled with its draft's key."""
        label = self._labels.get(message_id)
        metadata = None if label is None else part_metadata(label, 0, key)
        self.showing.forget(message_id)  # a stream's text is not what an update sent
        await self.streams.stop(message_id, metadata)

    async def delete_draft(self, key: ConversationKey, message_id: str) -> None:
        channel, ts = split_message_id(message_id)
        try:
            if await self.native(key):
                await self._stop(key, message_id)
        except MessageGone:
            return
        try:
            await call(f"message {message_id}: delete", self.client.chat_delete(channel=channel,
                                                                                ts=ts))  # fmt: skip
            self._forget(message_id)
            self._buttoned.discard(message_id)
            self._settle()
        except DeliveryError as exc:
            if slack_code(exc) not in GONE:
                raise

    async def finish(self, reply: Reply, text: str, buttons: bool = False) -> str:
        """The reply's first part, shown by updating the draft it finishes (posted first if the
        outbox found that it never landed), then read back: a late edit of a generation that
        lost its lease may have overwritten it. A draft a person deleted is replaced by a fresh
        post of the part, labelled with the reply's id like any part (found on a retry). The
        Stop button goes; with `buttons` (the answer's last part) the 👍/👎 buttons come."""
        assert reply.draft is not None
        draft, metadata = reply.draft, part_metadata(reply.id, 0, reply.key)
        blocks = feedback_blocks(text, reply.id, reply.key) if buttons else []
        steps = self.final_steps(draft.message_id) if draft.message_id else ()
        if steps:  # the answer keeps its thinking steps above its text
            cards = task_blocks(steps, self.streams.display)
            blocks = cards + (blocks or text_sections(text))
        message_id = draft.message_id or await self._post(reply.key, draft, text, taken=False)
        try:
            # the final text is the update's, not the stream's: a stream still running stops
            if draft.message_id is not None and await self.native(reply.key):
                self._labels.setdefault(message_id, draft.key)
                await self._stop(reply.key, message_id)
            self._forget(message_id)
            if blocks:
                self._buttoned.discard(message_id)  # its blocks change: the update is sent
            stored = await self._update(message_id, text, metadata, taken=False, blocks=blocks)
            self._settle()
            message = await self._read_back(reply.key, message_id)
            if message is not None and (
                message.get("text") != stored
                or shows_stop(message)
                or shows_feedback(message) != buttons
            ):
                log.warning("reply %s: a stale draft edit landed after the final text; restored",
                            reply.id)  # fmt: skip
                self.showing.forget(message_id)  # it shows something else: update it
                (self._buttoned.discard if blocks else self._buttoned.add)(message_id)
                await self._update(message_id, text, metadata, taken=False, blocks=blocks)
        except MessageGone:
            log.info("reply %s: its draft was deleted; posting the reply anew", reply.id)
            what = f"reply {reply.id} part 0"
            return await self.outbound.post(reply.key, text, metadata, what, blocks=blocks or None)
        return message_id

    def _forget(self, message_id: str) -> None:
        """The draft message is finished or deleted: no more edits of it as a draft."""
        self._labels.pop(message_id, None)
        self._stops.pop(message_id, None)
        self._steps.pop(message_id, None)

    def _note_steps(self, message_id: str, steps: tuple[SearchStep, ...]) -> None:
        self._steps[message_id] = steps
        self._steps.move_to_end(message_id)
        while len(self._steps) > REMEMBERED_DRAFTS:
            self._steps.popitem(last=False)

    def _step_blocks(self, steps: tuple[SearchStep, ...], text: str) -> list[dict[str, Any]]:
        """A message's blocks once it no longer streams: its steps' task cards, then its text;
        [] without steps (which removes any card a stream left)."""
        if not steps:
            return []
        return task_blocks(steps, self.streams.display) + text_sections(text)

    def final_steps(self, message_id: str) -> tuple[SearchStep, ...]:
        """The steps the draft showed last, as the answer keeps them: its generation is over,
        so a step still shown running has ended (its outcome was not seen: shown done)."""
        return tuple(replace(step, state="done") if step.state == "running" else step
                     for step in self._steps.get(message_id, ()))  # fmt: skip

    def _settle(self) -> None:
        """A draft's final update was made (or the draft deleted): it owes the budget nothing."""
        self.outbound.pacer.settle(UPDATE, self.outbound.identity.team_id)

    async def _update(
        self,
        message_id: str,
        text: str,
        metadata: dict[str, Any] | None = None,
        taken: bool = True,
        blocks: list[dict[str, Any]] | None = None,
    ) -> str:
        """Update one message of ours (after its turn on the budget, unless `taken` already: the
        stream's `draft_turn`); returns its text as Slack stored it. An update that would change
        nothing (the text, metadata and Stop button it shows since our last call) is not sent.
        `blocks`: a draft's (with the button), [] to remove them, None to leave them."""
        team = self.outbound.identity.team_id
        button_changes = blocks is not None and (
            (message_id in self._buttoned) != bool(blocks)
            or (bool(blocks) and self._blocks.get(message_id) != blocks)
        )
        unchanged = None if button_changes else self.showing.unchanged(message_id, text, metadata)
        if unchanged is not None:
            if taken:  # the stream took a token for it: give it back
                self.outbound.pacer.refund(UPDATE, team)
            return unchanged
        channel, ts = split_message_id(message_id)
        if not taken:
            await self.outbound.pacer.take(UPDATE, team)
        what = f"message {message_id}: update"
        request = self.client.chat_update(
            channel=channel, ts=ts, text=text, metadata=metadata, blocks=blocks
        )
        try:
            response = await self.outbound.paced(UPDATE, team, what, request)
        except MessageGone:
            self.showing.forget(message_id)
            self._settle()  # a deleted draft owes no final update
            raise
        stored = str(response.get("text", text))
        self.showing.note(message_id, text, metadata, stored)
        if blocks is not None:
            (self._buttoned.add if blocks else self._buttoned.discard)(message_id)
            self._note_blocks(message_id, blocks)
        return stored

    def _note_blocks(self, message_id: str, blocks: list[dict[str, Any]]) -> None:
        """The blocks our last post or update of the message gave it."""
        self._blocks[message_id] = blocks
        self._blocks.move_to_end(message_id)
        while len(self._blocks) > REMEMBERED_DRAFTS:
            self._blocks.popitem(last=False)

    async def _read_back(
        self, key: ConversationKey, message_id: str, quiet: bool = True
    ) -> Mapping[str, Any] | None:
        """A message of ours as it shows now, with its metadata (None: not there, or, `quiet`,
        it cannot be read back; not `quiet`, a failed read raises)."""
        channel, ts = split_message_id(message_id)
        what = f"message {message_id}: reading it back"
        window: dict[str, Any] = {"oldest": ts, "latest": ts, "inclusive": True, "limit": 1}
        try:
            async for message in conversation(self.client, what, channel, key.thread, 1, **window):
                if message.get("ts") == ts:
                    return message
        except DeliveryError as exc:
            if not quiet:
                raise
            log.info("%s failed (%s)", what, exc)
        return None
