"""Installations at rest: Bolt's stores on ours, tokens encrypted with the key from the
environment (never in the clear in the database file), single-use signed OAuth states."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cryptography.fernet import Fernet
from slack_sdk.oauth.installation_store.models.installation import Installation

from adapters.slack.install import BOT_SCOPES, StoreInstallations, StoreOAuthStates
from adapters.slack.token_box import TokenBox
from bot.core.errors import ConfigError
from storage.sqlite import SqliteStore
from testkit.clock import FakeClock

BOT_TOKEN = "xoxb-1111-secret-bot-token"
REFRESH_TOKEN = "xoxe-1-secret-refresh-token"


def installation(team: str = "T1") -> Installation:
    return Installation(
        app_id="A1", team_id=team, team_name="Acme", bot_token=BOT_TOKEN, bot_id="B1",
        bot_user_id="UB1", bot_scopes="chat:write,im:history", bot_refresh_token=REFRESH_TOKEN,
        bot_token_expires_in=43_200, user_id="U1",
    )  # fmt: skip


async def test_tokens_are_stored_encrypted_and_read_back_with_the_key(tmp_path: Path) -> None:
    path = tmp_path / "bot.db"
    store = SqliteStore(str(path))
    await store.open()
    box = TokenBox(Fernet.generate_key().decode())
    installations = StoreInstallations(store, box, FakeClock())
    await installations.async_save(installation())
    bot = await installations.async_find_bot(enterprise_id=None, team_id="T1")
    assert bot is not None and bot.bot_token == BOT_TOKEN and bot.bot_refresh_token == REFRESH_TOKEN
    assert await installations.async_find_bot(enterprise_id=None, team_id="T2") is None
    await store.close()
    raw = b"".join(p.read_bytes() for p in sorted(tmp_path.iterdir()))  # noqa: ASYNC240 (file, WAL)
    assert b"xoxb-" not in raw and b"xoxe-" not in raw and b"secret" not in raw
    assert b"Acme" in raw  # the file was read: the workspace's name is there in the clear


def test_a_wrong_or_malformed_key_is_one_line_never_a_plaintext_fallback() -> None:
    sealed = TokenBox(Fernet.generate_key().decode()).seal(BOT_TOKEN)
    with pytest.raises(ConfigError, match=r"^slack.token_key_env: the key does not decrypt"):
        TokenBox(Fernet.generate_key().decode()).open(sealed)
    with pytest.raises(ConfigError, match=r"^slack.token_key_env: not a Fernet key"):
        TokenBox("not-a-key")
    with pytest.raises(ConfigError, match=r"^slack.token_key_env: environment variable"):
        TokenBox.from_env("BURSTBOT_TEST_NO_SUCH_KEY")


def test_a_new_key_in_front_reads_old_tokens_and_reseals_them_under_itself() -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    sealed = TokenBox(old).seal(BOT_TOKEN)
    both = TokenBox(f"{new},{old}")
    resealed = both.reseal(sealed)
    assert TokenBox(new).open(resealed) == BOT_TOKEN
    with pytest.raises(ConfigError):
        TokenBox(new).open(sealed)


async def test_an_oauth_state_is_signed_single_use_and_expires() -> None:
    store = SqliteStore(":memory:")
    await store.open()
    clock = FakeClock()
    states = StoreOAuthStates(store, "state-secret", clock)
    first, second = await states.async_issue(), await states.async_issue()
    nonce, _, signature = first.rpartition(".")
    assert not await states.async_consume(f"{nonce}.{'0' * len(signature)}")  # forged
    assert not await StoreOAuthStates(store, "another secret", clock).async_consume(first)
    assert await states.async_consume(first)
    assert not await states.async_consume(first)  # used once already
    await clock.advance(601)
    assert not await states.async_consume(second)  # expired
    await store.close()


def test_the_install_asks_for_the_manifest_s_bot_scopes() -> None:
    manifest = Path(__file__).parent.parent / "adapters" / "slack" / "manifest.yml"
    scopes = yaml.safe_load(manifest.read_text())["oauth_config"]["scopes"]["bot"]
    assert tuple(scopes) == BOT_SCOPES
