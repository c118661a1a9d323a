"""Fences count down on the monotonic clock from the expiry the database stamped (G12).

A delivery claim or a lease is trusted until a third of its TTL before that expiry: a claim that
took long to come back is trusted for less (not from when it returned), a wall clock set back
stretches nothing, and a watch that starts late renews the lease at once.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from bot.core.clock import trusted_until
from bot.core.errors import ClaimLost
from bot.core.outbox import ClaimFence
from bot.core.signals import Signals
from bot.core.store import FinalCheck, NewReply, OutboxRow, Timing
from bot.core.supervisor import Supervision, Supervisor
from storage.sqlite import SqliteStore
from testkit.clock import FakeClock, OffsetClock
from tests.conftest import KEY, SETTINGS, message

TTL = 30.0
TIMING = Timing(1.5, 8.0)


async def claimed_reply(store: SqliteStore, now: float) -> OutboxRow:
    await store.ingest(message(1), now, TIMING)
    lease = await store.acquire_lease(KEY.id, "w1", now, TTL)
    assert lease is not None
    await store.commit(KEY.id, FinalCheck(lease.token, lease.version, False), now, TIMING,
                       NewReply("hello"))  # fmt: skip
    [row] = await store.claim_replies("w1", now, TTL, [KEY.platform], 1)
    return row


def test_trust_ends_a_third_of_the_ttl_before_the_expiry_on_the_monotonic_clock() -> None:
    clock = OffsetClock(FakeClock(start=5_000.0), offset=-3_600.0)  # wall and monotonic differ
    assert trusted_until(clock, clock.now() + TTL, TTL) == 5_000.0 + 20.0
    assert trusted_until(clock, clock.now() + 12.0, TTL) == 5_000.0 + 2.0


async def test_a_claim_that_came_back_late_is_trusted_from_its_stamped_expiry(
    store: SqliteStore, clock: FakeClock
) -> None:
    row = await claimed_reply(store, clock.now())
    clock.jump(15.0)  # the claim's answer took half the TTL to arrive
    fence = ClaimFence(clock, TTL, store, row)
    await clock.advance(4.9)
    fence.check()
    await clock.advance(0.1)  # 20 s after the claim was stamped, 5 s after it came back
    with pytest.raises(ClaimLost):
        fence.check()


async def test_a_wall_clock_set_back_does_not_stretch_a_claim(store: SqliteStore) -> None:
    base = FakeClock()
    clock = OffsetClock(base, offset=0.0)
    fence = ClaimFence(clock, TTL, store, await claimed_reply(store, clock.now()))
    clock.offset = -3_600.0  # the host's clock is stepped back an hour
    await base.advance(20.0)
    with pytest.raises(ClaimLost):
        fence.check()


async def test_a_renewal_moves_the_fence_to_the_new_expiry(
    store: SqliteStore, clock: FakeClock
) -> None:
    row = await claimed_reply(store, clock.now())
    fence = ClaimFence(clock, TTL, store, row)
    assert fence.renewal_due_in() == pytest.approx(10.0)
    await clock.advance(10.0)
    expires_at = await store.renew_claim(row.id, row.claim_token, clock.now(), TTL)
    assert expires_at == clock.now() + TTL
    fence.renewed(expires_at)
    await clock.advance(19.9)
    fence.check()


async def test_a_watch_that_starts_late_renews_the_lease_at_once(
    store: SqliteStore, clock: FakeClock
) -> None:
    settings = replace(SETTINGS, lease_ttl_seconds=TTL)
    await store.ingest(message(1), clock.now(), TIMING)
    lease = await store.acquire_lease(KEY.id, "w1", clock.now(), TTL)
    assert lease is not None
    clock.jump(12.0)  # collecting the burst was slow: 18 s of the lease are left
    renewals: list[float] = []
    never: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    generation = asyncio.ensure_future(never)
    watch = asyncio.create_task(
        Supervisor(store, clock, settings, Signals()).watch(
            generation, lease, 1e12, renewals.append
        )
    )
    async with asyncio.timeout(5.0):  # the store's thread answers the renewal
        while not renewals:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
    assert renewals == [clock.now() + TTL]
    generation.cancel()
    assert await watch is Supervision.DONE
