"""The processes running the bot (bot/core/processes.py): one row per owner name, written by its
first refresh, only stamped seen by the later ones, deleted at a clean shutdown, pruned once not
seen for long enough. Run against every backend; the two processes run on separate connections
where the backend shares a database."""

from __future__ import annotations

from bot.core.processes import ProcessRecord
from storage.sql_store import SqlStore
from tests.contract.conftest import Backend

NOW = 1_000.0


async def test_a_process_is_written_once_then_only_seen_again(store: SqlStore) -> None:
    assert await store.processes(NOW) == []
    await store.see_process("host-a:1:ab", "host-a", 1, "0.1.0", NOW)
    await store.see_process("host-a:1:ab", "host-a", 99, "9.9.9", NOW + 5)  # only seen again
    assert await store.processes(NOW + 7) == [
        ProcessRecord("host-a:1:ab", "host-a", 1, "0.1.0", started_at=NOW, seen_at=NOW + 5)
    ]


async def test_two_processes_are_listed_by_name_and_one_leaves_alone(backend: Backend) -> None:
    first, second = await backend.new_store(), await backend.new_store()
    await first.see_process("host-b:7:cd", "host-b", 7, "0.1.0", NOW)
    await second.see_process("host-a:1:ab", "host-a", 1, "0.1.0", NOW + 1)
    listed = await first.processes(NOW + 2)
    assert [(p.owner, p.pid, p.seen_at) for p in listed] == [
        ("host-a:1:ab", 1, NOW + 1),
        ("host-b:7:cd", 7, NOW),
    ]
    assert await second.forget_process("host-a:1:ab")
    assert not await second.forget_process("host-a:1:ab")  # gone already
    assert [p.owner for p in await first.processes(NOW + 3)] == ["host-b:7:cd"]


async def test_only_the_rows_not_seen_for_long_enough_are_pruned(store: SqlStore) -> None:
    await store.see_process("old:1:aa", "old", 1, "0.1.0", NOW)
    await store.see_process("recent:2:bb", "recent", 2, "0.1.0", NOW + 50)
    assert await store.prune_processes(100.0, NOW + 100) == 0  # exactly 100 s: not yet
    assert await store.prune_processes(100.0, NOW + 101) == 1
    assert [p.owner for p in await store.processes(NOW + 101)] == ["recent:2:bb"]
    assert await store.prune_processes(100.0, NOW + 101) == 0  # running it again: harmless
