"""Who is logged in to the operator's page, and what each login may do.

A login gives a session (a random id in an HttpOnly, SameSite=Strict cookie) with its role and
its CSRF token; sessions live in this process only, so a restart logs everyone out. Each action
form carries a one-time action id: the first request with it runs the action, any repeat (a
double click, a resubmitted form) gets the first one's answer and changes nothing.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from bot.config.loading import require_secret
from bot.config.sections import WebConfig
from bot.core.errors import ConfigError

Role = Literal["viewer", "operator"]
ACTIONS_REMEMBERED = 200  # per session: far more than a person clicks before a page reloads
SESSIONS_KEPT = 1000  # the oldest session goes first past this (a login flood cannot grow memory)
CLIENTS_TRACKED = 10_000
MIN_TOKEN_CHARS = 16  # a login token is a password an attacker may guess at the rate limit


def login_tokens(config: WebConfig, environ: Mapping[str, str] | None = None) -> dict[Role, str]:
    """Each role's token from the environment; a variable that is not set, or a token short
    enough to guess, is one config line."""
    tokens: dict[Role, str] = {"operator": _token(config.token_env, "web.token_env", environ)}
    if config.viewer_token_env:
        tokens["viewer"] = _token(config.viewer_token_env, "web.viewer_token_env", environ)
    if tokens.get("viewer") == tokens["operator"]:
        raise ConfigError(
            "web.viewer_token_env: the viewer's token must differ from the operator's"
        )
    return tokens


def _token(env_name: str, setting: str, environ: Mapping[str, str] | None) -> str:
    token = require_secret(env_name, setting, environ).strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"{setting}: the token in {env_name} is too short (at least {MIN_TOKEN_CHARS} "
            "characters; `openssl rand -base64 32` makes one)"
        )
    return token


def role_of(token: str, tokens: Mapping[Role, str]) -> Role | None:
    """The role `token` logs in as; every token is compared in constant time."""
    found: Role | None = None
    for role, expected in tokens.items():
        if hmac.compare_digest(token.encode(), expected.encode()):
            found = role
    return found


@dataclass(eq=False)
class Session:
    role: Role
    csrf: str
    expires_at: float
    done: OrderedDict[str, asyncio.Future[str]] = field(default_factory=OrderedDict)

    async def once(self, action_id: str, run: Callable[[], Awaitable[str]]) -> str:
        """The outcome of the action `action_id` names: run by the first request that carries
        it, shared with every later one (marked before the first await, so two requests at
        once cannot both run it)."""
        known = self.done.get(action_id)
        if known is not None:
            return await asyncio.shield(known)
        outcome: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.done[action_id] = outcome
        while len(self.done) > ACTIONS_REMEMBERED:
            self.done.popitem(last=False)
        try:
            result = await run()
        except asyncio.CancelledError:  # it may not have run: a repeat may try again
            self.done.pop(action_id, None)
            outcome.cancel()
            raise
        except Exception as exc:
            outcome.set_exception(exc)
            outcome.exception()  # retrieved: a repeat re-raises it, nobody else needs to
            raise
        outcome.set_result(result)
        return result


@dataclass(eq=False)
class Sessions:
    lifetime: float
    sessions: OrderedDict[str, Session] = field(default_factory=OrderedDict)

    def start(self, role: Role, now: float) -> tuple[str, Session]:
        session_id = secrets.token_urlsafe(32)
        session = Session(role, secrets.token_urlsafe(32), now + self.lifetime)
        self.sessions[session_id] = session
        while len(self.sessions) > SESSIONS_KEPT:
            self.sessions.popitem(last=False)
        return session_id, session

    def get(self, session_id: str | None, now: float) -> Session | None:
        session = self.sessions.get(session_id or "")
        if session is None or session.expires_at <= now:
            self.sessions.pop(session_id or "", None)
            return None
        return session

    def end(self, session_id: str | None) -> None:
        self.sessions.pop(session_id or "", None)


@dataclass(eq=False)
class LoginLimiter:
    """At most `attempts` failed logins per client address within `window` seconds."""

    attempts: int
    window: float
    failures: OrderedDict[str, deque[float]] = field(default_factory=OrderedDict)

    def refused(self, client: str, now: float) -> bool:
        recent = self.failures.get(client)
        if recent is None:
            return False
        while recent and recent[0] <= now - self.window:
            recent.popleft()
        return len(recent) >= self.attempts

    def failed(self, client: str, now: float) -> None:
        self.failures.setdefault(client, deque()).append(now)
        self.failures.move_to_end(client)
        while len(self.failures) > CLIENTS_TRACKED:
            self.failures.popitem(last=False)


def new_action_id() -> str:
    return secrets.token_urlsafe(16)


def same_secret(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())
