"""The live chaos checker can fail: what the issue saw on screen is counted as a violation."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

from bot.core.events import IncomingMessage
from bot.core.store import Committed, FinalCheck, NewReply, OutboxRow, Timing
from storage.sqlite import SqliteStore
from testkit.fake_slack import BOT_ID, BOT_USER, PostedMessage
from tests.live_chaos_check import Group, Shown, check, group, judge, violations
from tests.live_chaos_run import Conversation

TEXTS = {1: "s0m1", 2: "s0m2", 3: "s0m3"}


def row(ids: tuple[str, ...], covers: tuple[int, int] = (0, 3), kind: str = "answer") -> OutboxRow:
    return OutboxRow(
        id=1, conversation_id="slack/T0001/D0001/", platform="slack",
        covers_from_version=covers[0], covers_to_version=covers[1], seen_version=covers[1],
        text="", kind=kind, state="sent", attempts=1, next_attempt_at=0.0,
        reply_to_message_id=None, platform_message_ids=ids, created_at=0.0, sent_at=0.0,
        last_error=None,
    )  # fmt: skip


def judged(shown: list[Shown], rows: list[OutboxRow]) -> list[Group]:
    groups = group(shown, "sorry apology")
    by_ids = {r.platform_message_ids: r for r in rows}
    for g in groups:
        judge(g, by_ids.get(tuple(p.message_id for p in g.parts)), TEXTS)
    return groups


def test_a_stale_half_draft_beside_the_answer_is_stray_and_covers_twice() -> None:
    groups = judged(
        [Shown("a", "s0m1", by_bot=False), Shown("b", "g3 saw: s0m1", by_bot=True),
         Shown("c", "g5 saw: s0m1 s0m2 s0m3 g5end", by_bot=True)],
        [row(("c",))],
    )  # fmt: skip
    assert [g.valid for g in groups] == [False, True]
    assert groups[0].markers == ["s0m1"]  # the same message, quoted by two visible groups


def test_a_final_text_overwritten_by_a_stale_edit_is_not_the_reply() -> None:
    [only] = judged([Shown("c", "g4 saw: s0m1 s0m2 g4end", by_bot=True)], [row(("c",))])
    assert not only.valid and "stale" in only.why


def test_a_draft_left_showing_an_ellipsis_is_stray() -> None:
    [answer, left] = judged(
        [Shown("c", "g5 saw: s0m1 s0m2 s0m3 g5end", by_bot=True), Shown("d", "…", by_bot=True)],
        [row(("c",))],
    )
    assert answer.valid and not left.valid


def test_follow_up_parts_belong_to_their_answer() -> None:
    [answer] = judged(
        [Shown("c", "g5 saw: s0m1 s0m2 s0m3 g5 g5", by_bot=True),
         Shown("u", "s0m4", by_bot=False), Shown("e", "g5 g5 g5end", by_bot=True)],
        [row(("c", "e"))],
    )  # fmt: skip
    assert answer.valid and [p.message_id for p in answer.parts] == ["c", "e"]


# the whole check, over a conversation's screen and its store ---------------------------------
SLACK = Conversation("slack", 0)


def slack_message(channel: str, ts: str, text: str, by_bot: bool = True) -> PostedMessage:
    user = BOT_USER if by_bot else "U0ALICE"
    return PostedMessage(
        channel, ts, text, None, None, user=user, bot_id=BOT_ID if by_bot else None
    )


async def screen(shown: list[PostedMessage], sent_ids: tuple[str, ...]) -> dict[str, Any]:
    """`check` over one Slack conversation that shows `shown`, whose store holds one answer to
    its messages s0m1 and s0m2, sent as `sent_ids`."""
    store = SqliteStore(":memory:")
    await store.open()
    try:
        for n in (1, 2):
            message = IncomingMessage(SLACK.key, f"s0m{n}", "U0ALICE", "alice", f"s0m{n}")
            await store.ingest(message, 100.0 + n, Timing(0.3, 1.0))
        lease = await store.acquire_lease(SLACK.key.id, "w", 103.0, 30.0)
        assert lease is not None
        done = await store.commit(
            SLACK.key.id, FinalCheck(lease.token, 2, False), 103.5, Timing(0.3, 1.0), NewReply("x")
        )
        assert isinstance(done, Committed) and isinstance(done.reply, OutboxRow)
        assert await store.mark_sent(done.reply.id, done.reply.claim_token, sent_ids, 104.0)
        bots = [m for m in shown if m.bot_id]
        run = SimpleNamespace(
            conversations=[SLACK], store=store, sent={SLACK: ["s0m1", "s0m2"]},
            slack=SimpleNamespace(messages=shown, landed_posts=bots, updates=[], deleted=[]),
            discord=SimpleNamespace(history={}, landed_posts=[], edits=[], deleted=[], deduped=0,
                                    bot_user={"id": "1"}),
            ledger=SimpleNamespace(counts=Counter()),
            model=SimpleNamespace(server=SimpleNamespace(requests=[])),
        )  # fmt: skip
        return await check(run)  # type: ignore[arg-type]
    finally:
        await store.close()


ASKED = [
    slack_message("D0001", "101.0", "s0m1", False),
    slack_message("D0001", "102.0", "s0m2", False),
]
ANSWER = "g1 saw: s0m1 s0m2 g1end"


async def test_the_answer_alone_on_screen_counts_nothing() -> None:
    counts = await screen([*ASKED, slack_message("D0001", "104.0", ANSWER)], ("D0001:104.0",))
    assert violations(counts) == []


async def test_a_draft_left_beside_the_answer_is_counted_stray() -> None:
    shown = [*ASKED, slack_message("D0001", "103.0", "…"), slack_message("D0001", "104.0", ANSWER)]
    counts = await screen(shown, ("D0001:104.0",))
    assert violations(counts) == ["stray_drafts=1"]


async def test_an_answer_posted_in_another_conversation_is_in_the_wrong_channel() -> None:
    counts = await screen([*ASKED, slack_message("D0002", "104.0", ANSWER)], ("D0002:104.0",))
    assert counts["wrong_channel"] == 1 and counts["missing"] == 2
