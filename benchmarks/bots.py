"""The systems the burst workloads drive: burstbot itself and three baselines.

- `BurstbotBot`: the real `Engine` + `Scheduler` + `SqliteStore` (a file) on the system clock.
- `CompleteThenDiscardBot`: the same engine with supervision disabled (a `Supervisor` whose `watch`
  just waits for the stream): versions, leases and the final check still hold, but a superseded
  generation runs to its end and is discarded at the final check.
- `NaiveBot`: one model call and one reply per message, no debounce.
- `SleepDebounceBot`: each message sleeps for the quiet window; if it is still the newest, it reads
  the unanswered messages under a short lock and answers them, generating outside the lock.
  Messages typed while a reply is being generated are answered again by the next reply.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from benchmarks.tally import PLATFORM
from bot.core.clock import SystemClock
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.replier import BurstMessage, GenerationProgress, Prompt
from bot.core.settings import EngineSettings
from bot.core.store import Lease
from bot.core.supervisor import Supervision, Supervisor
from bot.wiring import build_serving
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, StreamingModel
from testkit.engine import shut_down

WASTED_OUTCOMES = ("superseded", "discarded", "lease_lost", "failed")


class Bot(Protocol):
    name: str
    model: StreamingModel
    platform: RecordingFrontend

    async def start(self) -> None: ...

    async def send(self, message: IncomingMessage) -> None: ...

    async def settled(self, keys: Sequence[ConversationKey]) -> bool: ...

    async def stop(self) -> None: ...

    async def wasted_per_store(self) -> int | None:
        """Output tokens of generations the store recorded as not posted (engine bots only)."""
        ...


class WaitForTheEnd(Supervisor):
    """No cancellation: newer input is only noticed at the final check."""

    async def watch(
        self,
        generation: asyncio.Task[str],
        lease: Lease,
        deadline: float,
        on_renewed: Callable[[float], None] = lambda at: None,
    ) -> Supervision:
        await asyncio.wait({generation})
        return Supervision.DONE


class BurstbotBot:
    name = "burstbot"
    supervisor_class: type[Supervisor] | None = None

    def __init__(self, model: StreamingModel, settings: EngineSettings, directory: str) -> None:
        self.model = model
        self.platform = RecordingFrontend(PLATFORM)
        self.settings = settings
        self.path = os.path.join(directory, f"{self.name}.db")
        self.store = SqliteStore(self.path)
        serving = build_serving(
            self.store, model, SystemClock(), settings, "bench", {PLATFORM: self.platform}
        )
        self.engine = serving.engine
        if self.supervisor_class is not None:
            self.engine.supervisor = self.supervisor_class(
                self.store, self.engine.clock, settings, self.engine.signals
            )
        self.scheduler = serving.scheduler
        self._loop: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.store.open()
        self._loop = asyncio.create_task(self.scheduler.run())

    async def send(self, message: IncomingMessage) -> None:
        await self.engine.ingest(message)

    async def settled(self, keys: Sequence[ConversationKey]) -> bool:
        for key in keys:
            if not await self.engine.is_settled(key):
                return False
        return True

    async def stop(self) -> None:
        self.scheduler.stop()
        if self._loop is not None:
            await self._loop
        await shut_down(self.engine)
        await self.store.close()

    async def wasted_per_store(self) -> int | None:
        records = await self.store.generations()
        return sum(r.usage.output_tokens for r in records if r.outcome in WASTED_OUTCOMES)


class CompleteThenDiscardBot(BurstbotBot):
    name = "complete-then-discard"
    supervisor_class = WaitForTheEnd


class _InMemoryBot:
    """Shared plumbing of the baselines that keep everything in memory."""

    name = ""

    def __init__(self, model: StreamingModel) -> None:
        self.model = model
        self.platform = RecordingFrontend(PLATFORM)
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        return None

    def _spawn(self, work: asyncio.Task[None]) -> None:
        self._tasks.add(work)
        work.add_done_callback(self._tasks.discard)

    async def settled(self, keys: Sequence[ConversationKey]) -> bool:
        return not self._tasks

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def wasted_per_store(self) -> int | None:
        return None

    async def _answer(self, key: ConversationKey, burst: Sequence[IncomingMessage]) -> None:
        prompt = Prompt("", (), tuple(BurstMessage(m.author_name, m.text) for m in burst))
        text = await self.model.generate(prompt, GenerationProgress())
        self.platform.post_text(key, text)


class NaiveBot(_InMemoryBot):
    name = "naive"

    async def send(self, message: IncomingMessage) -> None:
        self._spawn(asyncio.create_task(self._answer(message.key, [message])))


@dataclass
class _Conversation:
    messages: list[IncomingMessage] = field(default_factory=list)
    answered: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SleepDebounceBot(_InMemoryBot):
    name = "sleep-debounce"

    def __init__(self, model: StreamingModel, quiet_seconds: float) -> None:
        super().__init__(model)
        self.quiet_seconds = quiet_seconds
        self._conversations: dict[ConversationKey, _Conversation] = {}

    async def send(self, message: IncomingMessage) -> None:
        conversation = self._conversations.setdefault(message.key, _Conversation())
        conversation.messages.append(message)
        position = len(conversation.messages)
        self._spawn(asyncio.create_task(self._debounced(message.key, conversation, position)))

    async def _debounced(self, key: ConversationKey, conv: _Conversation, position: int) -> None:
        await asyncio.sleep(self.quiet_seconds)
        if len(conv.messages) != position:
            return  # a newer message is waiting out its own quiet window
        async with conv.lock:
            burst = conv.messages[conv.answered : position]
        if burst:
            await self._answer(key, burst)
            async with conv.lock:
                conv.answered = max(conv.answered, position)
