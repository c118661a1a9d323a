"""The quiet-window policy (bot/core/quiet_window.py): pure, so every case is a plain call."""

from __future__ import annotations

import math

import pytest

from bot.core.quiet_window import (
    FOLLOW_UP_SECONDS,
    SHAPE_WINDOW,
    AuthorLast,
    Rhythm,
    author_window,
    burst_window,
    shape,
)

BOUNDS = LOW, HIGH = 0.5, 5.0  # min_quiet_seconds, max_quiet_seconds


def learned(*gaps: float | None) -> Rhythm:
    rhythm = Rhythm().learn(None)  # the first message has no gap
    for gap in gaps:
        rhythm = rhythm.learn(gap)
    return rhythm


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("is it down?", "finished"),
        ("thanks!", "finished"),
        ("done.", "finished"),
        ("nice 🎉", "finished"),
        ("ok :+1:", "finished"),
        ("haha :)", "finished"),
        ("so I tried", "bare"),
        ("hmm", "bare"),
        ("first,", "dangling"),
        ("wait...", "dangling"),
        ("I restarted it and", "dangling"),
        ("see https://example.com/x", "other"),
        ("", "other"),
        ("`code`", "other"),
    ],
)
def test_shape_reads_how_a_message_ends(text: str, expected: str) -> None:
    assert shape(text) == expected


def test_a_stranger_gets_the_window_of_the_messages_shape_inside_the_bounds() -> None:
    finished = author_window(AuthorLast("bob", "is it down?", 0.0, None), *BOUNDS)
    bare = author_window(AuthorLast("bob", "so I tried", 0.0, None), *BOUNDS)
    dangling = author_window(AuthorLast("bob", "so I tried,", 0.0, None), *BOUNDS)
    assert finished.seconds == LOW
    assert bare.seconds == SHAPE_WINDOW["bare"]
    assert dangling.seconds == SHAPE_WINDOW["dangling"]
    assert finished.seconds < bare.seconds < dangling.seconds
    assert "bob is new here" in finished.reason and "'?'" in finished.reason
    tight = (0.2, 2.0)
    assert author_window(AuthorLast("bob", "so I tried,", 0.0, None), *tight).seconds == 2.0
    assert author_window(AuthorLast("bob", "ok?", 0.0, None), *tight).seconds == 0.2


def test_learning_follows_a_persons_follow_up_gaps_and_ignores_long_ones() -> None:
    rhythm = learned(2.5, 2.5, 2.5)
    assert (rhythm.messages, rhythm.follow_ups) == (4, 3)
    assert math.isclose(rhythm.mean_log_gap, math.log(2.5))
    assert rhythm.var_log_gap == pytest.approx(0.0)
    later = rhythm.learn(FOLLOW_UP_SECONDS + 1).learn(None)
    assert (later.messages, later.follow_ups) == (6, 3)
    assert later.mean_log_gap == rhythm.mean_log_gap
    drifting = learned(*([1.0] * 30), *([4.0] * 30))  # an EWMA: the recent gaps dominate
    assert drifting.mean_log_gap == pytest.approx(math.log(4.0), abs=0.1)
    assert drifting.var_log_gap > 0


def test_a_person_whose_follow_ups_come_2_5_s_apart_gets_a_window_that_holds_them() -> None:
    rhythm = learned(2.5, 2.5, 2.5)
    for text in ("so I tried", "it fails.", "any idea?"):
        window = author_window(AuthorLast("alice", text, 0.0, rhythm), *BOUNDS)
        assert 2.5 < window.seconds <= HIGH, text
        assert "alice's follow-ups come within" in window.reason


def test_a_person_who_never_splits_closes_at_the_minimum_after_a_finished_message() -> None:
    never = learned(*([None] * 20))
    window = author_window(AuthorLast("carol", "is the build green?", 0.0, never), *BOUNDS)
    assert window.seconds == LOW
    assert "carol never writes again" in window.reason
    # after an unfinished one too, sooner than a stranger's window
    bare = author_window(AuthorLast("carol", "so the build", 0.0, never), *BOUNDS)
    stranger = author_window(AuthorLast("dan", "so the build", 0.0, None), *BOUNDS)
    assert LOW <= bare.seconds < stranger.seconds


def test_the_burst_window_follows_whichever_author_may_still_be_writing() -> None:
    splitter = learned(2.5, 2.5, 2.5, 2.5)
    alice = AuthorLast("alice", "so I tried", 1.0, splitter)  # wrote 1 s ago, splits at 2.5 s
    bob = AuthorLast("bob", "same here.", 0.0, None)  # just wrote, finished
    window = burst_window([alice, bob], *BOUNDS)
    alone = author_window(alice, *BOUNDS)
    assert window.seconds == pytest.approx(alone.seconds - 1.0)
    assert window.seconds > author_window(bob, *BOUNDS).seconds
    assert window.reason.startswith(f"{alone.seconds:.1f} s after alice's last message")
    # once alice's window has passed, the newest message's own window decides
    late = burst_window([AuthorLast("alice", "so I tried", 9.0, splitter), bob], *BOUNDS)
    assert late.seconds == LOW
    assert "bob" in late.reason


def test_every_window_stays_inside_the_bounds() -> None:
    rhythms = [None, learned(), learned(0.3, 0.3), learned(9.0, 9.0, 9.0), learned(*[None] * 50)]
    texts = ["ok.", "so", "and", "wait...", "https://x.y", ""]
    for low, high in (BOUNDS, (0.0, 0.0), (1.0, 1.0), (0.3, 20.0)):
        for rhythm in rhythms:
            for text in texts:
                seconds = author_window(AuthorLast("p", text, 0.0, rhythm), low, high).seconds
                assert low <= seconds <= high
