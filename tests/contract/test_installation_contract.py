"""What every store keeps of workspaces installed through OAuth: one row per workspace, replaced
by a reinstall, refreshed by one claimant at a time, deleted with its tokens; single-use OAuth
states; a workspace's pending replies failed and its conversations erased on request. Run against
every backend (see conftest)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from bot.core.events import ConversationKey, IncomingMessage
from bot.core.installations import InstallationRecord, forget_workspace
from bot.core.store import Committed, FinalCheck, NewReply, Timing
from storage.sql_store import SqlStore
from tests.contract.conftest import Backend

NOW = 1_000.0
T = Timing(quiet_seconds=1.0, max_wait_seconds=8.0)
T1 = InstallationRecord(
    team_id="T1", enterprise_id="", team_name="Acme", app_id="A1", bot_user_id="UB1",
    bot_id="B1", bot_scopes="chat:write", installer_id="U1", bot_token="sealed-1",
    refresh_token="sealed-r1", expires_at=NOW + 60, installed_at=NOW,
)  # fmt: skip


async def test_an_install_is_kept_replaced_by_a_reinstall_and_deleted(store: SqlStore) -> None:
    assert await store.installation("T1") is None
    await store.save_installation(T1, NOW)
    await store.save_installation(replace(T1, team_id="T2", team_name="Globex"), NOW + 1)
    assert await store.installation("T1") == T1
    await store.save_installation(replace(T1, bot_token="sealed-2"), NOW + 2)
    again = await store.installation("T1")
    assert again is not None and again.bot_token == "sealed-2" and again.token_version == 2
    assert [r.team_id for r in await store.installations()] == ["T2", "T1"]  # by install time
    assert await store.delete_installation("T1")
    assert not await store.delete_installation("T1")
    assert await store.installation("T1") is None


async def test_one_of_two_claimants_refreshes_and_a_stale_version_changes_nothing(
    backend: Backend,
) -> None:
    a, b = await backend.new_store(), await backend.new_store()
    await a.save_installation(T1, NOW)
    won = await asyncio.gather(
        a.claim_token_refresh("T1", 1, "a", 30, NOW), b.claim_token_refresh("T1", 1, "b", 30, NOW)
    )
    assert sorted(won) == [False, True]
    winner, loser = ("a", "b") if won[0] else ("b", "a")
    assert await a.store_refreshed_token("T1", 1, loser, "x", "y", NOW + 120) is None
    assert await a.store_refreshed_token("T1", 1, winner, "sealed-3", "r3", NOW + 120) == 2
    assert await a.store_refreshed_token("T1", 1, winner, "late", "late", NOW + 120) is None
    stored = await b.installation("T1")
    assert stored is not None and (stored.bot_token, stored.token_version) == ("sealed-3", 2)
    assert not await a.claim_token_refresh("T1", 1, "a", 30, NOW)  # that version is gone
    assert await a.claim_token_refresh("T1", 2, "a", 30, NOW)


async def test_an_expired_refresh_claim_can_be_taken_over(store: SqlStore) -> None:
    await store.save_installation(T1, NOW)
    assert await store.claim_token_refresh("T1", 1, "a", 30, NOW)
    assert not await store.claim_token_refresh("T1", 1, "b", 30, NOW + 10)
    assert await store.claim_token_refresh("T1", 1, "b", 30, NOW + 31)


async def test_an_oauth_state_is_used_once_and_not_after_it_expires(store: SqlStore) -> None:
    await store.add_oauth_state("s1", NOW + 600)
    await store.add_oauth_state("s2", NOW + 600)
    assert await store.consume_oauth_state("s1", NOW)
    assert not await store.consume_oauth_state("s1", NOW)
    assert not await store.consume_oauth_state("never-issued", NOW)
    assert not await store.consume_oauth_state("s2", NOW + 601)


async def test_a_workspace_s_replies_fail_and_its_conversations_are_erased_alone(
    store: SqlStore,
) -> None:
    t1, t3 = (ConversationKey("slack", team, "D1") for team in ("T1", "T3"))
    for n, key in enumerate((t1, t3)):
        await store.ingest(IncomingMessage(key, f"D1:{n}.0", "U1", "alice", "hello"), NOW, T)
        lease = await store.acquire_lease(key.id, "o1", NOW + 2, 30.0)
        assert lease is not None
        check = FinalCheck(lease.token, lease.version, False)
        assert isinstance(await store.commit(key.id, check, NOW + 2, T, NewReply("hi")), Committed)
    assert await store.workspace_conversations("slack", "T3") == [t3.id]
    assert await store.fail_workspace_replies("slack", "T3", "uninstalled", NOW + 3) == 1
    assert [(r.state, r.last_error) for r in await store.replies(t3.id)] == [
        ("failed", "uninstalled")
    ]
    assert [r.state for r in await store.replies(t1.id)] == ["pending"]
    counts = await forget_workspace(store, "slack", "T3")
    assert counts["conversations"] == 1 and counts["messages"] == 1
    assert [m.text for m in await store.messages(t1.id)] == ["hello"]
    assert [m.text for m in await store.messages(t3.id)] == [""]
