"""Tokens encrypted at rest (docs/slack.md, "Tokens at rest" and "Rotating the key").

Fernet (`cryptography`): AES-128-CBC with an HMAC-SHA256 over it, so a token decrypted with the
wrong key is refused, never read as garbage. The keys are comma-separated, newest first: a token
is encrypted with the first and read with whichever fits (`MultiFernet`); start-up re-encrypts
every stored token with the first (`InstalledWorkspaces.check_key`). No key, a malformed one, or
one that fits no stored token: one line and exit 2; there is no plaintext fallback.
"""

from __future__ import annotations

import binascii

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from bot.config import require_secret
from bot.core.errors import ConfigError
from bot.core.secrets import remember_secret


def remember_tokens(team: str, bot_token: str | None, refresh_token: str | None = None) -> None:
    """A workspace's tokens are redacted from the moment the process holds them in plain text
    (decrypted, installed, refreshed); each kind keeps one slot per workspace, so years of
    rotation leave only each workspace's newest tokens in the registry."""
    remember_secret(bot_token, f"slack {team} bot token")
    remember_secret(refresh_token, f"slack {team} refresh token")


class TokenBox:
    def __init__(self, keys: str, setting: str = "slack.token_key_env") -> None:
        self.setting = setting
        for key in keys.split(","):
            remember_secret(key)  # each key alone: a log line may show one of the list
        try:
            fernets = [Fernet(key.strip().encode()) for key in keys.split(",") if key.strip()]
        except (ValueError, binascii.Error) as exc:
            raise ConfigError(
                f"{setting}: not a Fernet key (32 url-safe base64 bytes; make one with "
                '`python -c "from cryptography.fernet import Fernet; '
                'print(Fernet.generate_key().decode())"`)'
            ) from exc
        if not fernets:
            raise ConfigError(f"{setting}: no key given")
        self._box = MultiFernet(fernets)

    @classmethod
    def from_env(cls, env_name: str, setting: str = "slack.token_key_env") -> TokenBox:
        return cls(require_secret(env_name, setting), setting)

    def seal(self, token: str) -> str:
        return self._box.encrypt(token.encode()).decode()

    def open(self, sealed: str) -> str:
        try:
            return self._box.decrypt(sealed.encode()).decode()
        except InvalidToken as exc:
            raise self._wrong_key() from exc

    def reseal(self, sealed: str) -> str:
        """The same token under the newest key (unchanged when it is under it already)."""
        try:
            return self._box.rotate(sealed.encode()).decode()
        except InvalidToken as exc:
            raise self._wrong_key() from exc

    def _wrong_key(self) -> ConfigError:
        return ConfigError(
            f"{self.setting}: the key does not decrypt the stored Slack tokens (a wrong or "
            "removed key?)"
        )
