"""Votes in the store (G16, bot/core/votes.py): a press is stored once per platform id, one vote
per person per answer, the newest press decides. Run against every backend (see conftest); the
races run on separate connections where the backend shares a database."""

from __future__ import annotations

import asyncio

from bot.core.clicks import Click
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.store import Committed, FinalCheck, NewReply, Timing
from bot.core.votes import Vote, VoteValue, tally, vote_target
from storage.sql_store import SqlStore
from tests.contract.conftest import Backend

T = Timing(quiet_seconds=2.0, max_wait_seconds=10.0)
KEY = ConversationKey("test", "w", "c1")
CID = KEY.id
NOW = 1_000.0


def vote(
    click_id: str,
    value: VoteValue,
    at: float,
    voter: str = "u1",
    reply_id: str = "r1",
    key: ConversationKey = KEY,
) -> Vote:
    click = Click(click_id, key, "vote", vote_target(reply_id, value), voter, voter.upper())
    return Vote(click, reply_id, value, at)


async def answered(
    store: SqlStore, feedback: bool = True, key: ConversationKey = KEY, model: str = "m-1"
) -> str:
    """A burst answered with a committed reply (with the buttons unless not `feedback`): its
    reply id."""
    await store.ingest(IncomingMessage(key, f"{key.channel}-m1", "u1", "alice", "hi"), NOW, T)
    lease = await store.acquire_lease(key.id, "o1", NOW + 3, 30.0)
    assert lease is not None
    reply = NewReply("the answer", feedback=feedback, model=model)
    done = await store.commit(key.id, FinalCheck(lease.token, 1, True), NOW + 4, T, reply)
    assert isinstance(done, Committed) and done.reply is not None
    assert done.reply.feedback is feedback
    return f"r{done.reply.id}"


async def test_a_press_is_stored_once_and_counts_once(store: SqlStore) -> None:
    reply = await answered(store)
    assert await store.vote(vote("A", "up", 10.0, reply_id=reply), NOW + 5) == "voted"
    assert await store.vote(vote("A", "up", 10.0, reply_id=reply), NOW + 6) == "duplicate"
    votes = await store.votes(CID)
    assert [(v.voter_id, v.value, v.click_id, v.model) for v in votes] == [("u1", "up", "A", "m-1")]
    clicks = await store.clicks(CID)
    assert [(c.click_id, c.kind, c.target, c.outcome) for c in clicks] == [
        ("A", "vote", f"{reply}:up", "voted")
    ]


async def test_a_later_press_replaces_the_vote_and_an_older_one_does_not(store: SqlStore) -> None:
    reply = await answered(store)
    assert await store.vote(vote("A", "up", 10.0, reply_id=reply), NOW + 5) == "voted"
    assert await store.vote(vote("B", "down", 11.0, reply_id=reply), NOW + 6) == "voted"
    # the first press of a 👍 delivered again late, under another id than its first delivery's
    assert await store.vote(vote("A2", "up", 10.5, reply_id=reply), NOW + 7) == "outdated"
    votes = await store.votes(CID)
    assert [(v.value, v.voted_at, v.click_id) for v in votes] == [("down", 11.0, "B")]
    assert tally(votes) == (0, 1)


async def test_two_people_count_separately(store: SqlStore) -> None:
    reply = await answered(store)
    assert await store.vote(vote("A", "up", 10.0, "u1", reply), NOW + 5) == "voted"
    assert await store.vote(vote("B", "down", 10.0, "u2", reply), NOW + 5) == "voted"
    assert await store.vote(vote("C", "up", 12.0, "u2", reply), NOW + 6) == "voted"
    votes = await store.votes(CID)
    assert sorted((v.voter_id, v.value, v.voter_name) for v in votes) == [
        ("u1", "up", "U1"),
        ("u2", "up", "U2"),
    ]
    assert await store.vote_totals() == {("m-1", "up"): 2}


async def test_only_an_answer_with_the_buttons_of_this_conversation_takes_votes(
    store: SqlStore,
) -> None:
    plain = await answered(store, feedback=False)
    other = ConversationKey("test", "w", "c2")
    rated = await answered(store, key=other)
    assert await store.vote(vote("A", "up", 10.0, reply_id=plain), NOW + 5) == "not_votable"
    assert await store.vote(vote("B", "up", 10.0, reply_id=rated), NOW + 5) == "not_votable"
    assert await store.vote(vote("C", "up", 10.0, reply_id="r999"), NOW + 5) == "not_votable"
    assert await store.vote(vote("D", "up", 10.0, reply_id="nonsense"), NOW + 5) == "not_votable"
    assert await store.votes() == []
    assert [c.outcome for c in await store.clicks(CID)] == ["not_votable"] * 4
    assert await store.vote(vote("E", "up", 10.0, reply_id=rated, key=other), NOW + 5) == "voted"


async def test_votes_since_a_time_and_of_every_conversation(store: SqlStore) -> None:
    first = await answered(store)
    other = ConversationKey("test", "w", "c2")
    second = await answered(store, key=other, model="m-2")
    assert await store.vote(vote("A", "up", 10.0, reply_id=first), NOW + 5) == "voted"
    assert await store.vote(vote("B", "down", 20.0, reply_id=second, key=other), NOW) == "voted"
    assert [v.conversation_id for v in await store.votes()] == [CID, other.id]
    assert [v.conversation_id for v in await store.votes(since=15.0)] == [other.id]
    assert await store.vote_totals() == {("m-1", "up"): 1, ("m-2", "down"): 1}


async def test_presses_of_one_person_at_once_leave_the_newest(backend: Backend) -> None:
    stores = [await backend.new_store() for _ in range(2)]
    reply = await answered(stores[0])
    for round_ in range(4):
        base = 100.0 * (round_ + 1)
        older = vote(f"old-{round_}", "up", base, reply_id=reply)
        newer = vote(f"new-{round_}", "down", base + 1, reply_id=reply)
        outcomes = await asyncio.gather(stores[0].vote(older, NOW), stores[1].vote(newer, NOW))
        assert outcomes[1] == "voted"  # the newer press always counts
        assert outcomes[0] in ("voted", "outdated")  # the older one counted only if it came first
        [standing] = await stores[0].votes(CID)
        assert (standing.value, standing.click_id) == ("down", f"new-{round_}")


async def test_one_press_delivered_twice_at_once_counts_once(backend: Backend) -> None:
    stores = [await backend.new_store() for _ in range(2)]
    reply = await answered(stores[0])
    press = vote("same", "up", 10.0, reply_id=reply)
    outcomes = await asyncio.gather(*(s.vote(press, NOW) for s in stores))
    assert sorted(outcomes) == ["duplicate", "voted"]
    assert len(await stores[0].votes(CID)) == 1
