"""The live chaos checker can fail: what the issue saw on screen is counted as a violation."""

from __future__ import annotations

from bot.core.store import OutboxRow
from tests.live_chaos_check import Group, Shown, group, judge

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
