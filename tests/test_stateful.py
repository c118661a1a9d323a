"""Randomized interleavings (hypothesis): arrivals, duplicates, edits, deletes, timers, generation
ends and failures, delivery failures and frozen workers — G1–G4 must hold after every step."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from bot.core.clock import FakeClock
from bot.core.engine import Engine
from bot.core.errors import RetryableDeliveryError, RetryableReplierError
from bot.core.events import ConversationKey, IncomingMessage, MessageDeleted, MessageEdited
from bot.testing import RecordingFrontend, ReplierCall, ScriptedReplier, check_invariants
from storage.sqlite import SqliteStore
from tests.conftest import SETTINGS, make_engine

R = TypeVar("R")
KEYS = [ConversationKey("test", "w", f"c{i}") for i in range(3)]
EPSILON = 1e-6


@dataclass
class Arrival:
    key: ConversationKey
    message_id: str
    seq: int
    at: float


def has_arrivals(machine: BurstMachine) -> bool:
    # Named functions, not lambdas: hypothesis describes lambdas by parsing their source, which
    # has crashed CPython 3.11's AST constructor inside long test runs.
    return bool(machine.arrivals)


def has_open_calls(machine: BurstMachine) -> bool:
    return bool(machine.open_calls())


class BurstMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock()
        self.store = SqliteStore(":memory:")
        self.run(self.store.open())
        self.platform = RecordingFrontend()
        self.replier = self.run(self._make_replier())
        self.engines: list[Engine] = []
        self.engine = self._new_engine()
        self.arrivals: list[Arrival] = []
        self.counter = 0

    async def _make_replier(self) -> ScriptedReplier:
        return ScriptedReplier(hold=True)

    def _new_engine(self) -> Engine:
        engine = make_engine(
            self.store, self.clock, self.replier, self.platform, owner=f"w{len(self.engines)}"
        )
        self.engines.append(engine)
        return engine

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        return self.loop.run_until_complete(coro)

    def settle(self) -> None:
        """Let in-flight work reach its next wait (real I/O of the store runs on a thread)."""
        self.run(asyncio.sleep(0.003))

    def open_calls(self) -> list[ReplierCall]:
        return [c for c in self.replier.calls if not c._outcome.done() and not c.cancelled]

    # rules -----------------------------------------------------------------------------------
    @rule(conversation=st.integers(0, 2), text=st.sampled_from(["yes", "no", "hm"]))
    def arrive(self, conversation: int, text: str) -> None:
        self.counter += 1
        key = KEYS[conversation]
        message = IncomingMessage(key, f"m{self.counter}", "u", "alice", text)
        result = self.run(self.engine.ingest(message))
        assert result.status == "accepted"
        self.arrivals.append(Arrival(key, message.message_id, result.version, self.clock.now()))
        self.settle()

    @precondition(has_arrivals)
    @rule(data=st.data())
    def redeliver(self, data: st.DataObject) -> None:
        arrival = data.draw(st.sampled_from(self.arrivals))
        message = IncomingMessage(arrival.key, arrival.message_id, "u", "alice", "replayed")
        assert self.run(self.engine.ingest(message)).status == "duplicate"

    @precondition(has_arrivals)
    @rule(data=st.data(), delete=st.booleans())
    def change(self, data: st.DataObject, delete: bool) -> None:
        arrival = data.draw(st.sampled_from(self.arrivals))
        event = (
            MessageDeleted(arrival.key, arrival.message_id)
            if delete
            else MessageEdited(arrival.key, arrival.message_id, "edited")
        )
        self.run(self.engine.ingest(event))
        self.settle()

    @rule(seconds=st.sampled_from([0.5, 1.0, 1.5, 3.0, 8.0, 31.0]))
    def advance(self, seconds: float) -> None:
        self.run(self.clock.advance(seconds))
        self.run(self.engine.run_due())
        self.run(self.engine.outbox.deliver_due())
        self.settle()

    @precondition(has_open_calls)
    @rule(data=st.data(), fail=st.booleans())
    def end_generation(self, data: st.DataObject, fail: bool) -> None:
        call = data.draw(st.sampled_from(self.open_calls()))
        if fail:
            call.fail(RetryableReplierError("overloaded"))
        else:
            call.stream(3)
            call.finish()
        self.settle()

    @precondition(has_open_calls)
    @rule(data=st.data(), conversation=st.integers(0, 2), arrive_first=st.booleans())
    def end_generation_and_arrive_at_once(
        self, data: st.DataObject, conversation: int, arrive_first: bool
    ) -> None:
        """New input racing the final check: the commit must see it or the reply must wait."""
        call = data.draw(st.sampled_from(self.open_calls()))
        if arrive_first:
            self.counter += 1
            key = KEYS[conversation]
            message = IncomingMessage(key, f"m{self.counter}", "u", "alice", "racing")
            ingest = self.loop.create_task(self.engine.ingest(message))
            call.finish()
            result = self.run(ingest)
            self.arrivals.append(Arrival(key, message.message_id, result.version, self.clock.now()))
            self.settle()
        else:
            call.finish()
            self.arrive(conversation, "racing")

    @rule()
    def break_next_delivery(self) -> None:
        self.platform.failures.append(RetryableDeliveryError("502"))

    @rule()
    def freeze_worker(self) -> None:
        """The current process stalls past its lease TTL; a new one takes over."""
        self.clock.jump(SETTINGS.lease_ttl_seconds + 1)
        self.engine = self._new_engine()
        self.run(self.engine.run_due())
        self.settle()

    # invariants ------------------------------------------------------------------------------
    @invariant()
    def no_message_is_covered_twice(self) -> None:
        self.run(check_invariants(self.store, [k.id for k in KEYS], quiescent=False))

    def teardown(self) -> None:
        try:
            self.replier.hold = False
            self.platform.failures.clear()
            for _ in range(40):
                for call in self.open_calls():
                    call.finish()
                self.run(self.clock.advance(40.0))
                self.run(self.engine.run_due())
                self.run(self.engine.outbox.deliver_due())
                self.run(self.engine.idle())
                self.settle()
            self.run(check_invariants(self.store, [k.id for k in KEYS], quiescent=True))
            self.run(self._check_timing())
        finally:
            for engine in self.engines:
                for task in list(engine._workers.values()):
                    task.cancel()
            self.run(asyncio.sleep(0.01))
            self.run(self.store.close())
            self.loop.close()

    async def _check_timing(self) -> None:
        """G3 and G4 from stored facts: commit times, generation starts, arrival times."""
        quiet, max_wait = SETTINGS.quiet_seconds, SETTINGS.max_wait_seconds
        for key in KEYS:
            mine = [a for a in self.arrivals if a.key == key]
            for reply in await self.store.replies(key.id):
                if reply.kind != "answer":
                    continue
                burst = [
                    a for a in mine if reply.covers_from_version < a.seq <= reply.covers_to_version
                ]
                newer_input_seen = reply.seen_version > reply.covers_to_version
                if burst and newer_input_seen:  # G3: only past the deadline
                    assert reply.created_at + EPSILON >= min(a.at for a in burst) + max_wait
            for gen in await self.store.generations(key.id):
                burst = [a for a in mine if gen.from_version < a.seq <= gen.to_version]
                if burst:  # G4: not before the quiet window, unless the cap forced it
                    earliest = min(
                        max(a.at for a in burst) + quiet, min(a.at for a in burst) + max_wait
                    )
                    assert gen.started_at + EPSILON >= earliest, (gen, burst)


TestBurstMachine = BurstMachine.TestCase
TestBurstMachine.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
