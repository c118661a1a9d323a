"""Randomized interleavings (hypothesis): arrivals, duplicates, edits, deletes, timers, generation
ends and failures, input after a deadline while generating, streaming on or off (drafts that
grow as the model writes), delivery failures (429 with Retry-After) before a post, after it landed
(the response lost), between the parts of a reply and on the edit that finishes a draft, people
deleting the bot's messages, a platform slower than the claim and frozen workers. After every step
the store and the raw posts must keep G1, G3 and G9 (`check_invariants`); at the end G2 and G4
hold too, and every conversation shows one message per part of each sent reply (G10: no stray
draft, none left with a partial text), apart from what people deleted."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from bot.core.engine import Engine
from bot.core.errors import RetryableDeliveryError, RetryableReplierError
from bot.core.events import ConversationKey, IncomingMessage, MessageDeleted, MessageEdited
from bot.core.store import Committed, FinalCheck, NewReply
from storage.sqlite import SqliteStore
from testkit import (
    Fault,
    InvariantViolation,
    RecordingFrontend,
    ReplierCall,
    ScriptedReplier,
    check_invariants,
)
from testkit.clock import FakeClock
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


PICK = st.integers(0, 63)
"""Which of the arrivals or open calls a rule takes (modulo their number). The rules have no
preconditions and draw nothing whose shape depends on the machine's state: that state follows
the store's real I/O on a thread, and Hypothesis requires the same steps to draw the same kinds of
values when it replays them ("Inconsistent data generation" otherwise). A rule with nothing to act
on does nothing."""


def no_post_in_flight(machine: BurstMachine) -> bool:
    """The design's timing assumption (docs/model): a deliverer never stalls with a post on its
    way to the platform, which checks no claim token. Freezing one then would double-post."""
    return not any(engine.outbox._posting for engine in machine.engines)


class BurstMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock()
        self.store = SqliteStore(":memory:")
        self.run(self.store.open())
        self.platform = RecordingFrontend(parts=2, clock=self.clock, drafts=True)
        self.replier = self.run(self._make_replier())
        self.engines: list[Engine] = []
        self.streaming = False
        self.arrivals: list[Arrival] = []
        self.counter = 0

    async def _make_replier(self) -> ScriptedReplier:
        return ScriptedReplier(hold=True)

    def _new_engine(self) -> Engine:
        engine = make_engine(
            self.store,
            self.clock,
            self.replier,
            self.platform,
            owner=f"w{len(self.engines)}",
            streaming=self.streaming,
        )
        self.engines.append(engine)
        return engine

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        return self.loop.run_until_complete(coro)

    def settle(self) -> None:
        """Let in-flight work reach its next wait (real I/O of the store runs on a thread): poll
        until what the processes did (calls, posts, edits, tasks) stops changing, briefly. Only
        coverage depends on it: the invariants hold at every moment, settled or not."""
        self.run(self._settle())

    async def _settle(self, polls: int = 25) -> None:
        steady, seen = 0, None
        for _ in range(polls):
            await asyncio.sleep(0.001)
            now = (
                len(self.replier.calls),
                len(self.platform.posts),
                len(self.platform.edits),
                len(self.platform.attempts),
                sum(1 for task in asyncio.all_tasks(self.loop) if not task.done()),
            )
            steady = steady + 1 if now == seen else 0
            if steady >= 3:
                return
            seen = now

    def open_calls(self) -> list[ReplierCall]:
        return [c for c in self.replier.calls if not c._outcome.done() and not c.cancelled]

    # rules -----------------------------------------------------------------------------------
    @initialize(slow=st.booleans(), streaming=st.booleans())
    def processes(self, slow: bool, streaming: bool) -> None:
        self.streaming = streaming
        self._new_engine()  # a second process on the store, sweeping the outbox too
        self.engine = self._new_engine()
        self.slow_platform(slow)

    @rule(conversation=st.integers(0, 2), text=st.sampled_from(["yes", "no", "hm"]))
    def arrive(self, conversation: int, text: str) -> None:
        self.counter += 1
        key = KEYS[conversation]
        message = IncomingMessage(key, f"m{self.counter}", "u", "alice", text)
        result = self.run(self.engine.ingest(message))
        assert result.status == "accepted"
        self.arrivals.append(Arrival(key, message.message_id, result.version, self.clock.now()))
        self.settle()

    @rule(pick=PICK)
    def redeliver(self, pick: int) -> None:
        if not self.arrivals:
            return
        arrival = self.arrivals[pick % len(self.arrivals)]
        message = IncomingMessage(arrival.key, arrival.message_id, "u", "alice", "replayed")
        assert self.run(self.engine.ingest(message)).status == "duplicate"

    @rule(pick=PICK, delete=st.booleans())
    def change(self, pick: int, delete: bool) -> None:
        if not self.arrivals:
            return
        arrival = self.arrivals[pick % len(self.arrivals)]
        event = (
            MessageDeleted(arrival.key, arrival.message_id)
            if delete
            else MessageEdited(arrival.key, arrival.message_id, "edited")
        )
        self.run(self.engine.ingest(event))
        self.settle()

    @rule(seconds=st.sampled_from([0.5, 1.0, 1.5, 3.0, 8.0, 31.0]), newest_first=st.booleans())
    def advance(self, seconds: float, newest_first: bool = False) -> None:
        """Time passes while the model writes (a draft shows it, with streaming on); every
        process, a frozen one that woke up too, serves what is due."""
        for call in self.open_calls():
            self.counter += 1
            call.stream(1, f"w{self.counter} ")
        self.run(self.clock.advance(seconds))
        for engine in reversed(self.engines) if newest_first else self.engines:
            self.run(engine.run_due())
            self.run(engine.outbox.deliver_due())
        self.settle()

    @rule(pick=PICK, fail=st.booleans())
    def end_generation(self, pick: int, fail: bool) -> None:
        calls = self.open_calls()
        if not calls:
            return
        call = calls[pick % len(calls)]
        if fail:
            call.fail(RetryableReplierError("overloaded"))
        else:
            call.stream(3)
            call.finish()
        self.settle()

    @rule(pick=PICK, conversation=st.integers(0, 2), arrive_first=st.booleans())
    def end_generation_and_arrive_at_once(
        self, pick: int, conversation: int, arrive_first: bool
    ) -> None:
        """New input racing the final check: the commit must see it or the reply must wait."""
        calls = self.open_calls()
        if not calls:
            return
        call = calls[pick % len(calls)]
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

    @rule(pick=st.integers(0, 2))
    def arrive_after_the_deadline(self, pick: int) -> None:
        """More input while a generation runs past its burst's deadline: the reply goes out (G4)
        with the newer input left for the next burst, and only because the deadline passed (G3)."""
        if not self.open_calls():
            return
        states = [self.run(self.store.conversation_state(k.id)) for k in KEYS]
        held = [k for k, state in zip(KEYS, states, strict=True) if state and state.lease_owner]
        if not held:
            return
        self.run(self.clock.advance(SETTINGS.max_wait_seconds))
        self.arrive(KEYS.index(held[pick % len(held)]), "late")

    @rule(retry_after=st.sampled_from([None, 5.0, 45.0]))
    def break_next_delivery(self, retry_after: float | None) -> None:
        """A 502, or a 429 with Retry-After (longer than the claim, at 45 s)."""
        self.platform.failures.append(RetryableDeliveryError("502 or 429", retry_after))

    @rule(part=st.integers(0, 1), landed=st.booleans(), retry_after=st.sampled_from([None, 5.0]))
    def break_next_post(self, part: int, landed: bool, retry_after: float | None) -> None:
        """The next post of `part` (1: between the parts of a reply; 0: a draft's post too) fails,
        before it takes effect or after it landed (a response lost on the way back)."""
        error = RetryableDeliveryError("lost" if landed else "502", retry_after)
        self.platform.post_faults.append(Fault(error, landed=landed, part=part))

    @rule(landed=st.booleans(), mid_stream=st.booleans())
    def break_next_edit(self, landed: bool, mid_stream: bool) -> None:
        """The edit that finishes a draft fails (before, or after it took effect), or the next
        edit of all, a draft growing mid-stream, is refused (429)."""
        error = RetryableDeliveryError("edit lost" if landed else "edit refused", 2.0)
        if mid_stream:
            self.platform.edit_failures.append(error)
        else:
            self.platform.final_edit_faults.append(Fault(error, landed=landed))

    @rule(pick=PICK)
    def person_deletes(self, pick: int) -> None:
        """Someone deletes one of the bot's messages: a draft (the reply must post anew, once)
        or a part already final."""
        showing = [
            p.message_id for p in self.platform.posts if p.message_id not in self.platform.deleted
        ]
        if showing:
            self.platform.person_deletes(showing[pick % len(showing)])

    @rule(slow=st.booleans())
    def slow_platform(self, slow: bool) -> None:
        """Each part takes 0.8 × the claim TTL to post: a reply outlives one claim."""
        self.platform.post_seconds = 0.8 * SETTINGS.lease_ttl_seconds if slow else 0.0

    @rule()
    def freeze_worker(self) -> None:
        """The current process stalls past its lease TTL; a new one takes over (the stalled one
        carries on when time next passes)."""
        if not no_post_in_flight(self):
            return
        self.clock.jump(SETTINGS.lease_ttl_seconds + 1)
        self.engine = self._new_engine()
        self.run(self.engine.run_due())
        self.settle()

    # invariants ------------------------------------------------------------------------------
    @invariant()
    def no_message_is_covered_twice_and_posts_go_once_in_order(self) -> None:
        self.run(self.check(quiescent=False))

    async def check(self, quiescent: bool) -> None:
        await check_invariants(
            self.store,
            [k.id for k in KEYS],
            quiescent=quiescent,
            max_wait_seconds=SETTINGS.max_wait_seconds,
            frontend=self.platform,
        )

    def teardown(self) -> None:
        try:
            self.replier.hold = False
            self.platform.post_seconds = 0.0  # faults still queued fire while it drains
            for _ in range(40):
                for call in self.open_calls():
                    call.finish()
                self.run(self.clock.advance(40.0))
                self.run(self.engine.run_due())
                self.run(self.engine.outbox.deliver_due())
                self.run(self.engine.idle())
                self.settle()
            self.run(self.check(quiescent=True))
            self.run(self._check_timing())
        finally:
            self.close()

    def close(self) -> None:
        """Stop every process's workers and close the store and the loop."""
        for engine in self.engines:
            for task in list(engine._workers.values()):
                task.cancel()
        self.run(asyncio.sleep(0.01))
        self.run(self.store.close())
        self.loop.close()

    async def _check_timing(self) -> None:
        """G3 and G4 from arrival times, which also know messages deleted since (a burst whose first
        message was deleted is beyond `check_invariants`' G3), commit times, generation starts."""
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


TestBurstMachine = pytest.mark.slow(BurstMachine.TestCase)
TestBurstMachine.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_steps_that_once_posted_a_found_draft_twice() -> None:
    """The machine's steps behind "part 0 of r1 posted again": the draft's post lands but its
    response is lost, the reply's delivery finds it and finishes it as part 0, part 1 fails
    (on a platform slow enough to lose a claim too), and the retry must not post the draft again."""
    machine = BurstMachine()
    steps = [
        lambda: machine.processes(slow=True, streaming=True),
        lambda: machine.arrive(0, "yes"),
        lambda: machine.advance(1.5),
        lambda: machine.break_next_post(part=0, landed=True, retry_after=None),
        lambda: machine.advance(0.5),
        lambda: machine.end_generation(0, fail=False),
        lambda: machine.break_next_post(part=1, landed=False, retry_after=None),
        lambda: machine.advance(31.0),
        lambda: machine.advance(31.0),
        lambda: machine.advance(31.0),
    ]
    try:
        for take in steps:
            take()
            machine.no_message_is_covered_twice_and_posts_go_once_in_order()
    except BaseException:
        machine.close()
        raise
    machine.teardown()  # drains, then checks G2, G4 and G10 on what is visible


# the checker the machine relies on can fail ----------------------------------------------------
async def two_replies_in_two_parts(
    store: SqliteStore, clock: FakeClock
) -> tuple[RecordingFrontend, Engine]:
    """Two bursts, one after the other, each answered by a reply posted as two parts."""
    frontend = RecordingFrontend(parts=2)
    engine = make_engine(store, clock, ScriptedReplier(), frontend)
    for n in (1, 2):
        await engine.ingest(IncomingMessage(KEYS[0], f"m{n}", "u", "alice", f"text {n}"))
        await clock.advance(SETTINGS.quiet_seconds)
        await engine.run_due()
        await engine.idle()
    assert frontend.replies() == {"r1": [0, 1], "r2": [0, 1]}
    return frontend, engine


async def violations(
    store: SqliteStore, frontend: RecordingFrontend, quiescent: bool = True
) -> str:
    try:
        await check_invariants(
            store,
            [KEYS[0].id],
            quiescent=quiescent,
            max_wait_seconds=SETTINGS.max_wait_seconds,
            frontend=frontend,
        )
    except InvariantViolation as exc:
        return str(exc)
    return ""


async def test_invariants_hold_for_two_replies_posted_once_in_order(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend, _ = await two_replies_in_two_parts(store, clock)
    assert await violations(store, frontend) == ""


async def test_invariants_see_a_part_posted_twice(store: SqliteStore, clock: FakeClock) -> None:
    frontend, _ = await two_replies_in_two_parts(store, clock)
    frontend.posts.insert(2, frontend.posts[1])
    assert "part 1 of r1 posted again" in await violations(store, frontend)


async def test_invariants_see_parts_out_of_order(store: SqliteStore, clock: FakeClock) -> None:
    frontend, _ = await two_replies_in_two_parts(store, clock)
    frontend.posts[0], frontend.posts[1] = frontend.posts[1], frontend.posts[0]
    assert "part 1 of r1 posted after []" in await violations(store, frontend)


async def test_invariants_see_replies_posted_out_of_commit_order(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend, _ = await two_replies_in_two_parts(store, clock)
    frontend.posts[:] = frontend.posts[2:] + frontend.posts[:2]
    assert "G9: r1 posted after r2" in await violations(store, frontend)


async def test_invariants_see_a_reply_interleaved_with_the_next(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend, _ = await two_replies_in_two_parts(store, clock)
    frontend.posts[1], frontend.posts[2] = frontend.posts[2], frontend.posts[1]
    assert "G9: r1 posted after r2" in await violations(store, frontend)


async def test_invariants_see_a_sent_reply_missing_a_part(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend, _ = await two_replies_in_two_parts(store, clock)
    del frontend.posts[3]
    assert "r2 is sent but shows parts [0]" in await violations(store, frontend)


async def test_invariants_see_a_reply_sent_while_an_earlier_one_waits(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend = RecordingFrontend()
    engine = make_engine(store, clock, ScriptedReplier(), frontend)
    frontend.failures.append(RetryableDeliveryError("429", retry_after=60.0))
    for n in (1, 2):
        await engine.ingest(IncomingMessage(KEYS[0], f"m{n}", "u", "alice", f"text {n}"))
        await clock.advance(SETTINGS.quiet_seconds)
        await engine.run_due()
        await engine.idle()
    first, second = await store.replies(KEYS[0].id)
    assert (first.state, second.state) == ("pending", "pending")
    assert await violations(store, frontend, quiescent=False) == ""
    assert await store.mark_sent(second.id, second.claim_token, ["x"], clock.now())
    assert "G9: r2 sent before an earlier reply" in await violations(store, frontend, False)


async def test_invariants_see_a_commit_past_newer_input_before_the_deadline(
    store: SqliteStore, clock: FakeClock
) -> None:
    timing = SETTINGS.timing_for(KEYS[0])
    await store.ingest(IncomingMessage(KEYS[0], "m1", "u", "alice", "one"), clock.now(), timing)
    lease = await store.acquire_lease(KEYS[0].id, "w", clock.now() + 2.0, 30.0)
    assert lease is not None
    await store.ingest(IncomingMessage(KEYS[0], "m2", "u", "alice", "two"), clock.now() + 3, timing)
    check = FinalCheck(lease.token, 1, deadline_passed=True)  # it had not: 4 s of 8
    done = await store.commit(KEYS[0].id, check, clock.now() + 4.0, timing, NewReply("hi"))
    assert isinstance(done, Committed) and done.reply is not None
    assert done.reply.seen_version == 2
    frontend = RecordingFrontend()
    found = await violations(store, frontend, quiescent=False)
    assert "G3: r1 committed past newer input (v2 > v1) 4.000s before its deadline" in found
