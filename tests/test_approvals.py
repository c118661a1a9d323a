"""Approve / Deny for tools that act (G14, G16): the real Claude replier against the fake Messages
API, the real MCP client against the real ticket server (tests/tool_server.py), the real engine on
SQLite with a fake clock. The server counts its own `create_ticket` calls per idempotency key;
that count is what these tests assert, never ours."""

from __future__ import annotations

import asyncio
import re
from itertools import count
from pathlib import Path

import pytest

from bot.cli.explain import explain_lines
from bot.core.actions import NewAction, canonical_arguments, idempotency_key
from bot.core.approvals import Continuation, card_text
from bot.core.clicks import Click, ClickKind
from bot.core.engine import Engine
from bot.core.errors import RetryableReplierError
from bot.core.events import IncomingMessage, MessageDeleted
from bot.core.store import Timing
from bot.core.tool_calls import BurstTools
from bot.core.tools import ToolOutput, ToolSpec
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, check_invariants
from testkit.clock import FakeClock
from testkit.fake_anthropic import FakeAnthropic, Plan, ToolUse
from tests.conftest import KEY, SETTINGS
from tests.tool_harness import all_text, stdio_server, tool_config, tool_engine, tool_results
from tests.tool_server import calls_per_key

TICKET = ToolUse("create_ticket", {"title": "printer on fire"})
CREATED = "created OPS-201 (normal priority): printer on fire"
_ids = count(1)


def said(n: int, text: str, author: str = "u1", name: str = "alice") -> IncomingMessage:
    return IncomingMessage(KEY, f"m{n}", author, name, text)


def press(card: int, kind: ClickKind, clicker: str = "u1", name: str = "alice",
          click_id: str | None = None) -> Click:  # fmt: skip
    return Click(click_id or f"click-{next(_ids)}", KEY, kind, str(card), clicker, name)


async def fire(engine: Engine, clock: FakeClock, seconds: float = SETTINGS.quiet_seconds) -> None:
    await clock.advance(seconds)
    await engine.run_due()
    await engine.idle()


async def card_of(store: SqliteStore) -> int:
    """The reply id of the conversation's newest card (what its buttons name)."""
    cards = [a.card_reply_id for a in await store.actions(KEY.id) if a.card_reply_id is not None]
    assert cards, "no card was posted"
    return cards[-1]


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.txt"


@pytest.fixture
def hold(tmp_path: Path) -> Path:
    return tmp_path / "hold"


def asking(server: FakeAnthropic, ledger: Path, hold: Path, **sections: object) -> object:
    return tool_config(server, stdio_server(ledger, hold, approve="ask"), **sections)


async def test_a_call_that_must_ask_parks_the_burst_and_approve_runs_it_once(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend, server: FakeAnthropic,
    ledger: Path, hold: Path,
) -> None:  # fmt: skip
    server.queue(
        Plan(text="Let me open one.", tool_uses=[TICKET]),
        Plan(text="Opened OPS-201 for the printer."),
    )
    config = asking(server, ledger, hold)
    async with tool_engine(config, store, clock, frontend) as (engine, _):  # type: ignore[arg-type]
        await engine.ingest(said(1, "the printer is on fire, open a ticket"))
        await fire(engine, clock)
        [card] = frontend.texts()
        assert "tracker.create_ticket" in card and '"title":"printer on fire"' in card
        assert "alice" in card
        assert calls_per_key(ledger) == {}  # nothing ran while it waits
        state = await store.conversation_state(KEY.id)
        assert state is not None and state.lease_owner is None  # no lease held while waiting
        assert state.answered_version == 0 and engine.busy == 0  # and no slot
        [action] = await store.actions(KEY.id)
        assert (action.approval, action.state) == ("waiting", "unknown")
        card_id = await card_of(store)
        assert frontend.cards == {f"r{card_id}-p0": str(card_id)}  # its buttons name the card
        answer = await engine.click(press(card_id, "approve"), False)
        assert answer.outcome == "approved" and answer.acted
        again = await engine.click(press(card_id, "approve"), False)  # a second press
        assert (again.outcome, again.notice) == (
            "already_decided",
            "That request was already decided.",
        )
        await fire(engine, clock, 0.0)
    assert list(calls_per_key(ledger).values()) == [1]
    [given] = tool_results(server.requests[1])
    assert given["content"] == CREATED
    assert "the printer is on fire" in all_text(server.requests[1])
    assert "may have run" not in all_text(server.requests[1])  # the call is resumed, not "taken"
    assert frontend.texts()[1:] == ["Let me open one.\n\nOpened OPS-201 for the printer."]
    assert frontend.visible()[0].endswith(f"✅ Approved by alice: {CREATED}")
    [action] = await store.actions(KEY.id)
    assert (action.approval, action.state, action.decided_by) == ("running", "done", "alice")
    assert [g.outcome for g in await store.generations(KEY.id)] == ["parked", "posted"]
    lines = "\n".join(await explain_lines(store, KEY.id, clock.now()) or [])
    assert f"clicked   approve on card r{action.card_reply_id}: approved by alice" in lines
    # the call's time counts from the card, the wait for the click included: said so, not "in"
    assert re.search(r"\(with effect\) → approved by alice, done \d+\.\d\ds after it asked", lines)
    await check_invariants(store, [KEY.id])


async def test_a_click_delivered_twice_is_stored_once_and_changes_nothing(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend, server: FakeAnthropic,
    ledger: Path, hold: Path,
) -> None:  # fmt: skip
    server.queue(Plan(text="", tool_uses=[TICKET]), Plan(text="Done."))
    async with tool_engine(asking(server, ledger, hold), store, clock, frontend) as (engine, _):  # type: ignore[arg-type]
        await engine.ingest(said(1, "open a ticket"))
        await fire(engine, clock)
        card_id = await card_of(store)
        first = await engine.click(press(card_id, "approve", click_id="slack-1.0"), False)
        repeat = await engine.click(press(card_id, "deny", click_id="slack-1.0"), False)
        assert (first.outcome, repeat.outcome, repeat.notice) == ("approved", "duplicate", None)
        await fire(engine, clock, 0.0)
        await fire(engine, clock, 0.0)  # served again: nothing runs twice
    assert list(calls_per_key(ledger).values()) == [1]
    assert frontend.texts()[1:] == ["Done."]
    assert [k.outcome for k in await store.clicks(KEY.id)] == ["approved"]


async def test_deny_ends_the_card_and_the_answer_resumes_with_a_refusal(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend, server: FakeAnthropic,
    ledger: Path, hold: Path,
) -> None:  # fmt: skip
    server.queue(Plan(text="", tool_uses=[TICKET]), Plan(text="OK, I did not open a ticket."))
    async with tool_engine(asking(server, ledger, hold), store, clock, frontend) as (engine, _):  # type: ignore[arg-type]
        await engine.ingest(said(1, "open a ticket"))
        await fire(engine, clock)
        card_id = await card_of(store)
        assert (await engine.click(press(card_id, "deny", "u9", "root"), True)).acted
        await fire(engine, clock, 0.0)
    assert calls_per_key(ledger) == {}
    [given] = tool_results(server.requests[1])
    assert given.get("is_error") is True and "root denied this call" in given["content"]
    assert frontend.visible()[0].endswith("🚫 Denied by root; not run.")
    assert frontend.texts()[1:] == ["OK, I did not open a ticket."]
    lines = "\n".join(await explain_lines(store, KEY.id, clock.now()) or [])
    assert "(with effect) → denied by root: not run (card r" in lines
    await check_invariants(store, [KEY.id])


async def test_an_unanswered_card_expires_and_the_answer_says_it_did_not_run(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend, server: FakeAnthropic,
    ledger: Path, hold: Path,
) -> None:  # fmt: skip
    server.queue(Plan(text="", tool_uses=[TICKET]), Plan(text="Nobody approved the ticket."))
    config = asking(server, ledger, hold, approval_timeout_seconds=120)
    async with tool_engine(config, store, clock, frontend) as (engine, _):  # type: ignore[arg-type]
        await engine.ingest(said(1, "open a ticket"))
        await fire(engine, clock)
        card_id = await card_of(store)
        await fire(engine, clock, 60.0)  # half way: nothing happens
        assert len(server.requests) == 1
        await fire(engine, clock, 61.0)
        late = await engine.click(press(card_id, "approve"), False)
        assert late.outcome == "ended" and late.notice is not None
    assert calls_per_key(ledger) == {}
    [given] = tool_results(server.requests[1])
    assert "did not run" in given["content"]
    assert frontend.visible()[0].endswith("⌛ Expired, not run.")
    assert frontend.texts()[1:] == ["Nobody approved the ticket."]


async def test_a_newer_message_supersedes_the_card_and_the_newer_burst_may_ask_again(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend, server: FakeAnthropic,
    ledger: Path, hold: Path,
) -> None:  # fmt: skip
    server.queue(
        Plan(text="", tool_uses=[TICKET]),
        Plan(text="", tool_uses=[TICKET]),  # the newer burst asks for the same call
        Plan(text="Opened OPS-201."),
    )
    async with tool_engine(asking(server, ledger, hold), store, clock, frontend) as (engine, _):  # type: ignore[arg-type]
        await engine.ingest(said(1, "open a ticket"))
        await fire(engine, clock)
        first_card = await card_of(store)
        await engine.ingest(said(2, "it is the one on floor 2"))
        stale = await engine.click(press(first_card, "approve"), False)
        assert stale.outcome == "ended"  # newer input came: the card no longer decides
        await fire(engine, clock)
        second_card = await card_of(store)
        assert second_card != first_card
        assert "floor 2" in all_text(server.requests[1])
        told = all_text(server.requests[1])  # the superseded call is told as not run
        assert "create_ticket" in told and "not run (a newer message came" in told
        assert "may have run" not in told
        assert (await engine.click(press(second_card, "approve"), False)).acted
        await fire(engine, clock, 0.0)
    assert list(calls_per_key(ledger).values()) == [1]
    shown = frontend.visible()
    assert shown[0].endswith("↪️ Superseded by a newer message, not run.")
    assert shown[1].endswith(f"✅ Approved by alice: {CREATED}")
    assert frontend.texts()[2:] == ["Opened OPS-201."]
    superseded, ran = await store.actions(KEY.id)
    assert (superseded.approval, ran.approval, ran.state) == ("superseded", "running", "done")
    await check_invariants(store, [KEY.id])


async def test_a_decision_made_before_a_newer_message_stands_and_one_answer_covers_both(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend, server: FakeAnthropic,
    ledger: Path, hold: Path,
) -> None:  # fmt: skip
    server.queue(Plan(text="", tool_uses=[TICKET]), Plan(text="Opened OPS-201; floor 2 noted."))
    async with tool_engine(asking(server, ledger, hold), store, clock, frontend) as (engine, _):  # type: ignore[arg-type]
        await engine.ingest(said(1, "open a ticket"))
        await fire(engine, clock)
        card_id = await card_of(store)
        assert (await engine.click(press(card_id, "approve"), False)).acted
        await engine.ingest(said(2, "it is the one on floor 2"))  # before the answer resumed
        await fire(engine, clock)
    assert list(calls_per_key(ledger).values()) == [1]
    resumed = server.requests[1]
    assert "floor 2" in all_text(resumed)
    [given] = tool_results(resumed)
    assert given["content"] == CREATED
    assert frontend.texts()[1:] == ["Opened OPS-201; floor 2 noted."]
    [answer] = [r for r in await store.replies(KEY.id) if r.kind == "answer"]
    assert (answer.covers_from_version, answer.covers_to_version) == (0, 2)
    await check_invariants(store, [KEY.id])


async def test_a_parked_burst_whose_message_is_deleted_ends_its_card_and_runs_nothing(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend, server: FakeAnthropic,
    ledger: Path, hold: Path,
) -> None:  # fmt: skip
    server.queue(Plan(text="", tool_uses=[TICKET]))
    async with tool_engine(asking(server, ledger, hold), store, clock, frontend) as (engine, _):  # type: ignore[arg-type]
        await engine.ingest(said(1, "open a ticket"))
        await fire(engine, clock)
        card_id = await card_of(store)
        await engine.ingest(MessageDeleted(KEY, "m1"))
        await fire(engine, clock)
        late = await engine.click(press(card_id, "approve"), False)
        assert late.outcome == "ended"
    assert calls_per_key(ledger) == {} and len(server.requests) == 1
    assert len(frontend.visible()) == 1  # the card alone: no answer
    assert frontend.visible()[0].endswith("↪️ Superseded by a newer message, not run.")
    state = await store.conversation_state(KEY.id)
    assert state is not None and state.answered_version == state.version
    await check_invariants(store, [KEY.id])


@pytest.mark.parametrize("approvers", ["authors_and_admins", "admins"])
async def test_only_the_burst_s_authors_and_admins_may_decide(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend, server: FakeAnthropic,
    ledger: Path, hold: Path, approvers: str,
) -> None:  # fmt: skip
    server.queue(Plan(text="", tool_uses=[TICKET]), Plan(text="Done."))
    config = asking(server, ledger, hold, access={"approvers": approvers})
    async with tool_engine(config, store, clock, frontend) as (engine, _):  # type: ignore[arg-type]
        await engine.ingest(said(1, "open a ticket"))
        await fire(engine, clock)
        card_id = await card_of(store)
        stranger = await engine.click(press(card_id, "approve", "u7", "mallory"), False)
        assert (stranger.outcome, stranger.acted) == ("refused", False)
        author = await engine.click(press(card_id, "approve"), False)
        assert author.outcome == ("approved" if approvers == "authors_and_admins" else "refused")
        if not author.acted:
            assert (await engine.click(press(card_id, "approve", "u9", "root"), True)).acted
        await fire(engine, clock, 0.0)
    assert list(calls_per_key(ledger).values()) == [1]


class NoServer:
    """A tool server no call may reach (the test fails if one does)."""

    def tools(self, servers: object) -> tuple[list[ToolSpec], list[str]]:
        return [], []

    async def call(self, spec: ToolSpec, arguments: object, key: str) -> ToolOutput:
        raise AssertionError("the call was made")


async def test_a_worker_whose_lease_is_gone_lets_an_approved_call_go_without_ending_the_card(
    store: SqliteStore,
) -> None:
    """A worker read the card as approved, then lost its lease (it stalled; another took over):
    its claim fails and nobody has claimed the call, so it lets go, and the card is not ended
    as "may have run" (the worker holding the lease makes the call)."""
    now = 1_000.0
    await store.ingest(said(1, "open a ticket"), now, Timing(2.0, 10.0))
    stale = await store.acquire_lease(KEY.id, "w1", now + 3, 30.0)
    assert stale is not None
    spec = ToolSpec("tracker", "create_ticket", "", {"type": "object"}, False, None, asks=True)
    arguments = canonical_arguments(TICKET.input)
    key = idempotency_key(KEY.id, 0, "tracker", "create_ticket", arguments)
    action = NewAction(KEY.id, stale.token, 0, 1, key, "tracker", "create_ticket", arguments,
                       False, "toolu_1", "u1", now + 3)  # fmt: skip
    card = await store.park(action, "alice", Continuation(), 900.0, "card", "m1")
    assert card is not None
    assert await store.decide(press(card, "approve"), False, "authors_and_admins", now + 4) == (
        "approved"
    )
    worker = await store.acquire_lease(KEY.id, "w1", now + 5, 30.0)
    assert worker is not None
    await store.release_lease(KEY.id, worker.token)
    taken = await store.acquire_lease(KEY.id, "w2", now + 6, 30.0)  # the worker stalled
    assert taken is not None and taken.token > worker.token
    closed = asyncio.Event()
    closed.set()
    calls = BurstTools(store, NoServer(), worker, "u1", closed, lambda: now + 7,
                       approvals=store, asked_by="alice")  # fmt: skip
    calls.specs = {"create_ticket": spec}
    with pytest.raises(RetryableReplierError):
        await calls.run("toolu_1", "create_ticket", dict(TICKET.input))
    [still] = await store.actions(KEY.id)
    assert (still.approval, still.state) == ("approved", "unknown")
    assert [r.kind for r in await store.replies(KEY.id)] == ["card"]  # no ending queued


@pytest.mark.parametrize(
    ("wait_seconds", "said"),
    [(20, "expires in 20 s;"), (0.4, "expires in 1 s;"), (60, "expires in 1 min;"),
     (900, "expires in 15 min;")],
)  # fmt: skip
def test_a_card_says_how_long_it_waits_in_seconds_under_a_minute(
    wait_seconds: float, said: str
) -> None:
    assert said in card_text("tracker", "create_ticket", "{}", "alice", wait_seconds)
