"""The one retry delay: capped at any attempt count, jittered within its bounds, never shrinking."""

from __future__ import annotations

import itertools
import random

import pytest

from bot.core.backoff import Backoff


def test_the_ceiling_doubles_from_the_first_wait_up_to_the_cap() -> None:
    backoff = Backoff(0.25, 30.0)
    waits = [backoff.delay(failures) for failures in range(1, 11)]
    assert waits == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


def test_the_cap_holds_at_any_attempt_count_without_overflow() -> None:
    # 2.0 ** 1100 raises OverflowError; an attempt count that high must still give the cap
    for backoff in (Backoff(2.0, 300.0), Backoff(3600.0, 3600.0), Backoff(0.25, 4.0, factor=4.0)):
        for failures in (1000, 1100, 10**6):
            assert backoff.delay(failures) == backoff.cap


def test_a_first_wait_above_the_cap_or_zero_is_taken_as_it_is_bounded() -> None:
    assert Backoff(60.0, 30.0).delay(1) == 30.0
    assert [Backoff(0.0, 30.0).delay(n) for n in (1, 2, 1000)] == [0.0, 0.0, 0.0]


def test_jitter_stays_within_its_share_below_the_ceiling() -> None:
    backoff = Backoff(1.0, 30.0, jitter=0.5)
    draw = random.Random(51).random
    for failures in range(1, 40):
        ceiling = backoff.ceiling(failures)
        waits = [backoff.delay(failures, draw) for _ in range(200)]
        assert all(ceiling / 2 < wait <= ceiling for wait in waits)
        assert max(waits) - min(waits) > ceiling / 4  # spread out, not one value
    assert backoff.delay(3, lambda: 0.0) == 4.0  # the ceiling itself
    assert backoff.delay(3, lambda: 0.999) == pytest.approx(2.002)


def test_the_envelope_never_shrinks_from_one_failure_to_the_next() -> None:
    for first, cap, factor in itertools.product((0.1, 1.0, 7.0), (5.0, 300.0), (1.5, 2.0, 4.0)):
        backoff = Backoff(first, cap, factor)
        ceilings = [backoff.ceiling(failures) for failures in range(1, 2000)]
        assert all(a <= b <= cap for a, b in itertools.pairwise(ceilings))
        assert ceilings[-1] == cap


@pytest.mark.parametrize(
    "first, cap, factor, jitter",
    [(-1.0, 30.0, 2.0, 0.0), (1.0, -1.0, 2.0, 0.0), (1.0, 30.0, 0.5, 0.0), (1.0, 30.0, 2.0, 1.5)],
)
def test_a_backoff_that_could_shrink_or_go_negative_is_refused(
    first: float, cap: float, factor: float, jitter: float
) -> None:
    with pytest.raises(ValueError):
        Backoff(first, cap, factor, jitter)
