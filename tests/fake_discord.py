"""A fake Discord (REST API + gateway websocket) on 127.0.0.1, just enough for one bot.

The real discord.py client talks to it over HTTP and a websocket. Like Discord, it dedupes a post
whose `nonce` it has seen with `enforce_nonce` (returning the earlier message), and it can be told
to fail a channel's next posts with a given status, or to close the gateway with a given code
(at IDENTIFY, or while running).
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import yarl
from aiohttp import WSMsgType, web

Json = dict[str, Any]
BOT_ID = 100_000_000_000_000_001
APP_ID = 100_000_000_000_000_002


@dataclass
class Failure:
    status: int
    body: Json
    headers: dict[str, str] = field(default_factory=dict)
    only_with_reference: bool = False


class FakeDiscord:
    def __init__(self, token: str = "test-token") -> None:
        self.token = token
        self.bot_user: Json = {"id": str(BOT_ID), "username": "burstbot", "discriminator": "0",
                               "global_name": None, "avatar": None, "bot": True}  # fmt: skip
        self.created: list[Json] = []  # messages Discord created, in order
        self.requests: list[Json] = []  # every post request's JSON body, deduped or not
        self.typing: list[int] = []
        self.failures: dict[int, list[Failure]] = {}
        self.gateway_close_code: int | None = None
        self.identify: Json | None = None
        self.commands: dict[str, Json] = {}  # the application's global commands, by name
        self.commands_status = 200  # e.g. 403: the command endpoints refuse
        self.command_posts: list[Json] = []
        self.callbacks: list[Json] = []  # interaction responses, with "interaction_id"
        self._by_nonce: dict[str, Json] = {}
        self._ids = itertools.count(1_300_000_000_000_000_000)
        self._socket: web.WebSocketResponse | None = None
        self._sequence = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.port = 0

    # lifecycle -------------------------------------------------------------------------------
    async def __aenter__(self) -> FakeDiscord:
        app = web.Application()
        app.router.add_get("/api/v10/users/@me", self._me)
        app.router.add_get("/api/v10/oauth2/applications/@me", self._application)
        app.router.add_post("/api/v10/channels/{channel_id}/messages", self._post_message)
        app.router.add_post("/api/v10/channels/{channel_id}/typing", self._typing)
        app.router.add_get("/api/v10/applications/{app_id}/commands", self._commands)
        app.router.add_post("/api/v10/applications/{app_id}/commands", self._upsert_command)
        app.router.add_post("/api/v10/interactions/{id}/{token}/callback", self._callback)
        app.router.add_get("/gateway", self._gateway)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._socket is not None:
            await self._socket.close()
        assert self._runner is not None
        await self._runner.cleanup()

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v10"

    @property
    def gateway_url(self) -> yarl.URL:
        return yarl.URL(f"ws://127.0.0.1:{self.port}/gateway")

    # REST ------------------------------------------------------------------------------------
    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bot {self.token}"

    async def _me(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        return _json(self.bot_user)

    async def _application(self, request: web.Request) -> web.Response:
        return _json({"id": str(APP_ID), "name": "burstbot", "description": "", "icon": None,
                      "bot_public": True, "bot_require_code_grant": False,
                      "owner": self.bot_user, "verify_key": "k", "flags": 0})  # fmt: skip

    async def _typing(self, request: web.Request) -> web.Response:
        self.typing.append(int(request.match_info["channel_id"]))
        return web.Response(status=204)

    async def _post_message(self, request: web.Request) -> web.Response:
        channel_id = int(request.match_info["channel_id"])
        if not self._authorized(request):
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        body: Json = await request.json()
        self.requests.append(body)
        queued = self.failures.get(channel_id) or []
        if queued and (not queued[0].only_with_reference or "message_reference" in body):
            failure = queued.pop(0)
            return _json(failure.body, status=failure.status, headers=failure.headers)
        nonce = body.get("nonce")
        if body.get("enforce_nonce") and nonce in self._by_nonce:
            return _json(self._by_nonce[nonce])
        message = self.message(channel_id, self.bot_user, body.get("content", ""))
        message["nonce"] = nonce
        if "message_reference" in body:
            message["message_reference"] = body["message_reference"]
        self.created.append({**message, "request": body})
        if nonce is not None:
            self._by_nonce[nonce] = message
        return _json(message)

    async def _commands(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        if self.commands_status != 200:
            return _json({"message": "Missing Access", "code": 50001}, self.commands_status)
        return _json(list(self.commands.values()))

    async def _upsert_command(self, request: web.Request) -> web.Response:
        """Create a global command, or overwrite the one with the same name (as Discord does)."""
        if not self._authorized(request):
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        body: Json = await request.json()
        self.command_posts.append(body)
        known = self.commands.get(body["name"])
        command_id = known["id"] if known else str(next(self._ids))
        self.commands[body["name"]] = {**body, "id": command_id, "application_id": str(APP_ID),
                                       "version": str(next(self._ids)), "type": 1}  # fmt: skip
        return _json(self.commands[body["name"]], status=200 if known else 201)

    async def _callback(self, request: web.Request) -> web.Response:
        """An interaction response (no bot token: the interaction token in the path is the key)."""
        body: Json = await request.json()
        interaction_id = request.match_info["id"]
        self.callbacks.append({**body, "interaction_id": interaction_id,
                               "token": request.match_info["token"]})  # fmt: skip
        flags = (body.get("data") or {}).get("flags", 0)
        return _json({"interaction": {"id": interaction_id, "type": 2,
                                      "response_message_id": str(next(self._ids)),
                                      "response_message_loading": False,
                                      "response_message_ephemeral": bool(flags & 64)}})  # fmt: skip

    def interaction(self, name: str, channel_id: int, user: Json, guild_id: int | None) -> Json:
        """An INTERACTION_CREATE payload for a slash command with no options."""
        data: Json = {
            "id": str(next(self._ids)), "application_id": str(APP_ID), "type": 2,
            "data": {"id": "1", "name": name, "type": 1}, "token": f"itoken-{next(self._ids)}",
            "version": 1, "channel_id": str(channel_id), "locale": "en-US",
            "app_permissions": "0", "entitlements": [], "attachment_size_limit": 10_485_760,
            "authorizing_integration_owners": {"0": str(guild_id or "0")},
        }  # fmt: skip
        if guild_id is None:
            data.update(user=user, context=1, channel={"id": str(channel_id), "type": 1})
        else:
            data.update(guild_id=str(guild_id), context=0, guild_locale="en-US",
                        channel={"id": str(channel_id), "type": 0, "guild_id": str(guild_id),
                                 "name": "general", "position": 0},
                        member={"user": user, "roles": [], "joined_at": _now(), "deaf": False,
                                "mute": False, "flags": 0, "permissions": "0"})  # fmt: skip
        return data

    def message(self, channel_id: int, author: Json, content: str, **extra: Any) -> Json:
        return {"id": str(next(self._ids)), "channel_id": str(channel_id), "author": author,
                "content": content, "timestamp": _now(), "edited_timestamp": None, "tts": False,
                "mention_everyone": False, "mentions": [], "mention_roles": [], "attachments": [],
                "embeds": [], "pinned": False, "type": 0, **extra}  # fmt: skip

    # gateway ---------------------------------------------------------------------------------
    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        self._socket = socket
        await socket.send_json({"op": 10, "d": {"heartbeat_interval": 45_000}})
        async for frame in socket:
            if frame.type != WSMsgType.TEXT:
                break
            payload = json.loads(frame.data)
            if payload["op"] == 1:
                await socket.send_json({"op": 11})
            elif payload["op"] == 2:
                self.identify = payload["d"]
                if self.gateway_close_code is not None:
                    await socket.close(code=self.gateway_close_code)
                    break
                await self.dispatch("READY", self._ready())
        return socket

    def _ready(self) -> Json:
        return {"v": 10, "user": self.bot_user, "guilds": [], "session_id": "session-1",
                "resume_gateway_url": str(self.gateway_url),
                "application": {"id": str(APP_ID), "flags": 0}}  # fmt: skip

    async def close_gateway(self, code: int) -> None:
        """Close the running gateway connection with `code`, as Discord does (e.g. 4012 when the
        API version is no longer served): a code discord.py cannot recover from ends it."""
        assert self._socket is not None, "no gateway connection"
        self.gateway_close_code = code  # a reconnect would be refused the same way
        await self._socket.close(code=code)

    async def dispatch(self, event: str, data: Json) -> None:
        """Send one gateway event (a replay is the same data sent again)."""
        assert self._socket is not None, "no gateway connection"
        await self._socket.send_json({"op": 0, "t": event, "s": next(self._sequence), "d": data})

    async def wait_for(self, predicate: Any, within: float = 5.0) -> None:
        """Bounded wait for real I/O (the client's requests) to arrive."""
        async with asyncio.timeout(within):
            while not predicate():  # noqa: ASYNC110
                await asyncio.sleep(0.005)


def _json(data: Json, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """JSON as Discord sends it: discord.py parses a body only for exactly `application/json`."""
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    return web.Response(body=json.dumps(data).encode(), status=status, headers=all_headers)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()
