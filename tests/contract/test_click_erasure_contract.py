"""Erasure and retention of votes and clicks on every backend (G15): they hold who pressed (the
platform id and display name). `forget` deletes the votes and erases the clicker in place (the
click id stays, so a redelivered press is still a duplicate, G16); a decision's display name on
an approval goes with its clicker; a sweep deletes the votes of the replies it deletes and the
clicks older than its cutoff, never a stop still pending."""

from __future__ import annotations

from bot.core.actions import NewAction, canonical_arguments, idempotency_key
from bot.core.approvals import Continuation
from bot.core.clicks import Click, ClickKind, stopped_text
from bot.core.events import ConversationKey, Draft, IncomingMessage
from bot.core.store import Committed, FinalCheck, GenerationRecord, NewReply, Timing
from bot.core.votes import Vote, VoteValue, vote_target
from storage.sql_store import SqlStore

T = Timing(quiet_seconds=2.0, max_wait_seconds=10.0)
KEY = ConversationKey("test", "w", "c1")
OTHER = ConversationKey("other", "w", "c2")
NOW = 1_000.0
DAY = 86_400.0


def press(click_id: str, voter: str, reply_id: str, value: VoteValue = "up",
          key: ConversationKey = KEY) -> Vote:  # fmt: skip
    name = f"name-{voter}"
    return Vote(Click(click_id, key, "vote", vote_target(reply_id, value), voter, name),
                reply_id, value, NOW + 5)  # fmt: skip


async def answered(store: SqlStore, key: ConversationKey, at: float = NOW) -> str:
    """A burst answered with a posted reply that carries the buttons: its reply id."""
    await store.ingest(IncomingMessage(key, f"{key.channel}-m{at}", "u0", "zoe", "hi"), at, T)
    lease = await store.acquire_lease(key.id, "o1", at + 3, 30.0)
    assert lease is not None
    check = FinalCheck(lease.token, lease.version, True)
    done = await store.commit(key.id, check, at + 4, T, NewReply("answer", feedback=True))
    assert isinstance(done, Committed) and done.reply is not None
    for row in await store.claim_replies("o1", at + 5, 30.0, [key.platform], 10):  # posted
        assert await store.mark_sent(row.id, row.claim_token, ["p1"], at + 5)
    return f"r{done.reply.id}"


async def clickers(store: SqlStore, key: ConversationKey) -> list[tuple[str, str, str]]:
    return sorted((c.click_id, c.clicker_id, c.clicker_name) for c in await store.clicks(key.id))


async def test_forget_user_deletes_their_votes_everywhere_and_erases_them_from_their_clicks(
    store: SqlStore,
) -> None:
    here, there = await answered(store, KEY), await answered(store, OTHER)
    for vote in (press("A", "u1", here), press("B", "u2", here, "down"),
                 press("C", "u1", there, key=OTHER)):  # fmt: skip
        assert await store.vote(vote, NOW + 6) == "voted"
    counts = await store.forget_user("u1", None, NOW + 7)
    assert (counts["votes"], counts["clicks"]) == (2, 2)
    assert [(v.voter_id, v.voter_name) for v in await store.votes()] == [("u2", "name-u2")]
    assert await clickers(store, KEY) == [("A", "", ""), ("B", "u2", "name-u2")]
    assert await clickers(store, OTHER) == [("C", "", "")]
    assert await store.vote_totals() == {("", "down"): 1}
    # a redelivered press is still the same click: it casts nothing and stores no name again
    assert await store.vote(press("A", "u1", here), NOW + 8) == "duplicate"
    assert [v.voter_id for v in await store.votes()] == ["u2"]
    again = await store.forget_user("u1", None, NOW + 9)
    assert (again["votes"], again["clicks"]) == (0, 0)


async def test_forget_user_on_one_platform_keeps_their_votes_on_the_others(
    store: SqlStore,
) -> None:
    here, there = await answered(store, KEY), await answered(store, OTHER)
    assert await store.vote(press("A", "u1", here), NOW + 6) == "voted"
    assert await store.vote(press("B", "u1", there, key=OTHER), NOW + 6) == "voted"
    counts = await store.forget_user("u1", "other", NOW + 7)
    assert (counts["votes"], counts["clicks"]) == (1, 1)
    assert [(v.conversation_id, v.voter_name) for v in await store.votes()] == [(KEY.id, "name-u1")]
    assert await clickers(store, KEY) == [("A", "u1", "name-u1")]


RESUME = Continuation([], [], "Let me open one.")


async def decided(
    store: SqlStore, key: ConversationKey, clicker: str, kind: ClickKind = "approve"
) -> None:
    """A call of `u1`'s burst that asked (the card asks for alice), decided by `clicker`; its card
    (and the edit that ends a denied one) posted."""
    await store.ingest(IncomingMessage(key, f"{key.channel}-m1", "u1", "alice", "go"), NOW, T)
    lease = await store.acquire_lease(key.id, "o1", NOW + 3, 30.0)
    assert lease is not None
    arguments = canonical_arguments({"title": "printer on fire"})
    ikey = idempotency_key(key.id, 0, "tracker", "create_ticket", arguments)
    action = NewAction(key.id, lease.token, 0, 1, ikey, "tracker", "create_ticket", arguments,
                       False, "toolu_1", "u1", NOW + 3)  # fmt: skip
    card = await store.park(action, "alice", RESUME, 900.0, "Asked for alice.", f"{key.channel}-m1")
    assert card is not None
    click = Click(f"{key.channel}-k", key, kind, str(card), clicker, f"name-{clicker}")
    outcome = {"approve": "approved", "deny": "denied"}[kind]
    assert await store.decide(click, True, "admins", NOW + 5) == outcome
    for _ in range(2):  # the card, then the edit that ends it
        for row in await store.claim_replies("o1", NOW + 6, 30.0, [key.platform], 10):
            assert await store.mark_sent(row.id, row.claim_token, ["p1"], NOW + 6)


async def test_forget_user_erases_the_name_their_decisions_and_questions_left(
    store: SqlStore,
) -> None:
    await decided(store, KEY, "u2")  # u1 asked, u2 approved
    await decided(store, OTHER, "u3")
    await store.forget_user("u2", None, NOW + 6)
    [mine] = await store.actions(KEY.id)
    assert (mine.approval, mine.decided_by, mine.asked_by) == ("approved", "", "alice")
    await store.forget_user("u1", None, NOW + 7)
    [asked] = await store.actions(KEY.id)
    assert (asked.decided_by, asked.asked_by) == ("", "")
    [kept] = await store.actions(OTHER.id)
    assert kept.decided_by == "name-u3"
    assert await clickers(store, OTHER) == [("c2-k", "u3", "name-u3")]


async def test_forget_conversation_deletes_its_votes_and_erases_who_clicked(
    store: SqlStore,
) -> None:
    here, there = await answered(store, KEY), await answered(store, OTHER)
    assert await store.vote(press("A", "u1", here), NOW + 6) == "voted"
    assert await store.vote(press("B", "u1", there, key=OTHER), NOW + 6) == "voted"
    counts = await store.forget_conversation(KEY.id)
    assert (counts["votes"], counts["clicks"]) == (1, 1)
    assert await store.votes(KEY.id) == []
    assert await clickers(store, KEY) == [("A", "", "")]
    assert await store.vote(press("A", "u1", here), NOW + 8) == "duplicate"
    assert [v.voter_name for v in await store.votes(OTHER.id)] == ["name-u1"]
    assert await clickers(store, OTHER) == [("B", "u1", "name-u1")]


async def test_forget_conversation_erases_who_decided_and_for_whom_it_asked(
    store: SqlStore,
) -> None:
    await decided(store, KEY, "u2")
    await store.forget_conversation(KEY.id)
    [erased] = await store.actions(KEY.id)
    assert (erased.approval, erased.decided_by, erased.asked_by) == ("approved", "", "")


async def test_retention_deletes_the_votes_of_the_replies_it_deletes_and_old_clicks(
    store: SqlStore,
) -> None:
    old = await answered(store, KEY)
    new = await answered(store, OTHER, NOW + 40 * DAY)
    assert await store.vote(press("A", "u1", old), NOW + 6) == "voted"
    recent = press("B", "u1", new, key=OTHER)
    assert await store.vote(recent, NOW + 40 * DAY + 6) == "voted"
    counts = await store.prune(NOW + 30 * DAY)
    assert (counts["replies"], counts["votes"], counts["clicks"]) == (1, 1, 1)
    assert [v.click_id for v in await store.votes()] == ["B"]
    assert await store.clicks(KEY.id) == []
    assert await clickers(store, OTHER) == [("B", "u1", "name-u1")]
    assert await store.vote_totals() == {("", "up"): 1}
    again = await store.prune(NOW + 30 * DAY)
    assert (again["votes"], again["clicks"]) == (0, 0)


async def test_retention_keeps_a_stop_still_pending(store: SqlStore) -> None:
    """An old click that stopped the burst still waiting for its answer is pending work."""
    await store.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "hi"), NOW, T)
    lease = await store.acquire_lease(KEY.id, "o1", NOW + 3, 30.0)
    assert lease is not None
    assert await store.record_draft(KEY.id, lease.token, Draft("dkey", "m-100"))
    stop = Click("S", KEY, "stop", "dkey", "u1", "alice")
    assert await store.stop(stop, False, NOW + 4) == "stopped"
    assert (await store.prune(NOW + 30 * DAY))["clicks"] == 0
    pending = await store.pending_stop(KEY.id)
    assert pending is not None and pending.clicker_name == "alice"


async def cards(store: SqlStore, key: ConversationKey) -> list[tuple[str, str]]:
    return [(r.kind, r.text) for r in await store.replies(key.id) if r.kind.startswith("card")]


async def test_forget_user_erases_the_cards_they_decided_or_that_asked_for_them(
    store: SqlStore,
) -> None:
    """A card repeats the call's arguments and names both people; its ending names the decider."""
    await decided(store, KEY, "u2", "deny")  # u1 asked, u2 denied
    await decided(store, OTHER, "u3", "deny")
    assert [kind for kind, text in await cards(store, KEY) if "name-u2" in text] == ["card_outcome"]
    assert (await store.forget_user("u2", None, NOW + 7))["cards"] == 2
    assert await cards(store, KEY) == [("card", ""), ("card_outcome", "")]
    kept = await cards(store, OTHER)
    assert [kind for kind, text in kept if "alice" in text or "name-u3" in text] == [
        "card", "card_outcome"
    ]  # fmt: skip
    assert (await store.forget_user("u1", "other", NOW + 8))["cards"] == 2  # asked for them
    assert await cards(store, OTHER) == [("card", ""), ("card_outcome", "")]


async def stopped(store: SqlStore, key: ConversationKey, author: str, stopper: str) -> None:
    """`author`'s burst stopped by `stopper` (an admin), committed as the engine does."""
    name = f"name-{stopper}"
    await store.ingest(IncomingMessage(key, f"{key.channel}-m1", author, "zoe", "hi"), NOW, T)
    lease = await store.acquire_lease(key.id, "o1", NOW + 3, 30.0)
    assert lease is not None
    assert await store.record_draft(key.id, lease.token, Draft("dkey", "m-100"))
    stop = Click(f"{key.channel}-S", key, "stop", "dkey", stopper, name)
    assert await store.stop(stop, True, NOW + 4) == "stopped"
    pending = await store.pending_stop(key.id)
    assert pending is not None
    check = FinalCheck(lease.token, pending.version, deadline_passed=True, stopping=True)
    record = GenerationRecord(key.id, lease.token, 0, lease.version, NOW + 3, NOW + 5, "stopped",
                              error=f"stopped by {name}")  # fmt: skip
    reply = NewReply(stopped_text("Half of it", name))
    assert isinstance(await store.commit(key.id, check, NOW + 5, T, reply, record), Committed)


async def test_forget_user_erases_their_name_from_the_answers_they_stopped(
    store: SqlStore,
) -> None:
    """A stopped answer ends with who stopped it, in its stored text and its generation."""
    await stopped(store, KEY, "u1", "u2")
    await stopped(store, OTHER, "u1", "u3")
    await store.forget_user("u2", None, NOW + 6)
    [erased] = await store.replies(KEY.id)
    assert erased.text == stopped_text("Half of it", "")
    assert "name-u2" not in erased.text
    assert [g.error for g in await store.generations(KEY.id)] == ["stopped"]
    [kept] = await store.replies(OTHER.id)
    assert kept.text == stopped_text("Half of it", "name-u3")
    assert [g.error for g in await store.generations(OTHER.id)] == ["stopped by name-u3"]


async def test_a_stop_still_pending_whose_clicker_is_erased_ends_the_answer_unnamed(
    store: SqlStore,
) -> None:
    await store.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "hi"), NOW, T)
    lease = await store.acquire_lease(KEY.id, "o1", NOW + 3, 30.0)
    assert lease is not None
    assert await store.record_draft(KEY.id, lease.token, Draft("dkey", "m-100"))
    by_bob = Click("S", KEY, "stop", "dkey", "u2", "bob")
    assert await store.stop(by_bob, True, NOW + 4) == "stopped"
    await store.forget_user("u2", None, NOW + 5)
    pending = await store.pending_stop(KEY.id)
    assert pending is not None  # still stopped: erasure never touches pending work
    assert stopped_text("Half of it", pending.clicker_name) == "Half of it\n\n_(stopped)_"
