"""Approvals in the store (G14, G16): parking is fenced by the lease token and releases it; a
click is stored once per platform id and decided once by a compare-and-swap on the action's row;
an approved call is claimed `running` once before it runs; a card ends once. Run against every
backend (see conftest); the races run on separate connections where the backend shares a
database."""

from __future__ import annotations

import asyncio

from bot.core.actions import NewAction, canonical_arguments, idempotency_key
from bot.core.approvals import Continuation
from bot.core.clicks import Click, ClickKind
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.store import Timing
from storage.sql_store import SqlStore
from tests.contract.conftest import Backend

T = Timing(quiet_seconds=2.0, max_wait_seconds=10.0)
KEY = ConversationKey("test", "w", "c1")
CID = KEY.id
NOW = 1_000.0
WAIT = 900.0
CALL = {"type": "tool_use", "id": "toolu_1", "name": "create_ticket", "input": {"title": "x"}}
RESUME = Continuation([], [CALL], "Let me open one.")


def action(token: int, to_version: int = 1) -> NewAction:
    arguments = canonical_arguments({"title": "printer on fire"})
    key = idempotency_key(CID, 0, "tracker", "create_ticket", arguments)
    return NewAction(CID, token, 0, to_version, key, "tracker", "create_ticket", arguments,
                     False, "toolu_1", "u1", NOW + 3)  # fmt: skip


def press(card: int, click_id: str, kind: ClickKind = "approve", clicker: str = "u1") -> Click:
    return Click(click_id, KEY, kind, str(card), clicker, clicker)


async def parked(store: SqlStore) -> tuple[int, int]:
    """A burst whose call asked: the lease token it was parked under, and the card's reply id."""
    await store.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "open a ticket"), NOW, T)
    lease = await store.acquire_lease(CID, "o1", NOW + 3, 30.0)
    assert lease is not None
    card = await store.park(action(lease.token), "alice", RESUME, WAIT, "card", "m1")
    assert card is not None
    return lease.token, card


async def test_parking_records_the_call_queues_its_card_and_releases_the_lease(
    store: SqlStore,
) -> None:
    _, card = await parked(store)
    state = await store.conversation_state(CID)
    assert state is not None and state.lease_owner is None and state.answered_version == 0
    assert state.timer is not None and state.timer.due_at == NOW + 3 + WAIT  # until the expiry
    [row] = await store.replies(CID)
    assert (row.id, row.kind, row.text, row.state) == (card, "card", "card", "pending")
    found = await store.parked(CID, 0)
    assert found is not None and found.continuation == RESUME
    assert (found.action.approval, found.action.asked_by) == ("waiting", "alice")
    assert await store.due_timers(NOW + 100, 10) == []


async def test_a_stale_lease_parks_nothing(store: SqlStore) -> None:
    await store.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "open a ticket"), NOW, T)
    lease = await store.acquire_lease(CID, "o1", NOW + 3, 30.0)
    assert lease is not None
    await store.release_lease(CID, lease.token)
    taken = await store.acquire_lease(CID, "o2", NOW + 4, 30.0)
    assert taken is not None
    assert await store.park(action(lease.token), "alice", RESUME, WAIT, "card", "m1") is None
    assert await store.actions(CID) == [] and await store.replies(CID) == []


async def test_a_click_is_stored_once_and_decided_once(store: SqlStore) -> None:
    _, card = await parked(store)
    assert await store.decide(press(card, "A"), False, "authors_and_admins", NOW + 5) == "approved"
    assert await store.decide(press(card, "A", "deny"), False, "authors_and_admins",
                              NOW + 6) == "duplicate"  # fmt: skip
    assert await store.decide(press(card, "B", "deny"), False, "authors_and_admins",
                              NOW + 6) == "already_decided"  # fmt: skip
    assert [(c.click_id, c.outcome) for c in await store.clicks(CID)] == [
        ("A", "approved"), ("B", "already_decided")
    ]  # fmt: skip
    [recorded] = await store.actions(CID)
    assert (recorded.approval, recorded.decided_by) == ("approved", "u1")
    state = await store.conversation_state(CID)
    assert state is not None and state.timer is not None and state.timer.due_at <= NOW + 5


async def test_who_may_decide(store: SqlStore) -> None:
    _, card = await parked(store)
    stranger = press(card, "A", clicker="u9")
    assert await store.decide(stranger, False, "authors_and_admins", NOW + 5) == "refused"
    assert await store.decide(press(card, "B"), False, "admins", NOW + 5) == "refused"
    assert await store.decide(press(card, "C", clicker="u9"), True, "admins", NOW + 5) == "approved"


async def test_a_click_after_newer_input_or_the_expiry_changes_nothing(store: SqlStore) -> None:
    _, card = await parked(store)
    assert await store.decide(press(card, "A"), False, "admins", NOW + 3 + WAIT) == "ended"
    await store.ingest(IncomingMessage(KEY, "m2", "u1", "alice", "floor 2"), NOW + 5, T)
    assert await store.decide(press(card, "B"), False, "authors_and_admins", NOW + 6) == "ended"
    [recorded] = await store.actions(CID)
    assert recorded.approval == "waiting"


async def test_an_approved_call_is_claimed_running_once_and_its_card_ends_once(
    store: SqlStore,
) -> None:
    token, card = await parked(store)
    assert await store.decide(press(card, "A"), False, "authors_and_admins", NOW + 5) == "approved"
    lease = await store.acquire_lease(CID, "o2", NOW + 6, 30.0)
    assert lease is not None and lease.token > token
    key = action(token).idempotency_key
    assert not await store.claim_approved(CID, key, token)  # the parked generation's token
    assert await store.claim_approved(CID, key, lease.token)
    assert not await store.claim_approved(CID, key, lease.token)  # once
    [running] = await store.actions(CID)
    ending = await store.finish_approved(running, "OPS-201", False, NOW + 7, "approved")
    assert ending is not None
    assert await store.finish_approved(running, "OPS-202", False, NOW + 8, "again") is None
    [done] = await store.actions(CID)
    assert (done.approval, done.result, done.state) == ("running", "OPS-201", "done")
    _, end_row = await store.replies(CID)
    assert (end_row.id, end_row.kind, end_row.draft_key) == (ending, "card_outcome", f"r{card}")


async def test_superseding_moves_the_key_aside_so_the_newer_burst_may_ask_again(
    store: SqlStore,
) -> None:
    _, card = await parked(store)
    await store.ingest(IncomingMessage(KEY, "m2", "u1", "alice", "floor 2"), NOW + 5, T)
    lease = await store.acquire_lease(CID, "o2", NOW + 6, 30.0)
    assert lease is not None
    found = await store.parked(CID, 0)
    assert found is not None
    ending = await store.end_approval(found.action, lease.token, "superseded", NOW + 6, "gone")
    assert ending is not None
    assert await store.end_approval(found.action, lease.token, "expired", NOW + 6, "x") is None
    again = await store.park(action(lease.token, 2), "alice", RESUME, WAIT, "card 2", "m2")
    assert again is not None and again != card
    old, new = await store.actions(CID)
    assert (old.approval, new.approval) == ("superseded", "waiting")
    assert old.idempotency_key.startswith(new.idempotency_key + "/superseded/")
    assert await store.decide(press(card, "A"), False, "authors_and_admins", NOW + 7) == "ended"


async def test_expiry_ends_a_waiting_card_only_once_its_time_is_up(store: SqlStore) -> None:
    _, _card = await parked(store)
    lease = await store.acquire_lease(CID, "o2", NOW + 6, 30.0)
    assert lease is not None
    found = await store.parked(CID, 0)
    assert found is not None
    assert await store.end_approval(found.action, lease.token, "expired", NOW + 6, "x") is None
    await store.keep_waiting(found.action, lease.token)
    state = await store.conversation_state(CID)
    assert state is not None and state.lease_owner is None and state.timer is not None
    assert state.timer.due_at == NOW + 3 + WAIT
    late = await store.acquire_lease(CID, "o3", NOW + 3 + WAIT, 30.0)
    assert late is not None
    ending = await store.end_approval(found.action, late.token, "expired", NOW + 3 + WAIT, "x")
    assert ending is not None
    [expired] = await store.actions(CID)
    assert expired.approval == "expired"


async def test_approve_and_deny_at_once_on_two_connections_decide_once(backend: Backend) -> None:
    for attempt in range(5):
        stores = [await backend.new_store() for _ in range(2)]
        key = ConversationKey("test", "w", f"race{attempt}")
        await stores[0].ingest(IncomingMessage(key, f"m{attempt}", "u1", "alice", "go"), NOW, T)
        lease = await stores[0].acquire_lease(key.id, "o1", NOW + 3, 30.0)
        assert lease is not None
        raced = NewAction(key.id, lease.token, 0, 1, f"k{attempt}", "tracker", "create_ticket",
                          "{}", False, "toolu_1", "u1", NOW + 3)  # fmt: skip
        card = await stores[0].park(raced, "alice", RESUME, WAIT, "card", f"m{attempt}")
        assert card is not None
        clicks = [Click(f"c{attempt}-{n}", key, kind, str(card), "u1", "alice")
                  for n, kind in enumerate(("approve", "deny"))]  # fmt: skip
        pairs = zip(stores, clicks, strict=True)
        outcomes = await asyncio.gather(
            *(s.decide(c, False, "authors_and_admins", NOW + 5) for s, c in pairs)
        )
        assert sorted(outcomes) in (["already_decided", "approved"], ["already_decided", "denied"])
        [decided] = await stores[0].actions(key.id)
        assert decided.approval == next(o for o in outcomes if o != "already_decided")
        endings = [r for r in await stores[0].replies(key.id) if r.kind == "card_outcome"]
        assert len(endings) == (1 if decided.approval == "denied" else 0)


async def test_forget_erases_the_saved_continuation_and_a_waiting_card_decides_nothing(
    store: SqlStore,
) -> None:
    _, card = await parked(store)
    counts = await store.forget_conversation(CID)
    assert counts["actions"] == 1
    [erased] = await store.actions(CID)
    assert (erased.arguments, erased.approval) == ("{}", "superseded")
    assert await store.parked(CID, 0) is None
    assert await store.decide(press(card, "A"), False, "authors_and_admins", NOW + 5) == "ended"
    forgotten = await store._rows("actions", {"cid": CID, "from_version": None})  # the raw row
    assert [row["resume"] for row in forgotten] == [None]


async def test_a_click_that_decides_while_a_worker_looks_is_served_at_once(store: SqlStore) -> None:
    """The worker read the card as waiting; a click decides it before the worker parks the
    timer again: the click's wake stands (the decided burst does not wait for the expiry)."""
    _, card = await parked(store)
    lease = await store.acquire_lease(CID, "o2", NOW + 6, 30.0)
    assert lease is not None
    found = await store.parked(CID, 0)
    assert found is not None and found.action.approval == "waiting"
    assert await store.decide(press(card, "A"), False, "authors_and_admins", NOW + 7) == "approved"
    await store.keep_waiting(found.action, lease.token)
    assert [t.conversation_id for t in await store.due_timers(NOW + 8, 10)] == [CID]
