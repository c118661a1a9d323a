"""Several fake Slack workspaces behind one Slack, with the OAuth install flow ("Add to Slack").

`FakeSlackGrid` serves the Web API at one URL, as slack.com does, for any number of workspaces
(each a `FakeSlackApi` holding its own channels, messages and bot identity): a call goes to the
workspace whose bot token it carries; a token no workspace issued, or one whose workspace
uninstalled the app, is `invalid_auth`, and so is a call with one workspace's token on a channel
of another (the isolation a multi-workspace bot must keep; counted in `cross_team`).

OAuth as Slack runs it:

- `GET /oauth/v2/authorize?client_id=…&scope=…&state=…[&redirect_uri=…]`: the page where a person
  picks the workspace (`<select id="team">`) and presses Allow (`#allow`) or Cancel (`#cancel`);
  an unknown client id gets Slack's error page. Allow redirects to the redirect URL (the one
  given, else the app's `redirect_url`) with `code` and `state`; Cancel with
  `error=access_denied` and `state`;
- `oauth.v2.access` (the app's id and secret by HTTP Basic auth or form fields): a code once →
  the workspace's bot token (`xoxb-<team>-<n>`), its bot user, scopes and team; a code used twice
  or unknown is `invalid_code`. With `token_lifetime` (seconds) the token expires (`expires_in`)
  and comes with a refresh token; `grant_type=refresh_token` with the workspace's current refresh
  token issues a new pair (counted in `refreshes`), an old or unknown one is
  `invalid_refresh_token`. An access token stays valid until it expires, then `token_expired`.
  `token_format` and `refresh_format` shape the tokens issued (a test gives each a marker to look
  for in the logs).

An app made from a manifest, as a new user makes it ("Create New App" → "From a manifest",
then "Install to Workspace"): `create_app(manifest_text)` reads the YAML as Slack's app
settings do (refusing what Slack refuses: both AI views at once, an `agent_view` without its
`agent_description`, HTTP mode without a `request_url`) and takes its events URL, bot scopes and
event subscriptions from it; `install_app(team)` issues the workspace's bot token and gives the
workspace what the manifest declares (its AI view, the `assistant:write` scope, the
`agent_session_stopped` subscription). From then on Slack sends only the events the app
subscribes to: `open_messages_tab(team, user)` (`app_home_opened` in the Messages tab),
`look_at(team, user, channel)` (`app_context_changed`, agent view only) and `say`, and
`journal` lists, in order, each event sent and each Web API call answered.

`say(team, channel, text)` is a person writing in a workspace (history, then one signed event
to the bot); `uninstall(team)` revokes the workspace's tokens and sends `tokens_revoked` and
`app_uninstalled`, as Slack does. By hand: `python -m testkit.fake_slack_grid --port 8766
--events-url http://127.0.0.1:3000/slack/events --signing-secret S --client-id ID
--client-secret SECRET --redirect-url http://127.0.0.1:3000/slack/oauth_redirect
--workspace T1:Acme --workspace T2:Globex`; `POST /fake/say` (form: `team`, `channel`, `text`,
optional `user`) and `POST /fake/uninstall` (form: `team`) do the same as the methods; `GET
/fake/posts` lists what the bot posted in each workspace.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import html
import itertools
import json
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import yaml  # type: ignore[import-untyped]
from aiohttp import web

from testkit.fake_slack import EventSender, FakeSlackApi, api_arguments, event_callback
from testkit.fake_slack_agents import app_context_changed, app_home_opened, viewer_authorizations
from testkit.serving import serve_locally

APP_ID = "A0001"
SCOPES = "app_mentions:read,channels:history,chat:write,im:history"


class GridWorkspace(FakeSlackApi):
    """One workspace of the grid: a `FakeSlackApi` whose bot tokens the grid issues."""

    def __init__(
        self, team: str, team_name: str, bot_user: str, bot_id: str, clock: Callable[[], float]
    ) -> None:
        super().__init__(token="", team=team, team_name=team_name, bot_user=bot_user,
                         bot_id=bot_id)  # fmt: skip
        self.tokens: dict[str, float | None] = {}  # token → expiry (None: never)
        self.refresh_token: str | None = None
        self.installed = False
        self.clock = clock
        self.refused: list[tuple[str, str]] = []  # (method, error) of calls with a bad token

    def refuse_token(self, method: str, token: str) -> str | None:
        expires = self.tokens.get(token)
        if token not in self.tokens or not self.installed:
            error: str | None = "invalid_auth"
        elif expires is not None and expires <= self.clock():
            error = "token_expired"
        else:
            return None
        self.refused.append((method, str(error)))
        return error


class FakeSlackGrid:
    def __init__(
        self,
        client_id: str = "111.222",
        client_secret: str = "client-secret",
        token_lifetime: float | None = None,
        clock: Callable[[], float] = time.time,
        token_format: str = "xoxb-{team}-{serial}",
        refresh_format: str = "xoxe-1-{team}-{serial}",
    ) -> None:
        self.client_id, self.client_secret = client_id, client_secret
        self.token_format, self.refresh_format = token_format, refresh_format
        self.token_lifetime = token_lifetime
        self.clock = clock
        self.workspaces: dict[str, GridWorkspace] = {}
        self.redirect_url = ""  # the app's configured redirect URL
        self.events_url = ""
        self.signing_secret = ""
        self.codes: dict[str, str] = {}  # code → team
        self.refreshes: dict[str, int] = {}  # team → tokens refreshed
        self.cross_team: list[tuple[str, str, str]] = []  # (method, token's team, channel's team)
        self.refused_refreshes: list[str] = []
        self._by_token: dict[str, GridWorkspace] = {}
        self._serial = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.base = ""
        self.url = ""
        self.manifest: dict[str, Any] | None = None  # the app's, once made from one
        self.journal: list[str] = []  # events sent and Web API calls answered, in order

    # lifecycle --------------------------------------------------------------------------------
    async def start(self, port: int = 0) -> FakeSlackGrid:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/oauth/v2/authorize", self._authorize_page)
        app.router.add_post("/oauth/v2/authorize", self._decide)
        app.router.add_get("/files-pri/{team_file}/download/{name}", self._download)
        app.router.add_post("/fake/say", self._say_by_hand)
        app.router.add_post("/fake/uninstall", self._uninstall_by_hand)
        app.router.add_get("/fake/posts", self._posts_by_hand)
        self._runner, bound = await serve_locally(app, port, access_log=None)
        self.base = f"http://127.0.0.1:{bound}"
        self.url = self.base + "/api/"
        for workspace in self.workspaces.values():
            workspace.url = self.url
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def add_workspace(self, team: str, name: str) -> GridWorkspace:
        number = len(self.workspaces) + 1
        workspace = GridWorkspace(team, name, f"UBOT{number}", f"BBOT{number}", self.clock)
        workspace.url = self.url
        self.workspaces[team] = workspace
        return workspace

    # the app, from a manifest ---------------------------------------------------------------------
    def create_app(self, manifest_text: str) -> None:
        """ "From a manifest": Slack refuses a manifest it cannot take (ValueError, its message)."""
        manifest = yaml.safe_load(manifest_text)
        features = manifest.get("features") or {}
        settings = manifest.get("settings") or {}
        if "agent_view" in features and "assistant_view" in features:
            raise ValueError("features: an app has agent_view or assistant_view, not both")
        if "agent_view" in features and not (features["agent_view"] or {}).get("agent_description"):
            raise ValueError("features.agent_view: agent_description is required")
        subscriptions = settings.get("event_subscriptions") or {}
        if not settings.get("socket_mode_enabled"):
            if not subscriptions.get("request_url"):
                raise ValueError("event_subscriptions: request_url is required without socket mode")
            self.events_url = str(subscriptions["request_url"])
        self.manifest = manifest

    def install_app(self, team: str) -> str:
        """ "Install to Workspace" from the app's settings: the workspace's bot token."""
        assert self.manifest is not None, "no app yet: create_app first"
        workspace = self.workspaces[team]
        features = self.manifest.get("features") or {}
        workspace.view = "agent" if "agent_view" in features else "assistant"
        workspace.status_supported = "assistant:write" in self._scopes() and bool(
            {"agent_view", "assistant_view"} & set(features)
        )
        workspace.agents.agent = workspace.view == "agent"
        workspace.agents.stop_subscribed = "agent_session_stopped" in self._events()
        workspace.installed = True
        workspace.tokens.clear()
        return str(self._issue(workspace)["access_token"])

    def _scopes(self) -> set[str]:
        return set(
            ((self.manifest or {}).get("oauth_config") or {}).get("scopes", {}).get("bot") or []
        )

    def _events(self) -> set[str]:
        settings = (self.manifest or {}).get("settings") or {}
        return set((settings.get("event_subscriptions") or {}).get("bot_events") or [])

    def _subscribed(self, event_type: str) -> bool:
        """Slack sends an app only what it subscribes to (any app not made from a manifest here:
        everything)."""
        return self.manifest is None or event_type in self._events()

    async def _send(
        self,
        team: str,
        event: dict[str, Any],
        to: str | None = None,
        authorizations: list[dict[str, Any]] | None = None,
    ) -> int:
        self.journal.append(f"event {_described(event)}")
        return await self.sender(team, to).send(event, authorizations=authorizations)

    # people -----------------------------------------------------------------------------------
    async def open_messages_tab(self, team: str, user: str = "U1") -> int | None:
        """A person opens the app's Messages tab (their DM with it): `app_home_opened`, if the
        app subscribes. The bot's HTTP status (None: nothing sent)."""
        home = ((self.manifest or {}).get("features") or {}).get("app_home") or {}
        if not (self._subscribed("app_home_opened") and home.get("messages_tab_enabled", True)):
            return None
        return await self._send(team, app_home_opened(user, "D" + user.removeprefix("U")))

    async def look_at(self, team: str, user: str, channel: str) -> int | None:
        """A person on an agent app moves to `channel`: `app_context_changed`, if subscribed."""
        workspace = self.workspaces[team]
        if workspace.view != "agent" or not self._subscribed("app_context_changed"):
            return None
        event = app_context_changed(channel, team)
        return await self._send(team, event, authorizations=viewer_authorizations(user, team))

    async def say(
        self, team: str, channel: str, text: str, user: str = "U1", to: str | None = None
    ) -> tuple[str, int]:
        """A person writes in `team`: the message lands in its history and is sent as one signed
        event to the bot (at `to`, else `events_url`). Returns its ts and the bot's HTTP status
        (0: the app does not subscribe to the message's event, nothing sent)."""
        workspace = self.workspaces[team]
        ts = workspace._next_ts()
        workspace.add_user_message(channel, ts, text, user)
        kind = "im" if channel.startswith("D") else "channel"
        event = {"type": "message", "channel": channel, "user": user, "text": text, "ts": ts,
                 "channel_type": kind,
                 "user_profile": {"display_name": workspace.users.get(user, user)}}  # fmt: skip
        if not self._subscribed(f"message.{kind}s" if kind == "channel" else "message.im"):
            return ts, 0
        return ts, await self._send(team, event, to)

    def sender(self, team: str, to: str | None = None) -> EventSender:
        return EventSender(to or self.events_url, self.signing_secret, team)

    async def uninstall(self, team: str) -> list[int]:
        """The workspace removes the app: its tokens stop working, then Slack tells the app."""
        workspace = self.workspaces[team]
        revoked = {"type": "tokens_revoked", "tokens": {"bot": [workspace.bot_user]},
                   "event_ts": f"{time.time():.6f}"}  # fmt: skip
        uninstalled = {"type": "app_uninstalled", "event_ts": f"{time.time():.6f}"}
        workspace.installed = False
        workspace.tokens.clear()
        return [await self.sender(team).send(e) for e in (revoked, uninstalled)]

    def event_body(self, team: str, event: dict[str, Any]) -> dict[str, Any]:
        return event_callback(event, f"Ev{next(self._serial):05d}", team)

    # the Web API ------------------------------------------------------------------------------
    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args = await api_arguments(request)
        if method == "oauth.v2.access":
            return web.json_response(self._access(request, args))
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        workspace = self._by_token.get(token)
        if workspace is None:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        channel_team = self._team_of_channel(str(args.get("channel") or ""))
        if channel_team not in (None, workspace.team):
            self.cross_team.append((method, workspace.team, str(channel_team)))
            return web.json_response({"ok": False, "error": "invalid_auth"})
        answer = await workspace.answer(method, args, token)
        self.journal.append(f"call {method}{_described_call(args)}")
        return answer

    def _team_of_channel(self, channel: str) -> str | None:
        for team, workspace in self.workspaces.items():
            if any(m.channel == channel for m in workspace.messages):
                return team
        return None

    async def _download(self, request: web.Request) -> web.StreamResponse:
        team = request.match_info["team_file"].partition("-")[0]
        workspace = self.workspaces.get(team)
        if workspace is None:
            return web.Response(status=404, text="file not found")
        return await workspace._download(request)

    def _access(self, request: web.Request, args: dict[str, Any]) -> dict[str, Any]:
        client_id, client_secret = _basic_auth(request) or (
            str(args.get("client_id", "")),
            str(args.get("client_secret", "")),
        )
        if client_id != self.client_id:
            return {"ok": False, "error": "invalid_client_id"}
        if client_secret != self.client_secret:
            return {"ok": False, "error": "bad_client_secret"}
        if args.get("grant_type") == "refresh_token":
            return self._refresh(str(args.get("refresh_token", "")))
        team = self.codes.pop(str(args.get("code", "")), None)
        if team is None:
            return {"ok": False, "error": "invalid_code"}
        workspace = self.workspaces[team]
        workspace.installed = True
        workspace.tokens.clear()
        return {"ok": True, "app_id": APP_ID, "authed_user": {"id": "U1"}, "scope": SCOPES,
                "token_type": "bot", "bot_user_id": workspace.bot_user,
                "team": {"id": team, "name": workspace.team_name}, "enterprise": None,
                "is_enterprise_install": False, **self._issue(workspace)}  # fmt: skip

    def _refresh(self, refresh_token: str) -> dict[str, Any]:
        for workspace in self.workspaces.values():
            if workspace.installed and refresh_token and refresh_token == workspace.refresh_token:
                self.refreshes[workspace.team] = self.refreshes.get(workspace.team, 0) + 1
                return {"ok": True, "token_type": "bot", "scope": SCOPES,
                        "bot_user_id": workspace.bot_user, "app_id": APP_ID,
                        "team": {"id": workspace.team, "name": workspace.team_name},
                        **self._issue(workspace)}  # fmt: skip
        self.refused_refreshes.append(refresh_token)
        return {"ok": False, "error": "invalid_refresh_token"}

    def _issue(self, workspace: GridWorkspace) -> dict[str, Any]:
        serial = next(self._serial)
        token = self.token_format.format(team=workspace.team, serial=serial)
        lifetime = self.token_lifetime
        workspace.tokens[token] = None if lifetime is None else self.clock() + lifetime
        workspace.token = token
        self._by_token[token] = workspace
        if lifetime is None:
            return {"access_token": token}
        workspace.refresh_token = self.refresh_format.format(team=workspace.team, serial=serial)
        return {"access_token": token, "refresh_token": workspace.refresh_token,
                "expires_in": int(lifetime)}  # fmt: skip

    # the authorize page -----------------------------------------------------------------------
    async def _authorize_page(self, request: web.Request) -> web.Response:
        query = request.query
        if query.get("client_id") != self.client_id:
            return web.Response(status=400, text="Something went wrong: invalid client_id",
                                content_type="text/html")  # fmt: skip
        options = "".join(
            f'<option value="{team}">{html.escape(w.team_name)}</option>'
            for team, w in self.workspaces.items()
        )
        hidden = "".join(
            f'<input type="hidden" name="{name}" value="{html.escape(query.get(name, ""))}">'
            for name in ("state", "redirect_uri", "scope")
        )
        page = (
            "<!DOCTYPE html><html><head><title>Slack: install burstbot</title></head><body>"
            "<h1>burstbot is requesting permission to access a Slack workspace</h1>"
            f"<p>It asks for: {html.escape(query.get('scope', ''))}</p>"
            f'<form method="post">{hidden}<label>Workspace <select id="team" name="team">'
            f"{options}</select></label>"
            '<button id="cancel" name="decision" value="cancel">Cancel</button>'
            '<button id="allow" name="decision" value="allow">Allow</button></form></body></html>'
        )
        return web.Response(text=page, content_type="text/html")

    async def _decide(self, request: web.Request) -> web.Response:
        form = await request.post()
        redirect = str(form.get("redirect_uri") or self.redirect_url)
        state = str(form.get("state", ""))
        if form.get("decision") != "allow":
            denied = urlencode({"error": "access_denied", "state": state})
            raise web.HTTPFound(f"{redirect}?{denied}")
        code = f"code-{next(self._serial)}"
        self.codes[code] = str(form["team"])
        raise web.HTTPFound(f"{redirect}?{urlencode({'code': code, 'state': state})}")

    # by hand ----------------------------------------------------------------------------------
    async def _say_by_hand(self, request: web.Request) -> web.Response:
        form = await request.post()
        ts, status = await self.say(str(form["team"]), str(form["channel"]), str(form["text"]),
                                    str(form.get("user", "U1")))  # fmt: skip
        return web.json_response({"ts": ts, "event": status})

    async def _posts_by_hand(self, request: web.Request) -> web.Response:
        return web.json_response({team: [{"channel": m.channel, "ts": m.ts, "text": m.text}
                                         for m in workspace.posts()]
                                  for team, workspace in self.workspaces.items()})  # fmt: skip

    async def _uninstall_by_hand(self, request: web.Request) -> web.Response:
        form = await request.post()
        return web.json_response({"events": await self.uninstall(str(form["team"]))})


JOURNAL_ARGS = ("channel", "channel_id", "thread_ts", "ts", "status", "title", "tab")


def _described(event: dict[str, Any]) -> str:
    """An event as the journal lists it: its type and what names its place."""
    shown = {k: event[k] for k in ("channel", "thread_ts", "ts", "tab") if event.get(k)}
    if event.get("type") == "app_context_changed":
        entities = (event.get("context") or {}).get("entities") or [{}]
        shown["viewing"] = entities[0].get("value", "")
    return str(event.get("type")) + "".join(f" {k}={v}" for k, v in shown.items())


def _described_call(args: dict[str, Any]) -> str:
    return "".join(f" {k}={args[k]}" for k in JOURNAL_ARGS if args.get(k))


def _basic_auth(request: web.Request) -> tuple[str, str] | None:
    header = request.headers.get("Authorization", "")
    if not header.startswith("Basic "):
        return None
    try:
        client_id, _, secret = base64.b64decode(header[6:]).decode().partition(":")
    except ValueError:
        return None
    return client_id, secret


async def main() -> None:  # pragma: no cover - by hand
    parser = argparse.ArgumentParser(description="A fake Slack with several workspaces.")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--events-url", required=True)
    parser.add_argument("--signing-secret", required=True)
    parser.add_argument("--client-id", default="111.222")
    parser.add_argument("--client-secret", default="client-secret")
    parser.add_argument("--redirect-url", default="")
    parser.add_argument("--token-lifetime", type=float, default=None)
    parser.add_argument("--workspace", action="append", default=[], help="TEAM:Name")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    grid = FakeSlackGrid(args.client_id, args.client_secret, args.token_lifetime)
    grid.events_url, grid.signing_secret = args.events_url, args.signing_secret
    grid.redirect_url = args.redirect_url
    for spec in args.workspace or ["T1:Acme", "T2:Globex"]:
        team, _, name = spec.partition(":")
        grid.add_workspace(team, name or team)
    await grid.start(args.port)
    print(json.dumps({"api": grid.url, "authorize": grid.base + "/oauth/v2/authorize"}))
    await asyncio.Event().wait()


if __name__ == "__main__":  # pragma: no cover
    asyncio.run(main())
