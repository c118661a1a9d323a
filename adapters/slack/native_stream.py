"""Slack's native streams (`chat.startStream` / `appendStream` / `stopStream`) for the drafts of
assistant threads, kept to the one-visible-message-per-burst rules of every draft; how each rule
is kept is docs/slack-assistant.md's "Native streaming". In short: a stream only grows (by the
settled prefix of the model's markdown; other text stops it, and the message is updated from
then on), it carries no metadata until it stops (a running one is found as the bot's unlabelled
message in the thread), stopping labels it with the draft's key, and the final text is never the
stream's. `message_not_in_streaming_state` (a message not streaming, or no longer) is no
error. The model's steps (searches, tool calls, approvals) are task chunks while the message
streams and task cards once it is updated (docs/slack-assistant.md's "Thinking steps"); a
stream is stopped before Slack's own limit on its age (its "Long answers").
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from slack_sdk.models.blocks import (
    PlanBlock,
    RichTextBlock,
    RichTextElementParts,
    RichTextSectionElement,
    TaskCardBlock,
)
from slack_sdk.models.blocks.block_elements import UrlSourceElement
from slack_sdk.models.messages.chunk import MarkdownTextChunk, PlanUpdateChunk, TaskUpdateChunk
from slack_sdk.web.async_client import AsyncWebClient

from adapters.markdown import settle_partial
from adapters.slack.calls import call, slack_code
from adapters.slack.inbound import Identity, split_message_id
from adapters.slack.mrkdwn import MAX_PART_CHARS, split_mrkdwn
from adapters.slack.outbound import conversation
from bot.core.errors import DeliveryError, MessageGone
from bot.core.events import ConversationKey
from bot.core.replier import SearchStep

log = logging.getLogger("burstbot.slack")

NOT_STREAMING = "message_not_in_streaming_state"
REMEMBERED = 512  # streams (and stopped messages) a process remembers
UNAVAILABLE = frozenset(
    {"unknown_method", "method_deprecated", "not_allowed_token_type", "missing_scope",
     "no_permission", "feature_not_enabled", "not_supported"}
)  # fmt: skip
"""`chat.startStream` refused for good: Slack answered, so nothing was posted."""


TASK_STATUS = {"running": "in_progress", "done": "complete", "failed": "error"}
TASK_TEXT_CHARS = 256  # a task's title, details and output, each
SECTION_CHARS = 3000  # Slack's limit on a section's text
PLAN_TITLE = "Working on it"  # the plan's title, with `task_display = "plan"`
TaskDisplay = Literal["timeline", "plan"]


class StreamsUnavailable(Exception):
    """The workspace refuses native streams; drafts go by post and update instead."""


def task_parts(step: SearchStep) -> tuple[str, str, list[UrlSourceElement]]:
    """A step's title, output and sources as its task shows them: a search's query then its
    sources or its error; a tool call's name then how it ended; an approval waited for, then
    whether the call was approved (or why it did not run)."""
    name = step.query.strip()
    output, sources = "", []
    if step.kind == "tool":
        title = f"Using {name}"
        output = {"running": "", "done": "done", "failed": step.error or "failed"}[step.state]
    elif step.kind == "approval":
        title = {"running": f"Waiting for approval: {name}", "done": f"Approved: {name}",
                 "failed": f"Not run: {name}"}[step.state]  # fmt: skip
        output = step.error if step.state == "failed" else ""
    else:
        title = f"Searching the web: {name}" if name else "Searching the web"
        if step.state == "done":
            output = f"{len(step.sources)} sources" if step.sources else "no results"
            sources = [UrlSourceElement(url=url, text=_cut(title_ or url))
                       for url, title_ in step.sources]  # fmt: skip
        elif step.state == "failed":
            output = f"search failed: {step.error or 'error'}"
    return _cut(title), _cut(output), sources


def task_chunk(step: SearchStep) -> dict[str, Any]:
    """A step as Slack's `task_update` chunk (slack_sdk's `TaskUpdateChunk`)."""
    title, output, sources = task_parts(step)
    chunk = TaskUpdateChunk(id=step.id, title=title, status=TASK_STATUS[step.state],
                            output=output or None, sources=sources or None)  # fmt: skip
    return chunk.to_dict()


def task_blocks(steps: tuple[SearchStep, ...], display: TaskDisplay) -> list[dict[str, Any]]:
    """The steps as blocks (`task_card`s, in a `plan` with `task_display = "plan"`): what an
    update shows of them once the message no longer streams."""
    cards = []
    for step in steps:
        title, output, sources = task_parts(step)
        cards.append(task_card(step.id, title, TASK_STATUS[step.state], output, sources))
    return laid_out(cards, display)


def task_card(
    task_id: str,
    title: str,
    status: str,
    output: str = "",
    sources: Sequence[UrlSourceElement] = (),
) -> TaskCardBlock:
    """One task as Slack's `task_card` block, its output (if any) as rich text; the title and
    output cut to a task's length."""
    rich = None
    if output:
        rich = RichTextBlock(elements=[RichTextSectionElement(
            elements=[RichTextElementParts.Text(text=_cut(output))])])  # fmt: skip
    return TaskCardBlock(task_id=task_id, title=_cut(title), status=status, output=rich,
                         sources=list(sources) or None)  # fmt: skip


def laid_out(cards: list[TaskCardBlock], display: TaskDisplay) -> list[dict[str, Any]]:
    """Task cards as `task_display` lays them out: each in line, or in one titled `plan`."""
    if not cards:
        return []
    if display == "plan":
        return [PlanBlock(title=PLAN_TITLE, tasks=cards).to_dict()]
    return [card.to_dict() for card in cards]


def text_sections(text: str) -> list[dict[str, Any]]:
    """The text as sections of Slack's size (shown under the task cards)."""
    return [{"type": "section", "text": {"type": "mrkdwn", "text": part}, "expand": True}
            for part in split_mrkdwn(text, SECTION_CHARS) if part.strip()]  # fmt: skip


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= TASK_TEXT_CHARS else text[: TASK_TEXT_CHARS - 1] + "…"


def settled_prefix(text: str) -> str:
    """The part of text still being written that will not change: what settling it keeps."""
    settled = settle_partial(text)
    common = min(len(text), len(settled))
    same = next((i for i in range(common) if text[i] != settled[i]), common)
    return text[:same].rstrip()


@dataclass(eq=False)
class NativeStreams:
    """The native streams of one workspace's drafts: what each stream this process started has
    been sent, when it started, and which messages are known to be stopped. A stream older than
    `max_age` seconds takes no more appends (Slack ends streams about five minutes after their
    start): the caller stops it and goes on by updating the message."""

    client: AsyncWebClient
    identity: Identity
    display: TaskDisplay = "timeline"
    max_age: float = 240.0
    now: Callable[[], float] = time.monotonic
    # message id → the text a running stream was sent, its steps as sent, its start; stopped ones
    _sent: OrderedDict[str, str] = field(default_factory=OrderedDict, init=False)
    _tasks: OrderedDict[str, dict[str, SearchStep]] = field(default_factory=OrderedDict, init=False)
    _started: OrderedDict[str, float] = field(default_factory=OrderedDict, init=False)
    _stopped: OrderedDict[str, None] = field(default_factory=OrderedDict, init=False)

    async def start(
        self, key: ConversationKey, text: str, steps: tuple[SearchStep, ...] = ()
    ) -> str:
        """`chat.startStream` in the thread with the settled text so far (and the steps as
        task chunks); the message id."""
        first = settled_prefix(text)[:MAX_PART_CHARS]  # a draft shows one part's worth
        args: dict[str, Any] = {"channel": key.channel, "thread_ts": key.thread,
                                "task_display_mode": self.display}  # fmt: skip
        if steps:
            args["chunks"] = self._chunks(first if first.strip() else "", steps, first=True)
        elif first.strip():
            args["markdown_text"] = first
        started = self.now()
        try:
            response = await call(f"conversation {key.id}: start stream",
                                  self.client.chat_startStream(**args))  # fmt: skip
        except DeliveryError as exc:
            if slack_code(exc) in UNAVAILABLE:
                raise StreamsUnavailable(slack_code(exc)) from exc
            raise
        message_id = f"{key.channel}:{response['ts']}"
        self._remember(self._sent, message_id, first if first.strip() else "")
        self._remember(self._tasks, message_id, {step.id: step for step in steps})
        self._remember(self._started, message_id, started)
        return message_id

    def _chunks(self, text: str, steps: Sequence[SearchStep], first: bool) -> list[dict[str, Any]]:
        """The text and the steps as chunks; a plan gets its title with its first tasks."""
        chunks = [MarkdownTextChunk(text=text).to_dict()] if text else []
        if first and self.display == "plan":
            chunks.append(PlanUpdateChunk(title=PLAN_TITLE).to_dict())
        return chunks + [task_chunk(step) for step in steps]

    def extends(self, message_id: str, text: str) -> bool:
        """Whether `text` grows what the stream was sent (so appending can show it)."""
        sent = self._sent.get(message_id)
        return sent is not None and text.startswith(sent)

    def aged(self, message_id: str) -> bool:
        """Whether the stream has run for `max_age`: it takes no more appends from us."""
        started = self._started.get(message_id)
        return started is not None and self.now() - started >= self.max_age

    async def grow(self, message_id: str, text: str, steps: tuple[SearchStep, ...] = ()) -> bool:
        """Append what `text` adds to the stream (the settled part, within one part's worth)
        and the steps that changed since they were sent; False when the stream has ended
        (Slack closed it, or it is older than `max_age`): the caller stops it and edits the
        message."""
        if self.aged(message_id):
            log.info("message %s: its stream is %.0f s old; editing it instead", message_id,
                     self.now() - self._started[message_id])  # fmt: skip
            return False
        sent, tasks = self._sent[message_id], self._tasks.get(message_id) or {}
        new = settled_prefix(text)[:MAX_PART_CHARS]
        changed = [step for step in steps if tasks.get(step.id) != step]
        if len(new) <= len(sent) or not new.startswith(sent):
            new = sent  # nothing settled to add yet: sent once the text moves past it
        if new == sent and not changed:
            return True
        channel, ts = split_message_id(message_id)
        suffix = new[len(sent) :]
        if changed:
            chunks = self._chunks(suffix, changed, first=not tasks)
            request = self.client.chat_appendStream(channel=channel, ts=ts, chunks=chunks)
        else:
            request = self.client.chat_appendStream(channel=channel, ts=ts, markdown_text=suffix)
        if not await self._on_stream(message_id, "append stream", request):
            log.info("message %s: Slack ended its stream; editing it instead", message_id)
            return False
        self._sent[message_id] = new
        if changed:
            tasks.update((step.id, step) for step in changed)
            self._remember(self._tasks, message_id, tasks)
        return True

    async def stop(self, message_id: str, metadata: dict[str, Any] | None) -> None:
        """Stop the message's stream if it may still run (labelled with `metadata`); one that is
        not streaming is no error. Raises `MessageGone` for a deleted message."""
        if message_id in self._stopped:
            return
        channel, ts = split_message_id(message_id)
        request = self.client.chat_stopStream(channel=channel, ts=ts, metadata=metadata)
        await self._on_stream(message_id, "stop stream", request)
        self._forget(message_id)

    async def _on_stream(self, message_id: str, what: str, request: Awaitable[Any]) -> bool:
        """A call on a running stream; False (and forgotten) when the message is not streaming.
        Raises `MessageGone` for a deleted message (forgotten too)."""
        try:
            await call(f"message {message_id}: {what}", request)
        except MessageGone:
            self._forget(message_id)
            raise
        except DeliveryError as exc:
            if slack_code(exc) != NOT_STREAMING:
                raise
            self._forget(message_id)
            return False
        return True

    async def find_unlabelled(self, key: ConversationKey, oldest: str) -> str | None:
        """The bot's first message in the thread after `oldest` that carries no metadata: a
        stream still running (every other message of ours is labelled)."""
        what = f"conversation {key.id}: looking for a stream"
        async for message in conversation(
            self.client, what, key.channel, key.thread, oldest=oldest
        ):
            if self._ours_unlabelled(message, key):
                return f"{key.channel}:{message['ts']}"
        return None

    def _ours_unlabelled(self, message: Mapping[str, Any], key: ConversationKey) -> bool:
        if message.get("ts") == key.thread or message.get("metadata") or message.get("subtype"):
            return False
        ours = (self.identity.bot_id and message.get("bot_id") == self.identity.bot_id) or (
            message.get("user") == self.identity.bot_user_id
        )
        return bool(ours)

    def _forget(self, message_id: str) -> None:
        self._sent.pop(message_id, None)
        self._tasks.pop(message_id, None)
        self._started.pop(message_id, None)
        self._remember(self._stopped, message_id, None)

    @staticmethod
    def _remember(table: OrderedDict[str, Any], message_id: str, value: Any) -> None:
        table[message_id] = value
        table.move_to_end(message_id)
        while len(table) > REMEMBERED:
            table.popitem(last=False)
