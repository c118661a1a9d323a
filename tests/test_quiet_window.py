"""The quiet-window policy (bot/core/quiet_window.py): pure, so every case is a plain call."""

from __future__ import annotations

import math

import pytest

from bot.core.quiet_window import (
    DEFAULT_MODEL,
    FOLLOW_UP_SECONDS,
    AuthorLast,
    Rhythm,
    WindowModel,
    author_window,
    burst_window,
    cheapest_window,
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


def test_a_strangers_follow_up_is_never_likely_soon_enough_to_wait_for() -> None:
    """Even after a dangling end (followed within 10 s about one time in seven), the follow-up
    would mostly come seconds later: a stranger closes at the minimum whatever the ending."""
    for text in ("is it down?", "so I tried", "so I tried,", "wait...", "see https://x.y"):
        window = author_window(AuthorLast("bob", text, 0.0, None), *BOUNDS)
        assert window.seconds == LOW, text
        assert window.reason.startswith("bob is new here: not likely enough soon enough"), text
    assert "'?'" in author_window(AuthorLast("bob", "is it down?", 0.0, None), *BOUNDS).reason
    tight = (0.2, 2.0)
    assert author_window(AuthorLast("bob", "so I tried,", 0.0, None), *tight).seconds == 0.2


def test_a_fitted_model_where_dangling_ends_are_followed_quickly_holds_a_stranger() -> None:
    """The fitted figures still decide: where a dangling end is followed half the time, about a
    second later, a stranger's dangling message is held past that second; a finished one not."""
    quick = WindowModel(split_finished=0.02, split_dangling=0.5, mean_log_gap=0.0, sd_log_gap=0.4)
    dangling = author_window(AuthorLast("bob", "so I tried,", 0.0, None), *BOUNDS, quick)
    finished = author_window(AuthorLast("bob", "so I tried.", 0.0, None), *BOUNDS, quick)
    assert 1.5 < dangling.seconds < HIGH
    assert "worth waiting for" in dangling.reason
    assert finished.seconds == LOW


def test_the_cheapest_window_grows_with_the_chance_and_the_nearness_of_a_follow_up() -> None:
    near, far = math.log(1.5), math.log(6.0)
    assert cheapest_window(0.0, near, 0.3, *BOUNDS) == LOW
    assert cheapest_window(0.05, near, 0.3, *BOUNDS) == LOW  # rare: not worth any wait
    likely = cheapest_window(0.6, near, 0.3, *BOUNDS)
    assert 1.5 < likely < 3.0  # holds most of a 1.5 s follow-up, not the whole bound
    assert cheapest_window(0.3, far, 0.3, *BOUNDS) == LOW  # likely but late: not worth it
    assert cheapest_window(0.9, near, 0.3, 0.5, 1.0) == 1.0  # the bound holds


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
    for text in ("so I tried", "it fails,"):
        window = author_window(AuthorLast("alice", text, 0.0, rhythm), *BOUNDS)
        assert 2.5 < window.seconds <= HIGH, text
        assert "alice writes again within 10 s after about" in window.reason
        assert "s later: worth waiting for" in window.reason
    # after a finished message their follow-up is rarer: not worth the wait
    assert author_window(AuthorLast("alice", "any idea?", 0.0, rhythm), *BOUNDS).seconds == LOW


def test_a_person_whose_occasional_follow_ups_come_late_closes_at_the_minimum() -> None:
    """One follow-up in four messages, 4.5 s later: the old rule held such a person the whole
    5 s bound after every message; the wait would cost more than the follow-ups it catches."""
    rhythm = learned(*([4.5, None, None, None] * 3))
    for text in ("so I tried", "is it down?"):
        window = author_window(AuthorLast("erin", text, 0.0, rhythm), *BOUNDS)
        assert window.seconds == LOW, text
        assert "not likely enough soon enough" in window.reason


def test_a_person_who_never_splits_closes_at_the_minimum() -> None:
    never = learned(*([None] * 20))
    for text in ("is the build green?", "so the build,"):
        window = author_window(AuthorLast("carol", text, 0.0, never), *BOUNDS)
        assert window.seconds == LOW
        assert "carol writes again within 10 s after about" in window.reason
        assert "not likely enough soon enough" in window.reason


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
    rhythms = [None, learned(), learned(0.3, 0.3), learned(9.0, 9.0, 9.0), learned(*[None] * 50),
               learned(*[1.0] * 40)]  # fmt: skip
    texts = ["ok.", "so", "and", "wait...", "https://x.y", ""]
    for low, high in (BOUNDS, (0.0, 0.0), (1.0, 1.0), (0.3, 20.0)):
        for rhythm in rhythms:
            for text in texts:
                for model in (DEFAULT_MODEL, WindowModel(split_dangling=1.0, mean_log_gap=0.0)):
                    author = AuthorLast("p", text, 0.0, rhythm)
                    seconds = author_window(author, low, high, model).seconds
                    assert low <= seconds <= high
