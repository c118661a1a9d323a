"""Access rules: refused before storage, no model call, the same for every platform."""

from __future__ import annotations

import pytest

from bot.config import AccessConfig
from bot.core.events import ConversationKey, IncomingMessage, ResetConversation
from bot.ops.access import AccessPolicy
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock
from tests.apps import make_app, step

CHANNEL = ConversationKey("slack", "T1", "C1")
DM = ConversationKey("slack", "T1", "D9")


def msg(
    author: str, key: ConversationKey = CHANNEL, n: int = 1, dm: bool = False
) -> IncomingMessage:
    return IncomingMessage(key, f"{author}-{n}", author, author, f"hi {n}", is_dm=dm)


async def test_a_blocked_user_gets_no_model_call_and_nothing_is_stored(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    frontend.platform = "slack"
    app = make_app(store, clock, replier, frontend, access={"block_users": ["slack:U666"]})
    events: list[tuple[str, dict[str, object]]] = []
    app.subscribe(lambda name, fields: events.append((name, fields)))
    result = await app.ingest(msg("U666"))
    assert result.status == "ignored"
    await step(app, clock)
    assert replier.calls == [] and frontend.posts == []
    assert await store.conversation_state(CHANNEL.id) is None
    assert (
        "refused",
        {"conversation": CHANNEL.id, "stage": "access", "reason": "blocked user"},
    ) in events
    assert (await app.ingest(msg("U1"))).status == "accepted"
    await step(app, clock)
    assert [c.texts for c in replier.calls] == [["hi 1"]]


@pytest.mark.parametrize(
    ("config", "author", "key", "dm", "reason"),
    [
        ({"block_users": ["U1"]}, "U1", CHANNEL, False, "blocked user"),
        ({"block_users": ["U1"], "admin_ids": ["U1"]}, "U1", CHANNEL, False, "blocked user"),
        ({"block_channels": ["C1"]}, "U1", CHANNEL, False, "blocked channel"),
        ({"block_workspaces": ["slack:T1"]}, "U1", CHANNEL, False, "blocked workspace"),
        ({"allow_users": ["U2"]}, "U1", CHANNEL, False, "user not on the allow list"),
        ({"allow_users": ["U2"]}, "U2", CHANNEL, False, None),
        ({"allow_users": ["discord:U1"]}, "U1", CHANNEL, False, "user not on the allow list"),
        ({"allow_channels": ["C2"]}, "U1", CHANNEL, False, "channel not on the allow list"),
        ({"allow_channels": ["C2"], "admin_ids": ["U1"]}, "U1", CHANNEL, False, None),
        ({"allow_workspaces": ["T2"]}, "U1", CHANNEL, False, "workspace not on the allow list"),
        ({"dm_policy": "off"}, "U1", DM, True, "direct messages are off"),
        ({"dm_policy": "off", "admin_ids": ["U1"]}, "U1", DM, True, None),
        ({"dm_policy": "allowlist"}, "U1", DM, True,
         "direct message from a user not on the allow list"),
        ({"dm_policy": "allowlist", "allow_users": ["U1"]}, "U1", DM, True, None),
        ({"dm_policy": "open", "allow_channels": ["C2"]}, "U1", DM, True, None),
        ({"dm_policy": "open"}, "U1", DM, True, None),
    ],
)  # fmt: skip
def test_each_list_and_the_dm_policy(
    config: dict[str, object], author: str, key: ConversationKey, dm: bool, reason: str | None
) -> None:
    policy = AccessPolicy(AccessConfig.model_validate(config))
    assert policy.refusal(key, author, dm) == reason


async def test_every_list_is_enforced_through_the_app(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    frontend.platform = "slack"
    access = {"allow_channels": ["C1"], "block_workspaces": ["T9"], "dm_policy": "off"}
    app = make_app(store, clock, replier, frontend, access=access)
    refused = [
        msg("U1", ConversationKey("slack", "T1", "C2")),
        msg("U1", ConversationKey("slack", "T9", "C1")),
        msg("U1", DM, dm=True),
    ]
    for event in refused:
        assert (await app.ingest(event)).status == "ignored", event
    assert (await app.ingest(msg("U1"))).status == "accepted"
    await step(app, clock)
    assert [c.texts for c in replier.calls] == [["hi 1"]]
    assert len(frontend.posts) == 1
    samples = app.metrics.refused.collect()[0].samples
    assert sum(s.value for s in samples if s.name.endswith("_total")) == 3


async def test_reset_follows_the_access_rules(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    app = make_app(store, clock, ScriptedReplier(), frontend, access={"block_users": ["U666"]})
    key = ConversationKey("test", "w1", "c1")
    await app.ingest(IncomingMessage(key, "m1", "U1", "alice", "remember 42"))
    await step(app, clock)
    assert (await app.ingest(ResetConversation(key, "U666"))).status == "ignored"
    assert (await app.ingest(ResetConversation(key, "U1"))).status == "history"
