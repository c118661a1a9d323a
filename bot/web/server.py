"""The operator's page on aiohttp (already a dependency: discord.py's HTTP client, `/metrics`).

Every request passes two gates before a page: the Host header must name the configured address
(a DNS-rebinding page elsewhere cannot reach it through the browser), and a session is needed
(else a redirect to the login). Every POST but the login's carries the session's CSRF token,
and the actions (retry, erase) need the operator's role: a viewer gets 403. The actions are the
command line's own (`bot/ops/requeue.py`, `bot/ops/retention.py`), each run once per action id.
"""

from __future__ import annotations

import logging
import secrets
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bot.config import Config
from bot.config.sections import WebConfig
from bot.core.clock import Clock
from bot.core.errors import BurstbotError, ConfigError
from bot.core.events import ConversationKey
from bot.ops.requeue import requeue_reply
from bot.ops.retention import forget
from bot.ops.usage import PriceTable, parse_since
from bot.web import pages, views
from bot.web.auth import LoginLimiter, Session, Sessions, login_tokens, role_of, same_secret

if TYPE_CHECKING:
    from bot.tool_servers import McpHub
    from storage.sql_store import SqlStore

log = logging.getLogger("burstbot.web")

SESSION_COOKIE = "burstbot_session"
LOGIN_COOKIE = "burstbot_login"  # the login form's CSRF token (double submit)
ACTIONS = frozenset({"/retry", "/erase"})
DEFAULT_USAGE_SINCE = "30d"
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
Panel = Callable[["SqlStore[Any]", float], Awaitable[str]]
"""An extra section of the usage page (feedback votes, say): given the store and the `since`
of the page, it returns HTML whose every stored text went through `pages.shown`."""
SESSION_KEY = web.RequestKey("session", Session)


@dataclass(eq=False)
class WebContext:
    """What the pages read and the actions act on: from `burstbot run`, its process (its name
    on leases, its MCP servers, its scheduler's wake-up); from `burstbot web`, the store alone."""

    config: Callable[[], Config]
    store: SqlStore[Any]
    clock: Clock
    owner: str | None = None
    hub: McpHub | None = None
    wake: Callable[[], None] | None = None  # a re-queued reply goes out now, not at the next poll
    panels: list[Panel] = field(default_factory=list)


class WebServer:
    def __init__(
        self, settings: WebConfig, context: WebContext, environ: Mapping[str, str] | None = None
    ) -> None:
        self.settings = settings
        self.context = context
        self.tokens = login_tokens(settings, environ)  # a missing variable: one config line
        self.sessions = Sessions(settings.session_hours * 3600)
        self.limiter = LoginLimiter(settings.login_attempts, settings.login_window_seconds)
        self.port = settings.port
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        host = self.settings.host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}/"

    # lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        app = web.Application(middlewares=[self._gate])
        app.router.add_get("/login", self._login_form)
        app.router.add_post("/login", self._login)
        app.router.add_post("/logout", self._logout)
        app.router.add_get("/", self._overview)
        app.router.add_get("/conversation", self._conversation)
        app.router.add_get("/usage", self._usage)
        app.router.add_get("/erase", self._erase_form)
        app.router.add_post("/erase", self._erase)
        app.router.add_post("/retry", self._retry)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        host = self.settings.host
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, self.port))
        except OSError as exc:
            sock.close()
            await self.stop()
            raise ConfigError(f"web: cannot listen on {host}:{self.port} ({exc})") from exc
        self.port = int(sock.getsockname()[1])  # the real one when configured as 0
        await web.SockSite(self._runner, sock).start()
        log.info("operator page on %s", self.url)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def now(self) -> float:
        return self.context.clock.now()

    # the gates -------------------------------------------------------------------------------
    def _host_allowed(self, request: web.Request) -> bool:
        host = self.settings.host
        if host in ("0.0.0.0", "::"):
            return True  # every address: the operator chose to expose it (behind a proxy)
        named = f"[{host}]" if ":" in host else host
        own = (f"{named}:{self.port}", *((named,) if self.port == 80 else ()))
        return request.host in own or request.host in self.settings.proxy_hosts

    @web.middleware
    async def _gate(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if not self._host_allowed(request):
            response: web.StreamResponse = web.Response(status=421, text="misdirected request")
        else:
            try:
                response = await self._checked(request, handler)
            except web.HTTPException as exc:  # a redirect, a bad request
                exc.headers.update(HEADERS)
                raise
        response.headers.update(HEADERS)
        return response

    async def _checked(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path == "/login":
            return await handler(request)
        session = self.sessions.get(request.cookies.get(SESSION_COOKIE), self.now())
        if session is None:
            raise web.HTTPSeeOther("/login")
        if request.method == "POST":
            form = await request.post()
            if not same_secret(str(form.get("csrf", "")), session.csrf):
                return self._refuse(403, "missing or wrong CSRF token: reload the page", session)
        if request.path in ACTIONS and session.role != "operator":
            return self._refuse(403, "a viewer may look but not act", session)
        request[SESSION_KEY] = session
        return await handler(request)

    def _refuse(self, status: int, text: str, session: Session | None = None) -> web.Response:
        return _html(pages.message_page("refused", text, session), status)

    # login -----------------------------------------------------------------------------------
    async def _login_form(self, request: web.Request) -> web.Response:
        return self._login_page()

    def _login_page(self, error: str | None = None, status: int = 200) -> web.Response:
        token = secrets.token_urlsafe(24)
        response = _html(pages.login_page(token, error), status)
        response.set_cookie(LOGIN_COOKIE, token, httponly=True, samesite="Strict", path="/login")
        return response

    async def _login(self, request: web.Request) -> web.Response:
        client, now = request.remote or "?", self.now()
        if self.limiter.refused(client, now):
            wait = self.settings.login_window_seconds
            return self._login_page(f"too many failed logins: try again in {wait:g} s", 429)
        form = await request.post()
        expected = request.cookies.get(LOGIN_COOKIE, "")
        if not expected or not same_secret(str(form.get("csrf", "")), expected):
            return self._login_page("missing or wrong CSRF token: log in from this page", 403)
        role = role_of(str(form.get("token", "")), self.tokens)
        if role is None:
            self.limiter.failed(client, now)
            log.warning("web: failed login from %s", client)
            return self._login_page("wrong token", 401)
        session_id, _ = self.sessions.start(role, now)
        response = web.HTTPSeeOther("/")
        response.set_cookie(SESSION_COOKIE, session_id, httponly=True, samesite="Strict",
                            path="/", max_age=round(self.sessions.lifetime))  # fmt: skip
        response.del_cookie(LOGIN_COOKIE, path="/login")
        raise response

    async def _logout(self, request: web.Request) -> web.Response:
        self.sessions.end(request.cookies.get(SESSION_COOKIE))
        response = web.HTTPSeeOther("/login")
        response.del_cookie(SESSION_COOKIE, path="/")
        raise response

    # pages -----------------------------------------------------------------------------------
    async def _overview(self, request: web.Request) -> web.Response:
        session = request[SESSION_KEY]
        configured = [server.name for server in self.context.config().tools.mcp]
        data = await views.overview(self.context.store, self.now(), self.context.owner,
                                    configured, self.context.hub)  # fmt: skip
        flash = _flash(session, request)
        return _html(pages.overview_page(data, self.now(), session, flash, self._refresh))

    @property
    def _refresh(self) -> float:
        return self.settings.refresh_seconds

    async def _conversation(self, request: web.Request) -> web.Response:
        session = request[SESSION_KEY]
        conversation_id = _conversation_id(request.query.get("id", ""))
        found = await views.timeline(self.context.store, conversation_id, self.now())
        if found is None:
            return _html(pages.message_page("not found", f"no conversation {conversation_id!r}",
                                            session), 404)  # fmt: skip
        flash = _flash(session, request)
        return _html(pages.timeline_page(found, session, flash, self._refresh))

    async def _usage(self, request: web.Request) -> web.Response:
        session = request[SESSION_KEY]
        text = request.query.get("since", "").strip() or DEFAULT_USAGE_SINCE
        try:
            since = parse_since(text, self.now())
        except ValueError as exc:
            return _html(pages.message_page("usage", str(exc), session), 400)
        store, prices = self.context.store, PriceTable(self.context.config().prices)
        data = await views.usage(store, prices, since)
        panels = [await panel(store, since) for panel in self.context.panels]
        return _html(pages.usage_page(data, session, panels, text))

    async def _erase_form(self, request: web.Request) -> web.Response:
        conversation_id = _conversation_id(request.query.get("id", ""))
        return _html(pages.erase_page(conversation_id, request[SESSION_KEY]))

    # actions ---------------------------------------------------------------------------------
    async def _erase(self, request: web.Request) -> web.Response:
        session, form = request[SESSION_KEY], await request.post()
        conversation_id = _conversation_id(str(form.get("conversation", "")))
        if form.get("confirm") != "yes":
            return self._refuse(400, "an erase needs its confirmation", session)

        async def erase() -> str:
            log.warning("web: the operator erases conversation %s", conversation_id)
            try:
                return await forget(self.context.store, self.now(), None, conversation_id)
            except BurstbotError as exc:  # the store failed part-way: erasing again finishes it
                return f"erase failed, erase it again: {exc}"

        action = _action_id(form)
        await session.once(action, erase)
        raise web.HTTPSeeOther(f"/?done={action}")

    async def _retry(self, request: web.Request) -> web.Response:
        session, form = request[SESSION_KEY], await request.post()
        reply, conversation_id = str(form.get("reply", "")), str(form.get("conversation", ""))
        if not reply.isdigit():
            return self._refuse(400, f"not a reply id: {reply!r}", session)

        async def retry() -> str:
            try:
                outcome = await requeue_reply(self.context.store, int(reply), self.now())
            except BurstbotError as exc:  # not failed (any more), or gone: nothing changes
                return str(exc)
            if self.context.wake is not None:
                self.context.wake()
            return outcome

        action = _action_id(form)
        await session.once(action, retry)
        back = pages.conversation_url(conversation_id) + "&" if conversation_id else "/?"
        raise web.HTTPSeeOther(f"{back}done={action}")


def _html(body: str, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/html", charset="utf-8")


def _flash(session: Session, request: web.Request) -> str | None:
    """The outcome of the action the redirect names (`?done=`), once it has one."""
    outcome = session.done.get(request.query.get("done", ""))
    if outcome is None or not outcome.done() or outcome.cancelled() or outcome.exception():
        return None
    return outcome.result()


def _conversation_id(text: str) -> str:
    try:
        return ConversationKey.parse(text).id
    except ValueError:
        raise web.HTTPBadRequest(text="not a conversation id") from None


def _action_id(form: Mapping[str, Any]) -> str:
    action = str(form.get("action", ""))
    if not action or len(action) > 64:
        raise web.HTTPBadRequest(text="an action needs its action id: reload the page")
    return action
