"""The Messages API's limits shared through the store (bot/core/admission.py): one row per API
key's name, read with its age, replaced only by a save that finds the version it read. Run
against every backend; the races run on separate connections where the backend shares a
database."""

from __future__ import annotations

import asyncio

from bot.core.admission import Budget, Limits
from storage.sql_store import SqlStore
from tests.contract.conftest import Backend

NOW = 1_000.0
HEARD = Limits({"requests": Budget(50.0, 12.0, 50.0 / 60.0)}, held=3.0, reason="429")


async def test_limits_are_saved_once_then_replaced_only_at_the_version_read(
    store: SqlStore,
) -> None:
    assert await store.api_limits("anthropic:k1", NOW) is None
    assert await store.save_api_limits("anthropic:k1", HEARD, None, NOW)
    assert not await store.save_api_limits("anthropic:k1", Limits({}), None, NOW)  # there already
    shared = await store.api_limits("anthropic:k1", NOW + 2.5)
    assert shared is not None and shared.limits == HEARD
    assert shared.age == 2.5  # on the caller's clock, as far from its now as saved
    fewer = Limits({"requests": Budget(50.0, 11.0, 50.0 / 60.0)}, answered=True)
    assert await store.save_api_limits("anthropic:k1", fewer, shared.version, NOW + 3)
    assert not await store.save_api_limits("anthropic:k1", HEARD, shared.version, NOW + 3)
    again = await store.api_limits("anthropic:k1", NOW + 3)
    assert again is not None and again.limits == fewer and again.version > shared.version
    assert await store.api_limits("anthropic:k2", NOW) is None  # another key's limits: its own


async def test_of_two_saves_at_one_version_exactly_one_wins(backend: Backend) -> None:
    first, second = await backend.new_store(), await backend.new_store()
    assert await first.save_api_limits("anthropic:k1", HEARD, None, NOW)
    shared = await first.api_limits("anthropic:k1", NOW)
    assert shared is not None
    saves = [
        store.save_api_limits("anthropic:k1", Limits({}, held=float(n)), shared.version, NOW)
        for n, store in enumerate([first, second] * 4)
    ]
    assert sum(await asyncio.gather(*saves)) == 1
