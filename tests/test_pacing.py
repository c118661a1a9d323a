"""The shared streaming budget (`bot/core/pacing.py`) on a fake clock: drafts take only a spare
token and leave one for finals, finals take turns ahead of drafts, and a 429 holds everyone on that
limit."""

from __future__ import annotations

import asyncio

from bot.core.pacing import QUIET_SECONDS, Bucket, Limit, Pacer
from testkit.clock import FakeClock, settle

PER_MINUTE = 60.0  # one token a second
# buckets made here have no margin (a call a little after its token is due): exact times


def taken(order: list[str], name: str, bucket: Bucket) -> asyncio.Task[None]:
    async def take() -> None:
        await bucket.take()
        order.append(name)

    return asyncio.ensure_future(take())


async def test_drafts_leave_the_last_token_for_a_final_and_finals_go_first() -> None:
    clock = FakeClock()
    bucket = Bucket(clock, Limit(PER_MINUTE, burst=3), margin=0.0)
    assert [bucket.try_take() for _ in range(3)] == [True, True, False]  # one kept for a final
    order: list[str] = []
    final = taken(order, "final", bucket)
    await settle()
    assert order == ["final"]  # at once, on the token the drafts left
    second, third = (taken(order, name, bucket) for name in ("second", "third"))
    await clock.advance(1.0)
    assert order == ["final", "second"]  # finals follow each other at the rate
    assert not bucket.try_take()  # no draft while a final waits
    await clock.advance(1.0)
    assert order == ["final", "second", "third"]
    await clock.advance(2.0)
    assert [bucket.try_take(), bucket.try_take()] == [True, False]  # the last token kept
    await asyncio.gather(final, second, third)


async def test_a_retry_after_holds_drafts_and_finals_alike() -> None:
    clock = FakeClock()
    pacer = Pacer(clock, {"chat.update": Limit(PER_MINUTE, burst=5)})
    pacer.hold("chat.update", "T1", 3.0)
    order: list[str] = []
    bucket = pacer.bucket("chat.update", "T1")
    assert bucket is not None
    final = taken(order, "final", bucket)
    await clock.advance(2.9)
    assert order == [] and not pacer.try_take("chat.update", "T1")
    await clock.advance(0.1)
    assert order == ["final"]  # when the hold ends the final goes first
    second = taken(order, "second", bucket)
    await settle()
    await clock.advance(1.36)
    assert order == ["final"]  # the 429 slowed the rate to 45 a minute: a token in 1.33 s
    await clock.advance(0.03)  # and the margin after a token is due (0.05 s)
    assert order == ["final", "second"]
    await asyncio.gather(final, second)
    other = pacer.bucket("chat.update", "T2")
    assert other is not None and other is not bucket and other.held_until == 0.0


async def test_a_final_that_gives_up_its_turn_lets_the_next_one_go() -> None:
    clock = FakeClock()
    bucket = Bucket(clock, Limit(PER_MINUTE, burst=1), margin=0.0)
    order: list[str] = []
    first = taken(order, "first", bucket)
    await settle()
    waiting, behind = taken(order, "waiting", bucket), taken(order, "behind", bucket)
    await settle()
    waiting.cancel()  # its delivery stopped
    await clock.advance(1.0)
    assert order == ["first", "behind"]
    await asyncio.gather(first, behind)


def test_an_unlimited_method_is_not_paced() -> None:
    pacer = Pacer(FakeClock(), {"chat.update": Limit(0.0)})
    assert pacer.bucket("chat.update") is None and pacer.bucket("chat.delete") is None
    assert Limit(50.0).capacity == 4.0 and Limit(60.0).capacity == 5.0 and Limit(6.0).capacity == 1


def test_a_draft_call_without_a_spare_token_is_skipped_not_queued() -> None:
    clock = FakeClock()
    bucket = Bucket(clock, Limit(PER_MINUTE, burst=3), margin=0.0)
    assert [bucket.try_take() for _ in range(3)] == [True, True, False]  # one kept for a final
    assert bucket.tokens == 1.0 and not bucket._finals  # nobody waits


async def test_new_drafts_stop_where_the_finals_they_owe_fill_the_bucket() -> None:
    clock = FakeClock()
    bucket = Bucket(clock, Limit(PER_MINUTE, burst=5), margin=0.0)
    admitted = [bucket.admit() for _ in range(6)]
    assert admitted == [True, True, True, True, False, False]  # 4 finals owed + 1 kept
    assert [bucket.try_take(), bucket.try_take()] == [True, False]  # only beyond the 4 owed
    for _ in range(4):  # the four finals go at once, without waiting for a refill
        await asyncio.wait_for(bucket.take(), 0.1)
        bucket.settle()
    assert bucket.owed == 0
    await clock.advance(2.0)
    assert bucket.admit()  # room again


def test_a_429_halves_the_burst_and_slows_the_rate_and_quiet_grows_them_back() -> None:
    clock = FakeClock()
    bucket = Bucket(clock, Limit(PER_MINUTE, burst=20), margin=0.0)
    bucket.hold(2.0)
    assert (bucket.capacity, bucket.per_minute) == (10.0, 45.0)
    bucket.hold(1.0)  # a straggler of the same window, while held: nothing more
    assert bucket.capacity == 10.0
    clock._now += 2.5
    bucket.hold(2.0)  # a new 429 after the hold ended
    assert bucket.capacity == 5.0
    clock._now += 2.0 + QUIET_SECONDS
    bucket._refill(clock.monotonic())
    assert bucket.capacity == 6.0 and bucket.per_minute > 33.75
    clock._now += 20 * QUIET_SECONDS
    bucket._refill(clock.monotonic())
    assert (bucket.capacity, bucket.per_minute) == (20.0, PER_MINUTE)
    assert bucket.tokens == 20.0
