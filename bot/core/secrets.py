"""Every secret this process holds, and the one function that hides them in any text.

A secret is remembered where the process reads or receives it: each variable the config names as
a secret when it is read (`require_secret`), the token key, each Slack workspace's token as it is
decrypted, installed or refreshed, an MCP server's bearer token. The log handler (bot/ops/logs.py)
and the command line's output pass their text through `redact` as it is written, so a secret
learned after logging was set up is hidden from then on.

Two patterns cover what arrives before the code that receives it can remember it (slack_sdk logs
an `oauth.v2.access` answer, new tokens included, at DEBUG before returning it): the value of any
quoted key ending in `token`, `secret` or `password` (`'access_token': '…'`, `"client_secret":
"…"`), and anything shaped like a Slack token (`xoxb-…`, `xapp-…`, `xoxe.xoxp-…`, `xoxe-…`).
"""

from __future__ import annotations

import re
import threading

REDACTED = "[redacted]"
MIN_SECRET_LENGTH = 4  # shorter values would redact ordinary words
VALUES_PER_SLOT = 2  # a rotated token's predecessor stays valid a while: both are hidden

SECRET_FIELD = re.compile(
    r"""(?P<key>(?P<q>['"])[\w-]*(?:token|secret|password)(?P=q)\s*:\s*)"""
    r"""(?P<v>['"])(?:(?!(?P=v)).)+(?P=v)""",
    re.IGNORECASE,
)
"""A quoted key naming a secret, with its quoted value (a JSON object or a Python dict's repr)."""
SLACK_TOKEN = re.compile(r"\b(?:xox[a-z]|xapp)(?:\.xox[a-z])?-[A-Za-z0-9-]+")
"""Slack's token shapes: bot, user, app-level, configuration and rotating (refresh) tokens."""
TOKEN_IN_PATH = re.compile(r"(/(?:interactions|webhooks)/\d+/)[A-Za-z0-9_.-]+")
"""A Discord interaction's or webhook's token in a URL path (discord.py logs each request's URL
at DEBUG): whoever holds it can answer the interaction or post through the webhook."""

_lock = threading.Lock()
_lasting: set[str] = set()
_slots: dict[str, list[str]] = {}
_ordered: tuple[str, ...] = ()  # longest first: a secret that holds another is hidden whole


def remember_secret(value: str | None, slot: str | None = None) -> None:
    """From now on `value` is redacted everywhere. A `slot` (one workspace's bot token, say)
    keeps only its newest values, so a process that refreshes tokens for months holds a bounded
    set; a value without a slot is kept for the life of the process."""
    global _ordered
    secret = (value or "").strip()
    if len(secret) < MIN_SECRET_LENGTH:
        return
    with _lock:
        if slot is None:
            if secret in _lasting:
                return
            _lasting.add(secret)
        else:
            values = _slots.setdefault(slot, [])
            if secret in values:
                return
            values[:] = [*values, secret][-VALUES_PER_SLOT:]
        known = _lasting.union(*_slots.values())
        _ordered = tuple(sorted(known, key=len, reverse=True))


def redact(text: str) -> str:
    """`text` with every remembered secret, secret field, token in a URL path and Slack token
    replaced."""
    for secret in _ordered:
        if secret in text:
            text = text.replace(secret, REDACTED)
    text = SECRET_FIELD.sub(rf"\g<key>\g<v>{REDACTED}\g<v>", text)
    text = TOKEN_IN_PATH.sub(rf"\g<1>{REDACTED}", text)
    return SLACK_TOKEN.sub(REDACTED, text)
