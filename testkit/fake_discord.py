"""A fake Discord (REST API + gateway websocket) on 127.0.0.1, just enough for one bot.

The real discord.py client talks to it over HTTP and a websocket. Like Discord, it dedupes a post
whose `nonce` it has seen with `enforce_nonce` in the same channel (returning the earlier message)
for `nonce_window_seconds` (Discord's few minutes; None: for ever), and it can be told
to fail a channel's next posts with a given status, or to close the gateway (with a given code:
at IDENTIFY, or while running; without one, a network cut the client reconnects after). Several
clients may connect at once (processes on one shard): every identified one gets each event.

Channels (`add_channel`) and their history: every message created or dispatched is in its
channel's history, and `said` adds one no bot received (sent while no process ran). Reads work as
on Discord: `GET /channels/{id}`, and `GET /channels/{id}/messages` with `after` (the `limit`
messages right after it), `before`, or neither (the newest), each page newest first; a channel's
next reads can be told to fail. Each channel object carries its `last_message_id`, moved by every
message created in it (and not moved back by a delete), as on Discord; a guild's channels are
listed by `GET /guilds/{id}/channels` and its threads by `GET /guilds/{id}/threads/active`. A
RESUME is refused (op 9): the client identifies anew.

A bot may edit (PATCH) and delete its own messages; content over 2000 characters is refused with
Discord's 400, and the next edits can be told to fail (`edit_failures`, e.g. a 429). A failure
that `lands` takes effect first (the bot sees the failure, as when the response is lost), and a
`PASS` in a channel's failures lets one post through, so the next fails between parts. On request
(`enforce_rate_limits`) a channel's posts and edits are limited as on Discord, about five per five
seconds (a token bucket): a call over it gets Discord's 429 (`retry_after` in the body), counted in
`rate_limited`. `calls`
lists what the bot did (POST, PATCH, DELETE), `shown` what its messages in a channel say now.

Message components (buttons) are kept as the bot sets them: a post's `components`, and an edit's
when it names them (an edit that leaves them out keeps them, as on Discord). `click` makes the
INTERACTION_CREATE of a button press on a message (its `custom_id`, the message as it shows now,
the presser); `dispatch` delivers it, again for a replay: the fake dedupes nothing for the bot.
Interaction callbacks are recorded in `callbacks` (type, data, flags); like Discord, an interaction
takes one response, and a second is refused (400, code 40060) and recorded as `refused`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import itertools
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import yarl
from aiohttp import WSMsgType, web

from adapters.discord import DiscordFrontend
from bot.config import DiscordConfig
from bot.core.clock import Clock
from testkit.rate_limits import RateLimits
from testkit.serving import serve_locally

Json = dict[str, Any]
BOT_ID = 100_000_000_000_000_001
MESSAGE_LIMIT = 2000
APP_ID = 100_000_000_000_000_002


@dataclass
class Failure:
    status: int
    body: Json | str  # a str: an HTML page, as Cloudflare in front of Discord answers
    headers: dict[str, str] = field(default_factory=dict)
    only_with_reference: bool = False
    lands: bool = False  # the post or edit takes effect, but the bot gets the failure


CLI_LAUNCHER = """
import sys, discord, yarl
discord.http.Route.BASE = sys.argv[1]
discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(sys.argv[2])
from bot.cli import main
raise SystemExit(main(["run", "--config", sys.argv[3]]))
"""
"""`burstbot run --config` with discord.py's REST base and gateway pointed elsewhere: the
config names no Discord URL (see `FakeDiscord.run_command`)."""

PASS = None
"""In a channel's `failures`: let this post through (so the failure after it comes between the
parts of a reply)."""


class FakeDiscord:
    def __init__(
        self, token: str = "test-token", nonce_window_seconds: float | None = None, port: int = 0
    ) -> None:
        self.token = token
        self.nonce_window_seconds = nonce_window_seconds
        self.bot_user: Json = {"id": str(BOT_ID), "username": "burstbot", "discriminator": "0",
                               "global_name": None, "avatar": None, "bot": True}  # fmt: skip
        self.created: list[Json] = []  # messages Discord created, in order
        self.requests: list[Json] = []  # every post request's JSON body, deduped or not
        self.typing: list[int] = []
        self.failures: dict[int, list[Failure | None]] = {}  # None: `PASS`
        self.gateway_close_code: int | None = None
        self.identify: Json | None = None
        self.commands: dict[str, Json] = {}  # the application's global commands, by name
        self.commands_status = 200  # e.g. 403: the command endpoints refuse
        self.command_posts: list[Json] = []
        self.callbacks: list[Json] = []  # interaction responses, with "interaction_id"
        self.before_callback: Callable[[Json], Awaitable[None]] | None = None  # sees each first
        self._acknowledged: set[str] = set()  # interactions answered (Discord takes one answer)
        self.channels: dict[int, Json] = {}  # what GET /channels/{id} returns
        self.guilds: list[int] = []  # sent after READY (GUILD_CREATE) with their channels
        self.history: dict[int, list[Json]] = {}  # each channel's messages, oldest first
        self.read_failures: dict[int, list[Failure]] = {}  # a channel's next reads fail
        self.reads: list[tuple[int, dict[str, str]]] = []  # every history read and its query
        self._by_nonce: dict[tuple[int, str], tuple[float, Json]] = {}  # (channel, nonce)
        self.uploads: dict[str, bytes] = {}  # the CDN's files, by attachment id
        self.cdn_downloads: list[str] = []  # attachment ids asked of the CDN, in order
        self.redundant_edits = 0  # edits that set the content the message showed already
        self.edits: list[Json] = []  # every edit that took effect: message id, content, time
        self.edit_failures: list[Failure] = []  # the next edits fail (e.g. 429 + Retry-After)
        self.after_edit: Callable[[Json], None] | None = None  # e.g. a stale edit lands right after
        self.deleted: list[str] = []
        self.calls: list[tuple[str, str, str]] = []  # what bots did: method, message id, content
        self._ids = _Snowflakes()
        self.limits: RateLimits | None = None  # posts and edits per channel, when enforced
        self._socket: web.WebSocketResponse | None = None  # the newest connection
        self._identified: list[web.WebSocketResponse] = []
        self._sequence = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.port = port  # 0: any free port

    def enforce_rate_limits(
        self, per_five_seconds: float = 5.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """Limit each channel's posts and edits, as Discord does; `clock` is Discord's time (a
        fake clock's `monotonic` in fake-time tests; discord.py sleeps out a 429 on the real
        one)."""
        self.limits = RateLimits(per_five_seconds * 12, per_five_seconds, clock)

    @property
    def rate_limited(self) -> int:
        return 0 if self.limits is None else len(self.limits.refused)

    def _over_limit(self, channel_id: int) -> web.Response | None:
        wait = None if self.limits is None else self.limits.spend(str(channel_id))
        if wait is None:
            return None
        body = {"message": "You are being rate limited.", "retry_after": round(wait, 3),
                "global": False}  # fmt: skip
        headers = {"Retry-After": f"{wait:.3f}", "Via": "1.1 google", "X-RateLimit-Scope": "user"}
        return _json(body, status=429, headers=headers)

    # lifecycle -------------------------------------------------------------------------------
    async def __aenter__(self) -> FakeDiscord:
        app = web.Application()
        app.router.add_get("/api/v10/users/@me", self._me)
        app.router.add_get("/api/v10/oauth2/applications/@me", self._application)
        app.router.add_post("/api/v10/channels/{channel_id}/messages", self._post_message)
        app.router.add_get("/api/v10/channels/{channel_id}/messages", self._read_messages)
        app.router.add_get("/api/v10/channels/{channel_id}", self._read_channel)
        app.router.add_get("/api/v10/guilds/{guild_id}/channels", self._guild_channels)
        app.router.add_get("/api/v10/guilds/{guild_id}/threads/active", self._active_threads)
        message_path = "/api/v10/channels/{channel_id}/messages/{message_id}"
        app.router.add_get(message_path, self._read_message)
        app.router.add_patch(message_path, self._edit_message)
        app.router.add_delete(message_path, self._delete_message)
        app.router.add_post("/api/v10/channels/{channel_id}/typing", self._typing)
        app.router.add_get("/api/v10/applications/{app_id}/commands", self._commands)
        app.router.add_post("/api/v10/applications/{app_id}/commands", self._upsert_command)
        app.router.add_post("/api/v10/interactions/{id}/{token}/callback", self._callback)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/attachments/{channel_id}/{attachment_id}/{filename}", self._cdn)
        self._runner, self.port = await serve_locally(app, self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for socket in {*self._identified, *([self._socket] if self._socket else [])}:
            await socket.close()
        assert self._runner is not None
        await self._runner.cleanup()

    @property
    def connections(self) -> int:
        """Gateway connections that identified and receive events now."""
        return len(self._identified)

    def run_command(self, config: str | os.PathLike[str]) -> list[str]:
        """The command line of `burstbot run --config CONFIG` talking to this fake, for a process
        of its own (the one Python running this, the project importable from its PYTHONPATH)."""
        return [sys.executable, "-c", CLI_LAUNCHER, self.api_base, str(self.gateway_url),
                str(config)]  # fmt: skip

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
            return _unauthorized()
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
            return _unauthorized()
        body: Json = await request.json()
        self.requests.append(body)
        if (refused := self._over_limit(channel_id)) is not None:
            return refused
        queued = self.failures.get(channel_id) or []
        failure = None
        first = queued[0] if queued else None
        if queued and first is None:
            queued.pop(0)
        elif first is not None and (not first.only_with_reference or "message_reference" in body):
            failure = queued.pop(0)
            if failure is not None and not failure.lands:
                return _failed(failure)
        if len(body.get("content", "")) > MESSAGE_LIMIT:
            return _too_long()
        earlier = self.earlier_post(channel_id, body)
        if earlier is not None:
            return _json(earlier) if failure is None else _failed(failure)
        created = self.create_post(channel_id, body)
        return _json(created) if failure is None else _failed(failure)

    def earlier_post(self, channel_id: int, body: Json) -> Json | None:
        """The message an `enforce_nonce` post with this nonce made in the channel within the
        nonce window, as Discord returns it instead of a copy."""
        nonce = body.get("nonce")
        if not body.get("enforce_nonce") or nonce is None:
            return None
        made_at, message = self._by_nonce.get((channel_id, str(nonce)), (0.0, None))
        window = self.nonce_window_seconds
        if message is None or (window is not None and time.monotonic() - made_at > window):
            return None
        return message

    def create_post(self, channel_id: int, body: Json) -> Json:
        """A bot's post taking effect: in the channel's history from now on."""
        nonce = body.get("nonce")
        message = self.message(channel_id, self.bot_user, body.get("content", ""))
        message["nonce"] = nonce
        if "components" in body:
            message["components"] = body["components"]
        if "message_reference" in body:
            message["message_reference"] = body["message_reference"]
        self.created.append({**message, "request": body, "at": time.monotonic()})
        self.calls.append(("POST", message["id"], message["content"]))
        self._append(channel_id, message)
        if nonce is not None:
            self._by_nonce[(channel_id, str(nonce))] = (time.monotonic(), message)
        return message

    def _find(self, request: web.Request) -> Json | None:
        channel = self.history.get(int(request.match_info["channel_id"]), [])
        return next((m for m in channel if m["id"] == request.match_info["message_id"]), None)

    def _found_or_refused(self, request: web.Request) -> Json | web.Response:
        """The message a request names, or Discord's answer when it may not see it or it is gone."""
        if not self._authorized(request):
            return _unauthorized()
        message = self._find(request)
        return _unknown_message() if message is None else message

    async def _read_message(self, request: web.Request) -> web.Response:
        """GET one message, as it reads now (404 Unknown Message once deleted)."""
        message = self._found_or_refused(request)
        return message if isinstance(message, web.Response) else _json(message)

    async def _edit_message(self, request: web.Request) -> web.Response:
        """PATCH a message: only its author may; the content must fit, as on Discord."""
        if not self._authorized(request):
            return _unauthorized()
        body: Json = await request.json()
        if (refused := self._over_limit(int(request.match_info["channel_id"]))) is not None:
            return refused
        failure = self.edit_failures.pop(0) if self.edit_failures else None
        if failure is not None and not failure.lands:
            return _failed(failure)
        message = self._find(request)
        if message is None:
            return _unknown_message()
        if message["author"]["id"] != self.bot_user["id"]:
            return _json({"message": "Cannot edit a message authored by another user",
                          "code": 50005}, status=403)  # fmt: skip
        content = str(body.get("content", message["content"]))
        if len(content) > MESSAGE_LIMIT:
            return _too_long()
        components = body.get("components", message.get("components", []))  # left out: kept
        if content == message["content"] and components == message.get("components", []):
            self.redundant_edits += 1  # taken, as Discord does; it changed nothing
        message.update(content=content, edited_timestamp=_now(), components=components)
        self.edits.append({"id": message["id"], "content": content, "components": components,
                           "at": time.monotonic()})  # fmt: skip
        self.calls.append(("PATCH", message["id"], content))
        answer = dict(message)
        if self.after_edit is not None:
            self.after_edit(message)
        return _json(answer) if failure is None else _failed(failure)

    async def _delete_message(self, request: web.Request) -> web.Response:
        message = self._found_or_refused(request)
        if isinstance(message, web.Response):
            return message
        self.history[int(request.match_info["channel_id"])].remove(message)
        self.deleted.append(message["id"])
        self.calls.append(("DELETE", message["id"], ""))
        return web.Response(status=204)

    def shown(self, channel_id: int) -> list[str]:
        """What the bot's messages in a channel say now, oldest first."""
        history = self.history.get(channel_id, [])
        return [m["content"] for m in history if m["author"]["id"] == self.bot_user["id"]]

    async def _commands(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _unauthorized()
        if self.commands_status != 200:
            return _json({"message": "Missing Access", "code": 50001}, self.commands_status)
        return _json(list(self.commands.values()))

    async def _upsert_command(self, request: web.Request) -> web.Response:
        """Create a global command, or overwrite the one with the same name (as Discord does)."""
        if not self._authorized(request):
            return _unauthorized()
        body: Json = await request.json()
        self.command_posts.append(body)
        known = self.commands.get(body["name"])
        command_id = known["id"] if known else str(next(self._ids))
        self.commands[body["name"]] = {**body, "id": command_id, "application_id": str(APP_ID),
                                       "version": str(next(self._ids)), "type": 1}  # fmt: skip
        return _json(self.commands[body["name"]], status=200 if known else 201)

    async def _callback(self, request: web.Request) -> web.Response:
        """An interaction response (no bot token: the interaction token in the path is the key).
        Like Discord, an interaction takes one response: a second is refused (40060), recorded
        with `refused`. `before_callback` sees each response before it is taken."""
        body: Json = await request.json()
        interaction_id = request.match_info["id"]
        if self.before_callback is not None:
            await self.before_callback(body)
        refused = interaction_id in self._acknowledged
        self._acknowledged.add(interaction_id)
        self.callbacks.append({**body, "interaction_id": interaction_id, "refused": refused,
                               "token": request.match_info["token"]})  # fmt: skip
        if refused:
            return _json({"message": "Interaction has already been acknowledged.",
                          "code": 40060}, status=400)  # fmt: skip
        flags = (body.get("data") or {}).get("flags", 0)
        return _json({"interaction": {"id": interaction_id, "type": 2,
                                      "response_message_id": str(next(self._ids)),
                                      "response_message_loading": False,
                                      "response_message_ephemeral": bool(flags & 64)}})  # fmt: skip

    def interaction(self, name: str, channel_id: int, user: Json, guild_id: int | None) -> Json:
        """An INTERACTION_CREATE payload for a slash command with no options."""
        command = {"id": "1", "name": name, "type": 1}
        return self._interaction(2, command, channel_id, user, guild_id)

    def click(self, message_id: str, custom_id: str, user: Json) -> Json:
        """An INTERACTION_CREATE payload for a press of a button (`custom_id`) on one of the bot's
        messages, by `user`: the message as it shows now (its components included), as Discord
        sends it. Delivering the same payload again is a gateway replay (the same id)."""
        message = next(m for history in self.history.values() for m in history
                       if m["id"] == message_id)  # fmt: skip
        channel_id = int(message["channel_id"])
        guild_id = self.channels.get(channel_id, {}).get("guild_id")
        pressed = {"custom_id": custom_id, "component_type": 2}
        data = self._interaction(3, pressed, channel_id, user, int(guild_id) if guild_id else None)
        data["message"] = dict(message)
        return data

    def _interaction(
        self, kind: int, inner: Json, channel_id: int, user: Json, guild_id: int | None
    ) -> Json:
        data: Json = {
            "id": str(next(self._ids)), "application_id": str(APP_ID), "type": kind,
            "data": inner, "token": f"itoken-{next(self._ids)}",
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

    # channels and history ---------------------------------------------------------------------
    def add_channel(self, channel_id: int, kind: str, guild_id: int | None = None,
                    recipient: Json | None = None, parent_id: int | None = None,
                    owner_id: int | None = None) -> Json:  # fmt: skip
        """A DM (`kind="dm"`), a guild text channel ("text") or a thread ("thread")."""
        data: Json = {"id": str(channel_id), "last_message_id": None, "flags": 0}
        if kind == "dm":
            data.update(type=1, recipients=[recipient])
        else:
            data.update(guild_id=str(guild_id), name=f"{kind}-{channel_id}", position=0,
                        permission_overwrites=[], nsfw=False, rate_limit_per_user=0,
                        parent_id=str(parent_id) if parent_id else None)  # fmt: skip
            data["type"] = 0
        if kind == "thread":
            data.update(type=11, owner_id=str(owner_id), message_count=0, member_count=1,
                        thread_metadata={"archived": False, "auto_archive_duration": 1440,
                                         "archive_timestamp": _now(), "locked": False})  # fmt: skip
        self.channels[channel_id] = data
        return data

    def said(self, channel_id: int, author: Json, content: str, **extra: Any) -> Json:
        """A message in the channel's history that no gateway delivered."""
        message = self.message(channel_id, author, content, **extra)
        self._append(channel_id, message)
        return message

    def _append(self, channel_id: int, message: Json) -> None:
        """A message created in the channel: its history and its `last_message_id`."""
        self.history.setdefault(channel_id, []).append(message)
        channel = self.channels.get(channel_id)
        if channel is not None:
            last = channel["last_message_id"]
            channel["last_message_id"] = str(max(int(last or 0), int(message["id"])))

    async def _read_channel(self, request: web.Request) -> web.Response:
        channel_id = int(request.match_info["channel_id"])
        failure = self._read_failure(channel_id)
        if failure is not None:
            return _failed(failure)
        if channel_id not in self.channels:
            return _json({"message": "Unknown Channel", "code": 10003}, status=404)
        return _json(self.channels[channel_id])

    async def _guild_channels(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _unauthorized()
        guild_id = request.match_info["guild_id"]
        mine = [c for c in self.channels.values() if c.get("guild_id") == guild_id]
        return _json([c for c in mine if c["type"] != 11])

    async def _active_threads(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _unauthorized()
        guild_id = request.match_info["guild_id"]
        mine = [c for c in self.channels.values() if c.get("guild_id") == guild_id]
        archived = [c for c in mine if c["type"] == 11 and c["thread_metadata"]["archived"]]
        threads = [c for c in mine if c["type"] == 11 and c not in archived]
        return _json({"threads": threads, "members": []})

    async def _read_messages(self, request: web.Request) -> web.Response:
        channel_id = int(request.match_info["channel_id"])
        self.reads.append((channel_id, dict(request.query)))
        failure = self._read_failure(channel_id)
        if failure is not None:
            return _failed(failure)
        if channel_id not in self.channels:
            return _json({"message": "Unknown Channel", "code": 10003}, status=404)
        limit = min(int(request.query.get("limit", 50)), 100)
        found = sorted(self.history.get(channel_id, []), key=lambda m: int(m["id"]))
        if "after" in request.query:
            after = int(request.query["after"])
            page = [m for m in found if int(m["id"]) > after][:limit]
        else:
            before = int(request.query.get("before", 1 << 63))
            page = [m for m in found if int(m["id"]) < before][-limit:]
        return _json(list(reversed(page)))  # newest first, as Discord sends them

    def _read_failure(self, channel_id: int) -> Failure | None:
        queued = self.read_failures.get(channel_id) or []
        return queued.pop(0) if queued else None

    def upload(
        self, channel_id: int, filename: str, content: bytes, content_type: str | None,
        size: int | None = None, **extra: Any,
    ) -> Json:  # fmt: skip
        """A file someone attached: the attachment object of a message payload. Its CDN link is
        signed (`ex`, `is`, `hm`) like Discord's; `size` is the declared size (default: real)."""
        attachment_id = str(next(self._ids))
        self.uploads[attachment_id] = content
        url = (f"http://127.0.0.1:{self.port}/attachments/{channel_id}/{attachment_id}/{filename}"
               f"?ex=6a000000&is=69f00000&hm=ab12")  # fmt: skip
        out = {"id": attachment_id, "filename": filename, "url": url, "proxy_url": url,
               "size": len(content) if size is None else size, **extra}  # fmt: skip
        if content_type is not None:
            out["content_type"] = content_type
        return out

    async def _cdn(self, request: web.Request) -> web.Response:
        """Discord's CDN: no token, a signed link; a file that is gone is a 404."""
        attachment_id = request.match_info["attachment_id"]
        self.cdn_downloads.append(attachment_id)
        content = self.uploads.get(attachment_id)
        if content is None or "hm" not in request.query:
            return web.Response(status=404, text="Not Found")
        return web.Response(body=content, content_type="application/octet-stream")

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
        try:
            await self._serve_gateway(socket)
        finally:
            if socket in self._identified:
                self._identified.remove(socket)
        return socket

    async def _serve_gateway(self, socket: web.WebSocketResponse) -> None:
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
                await self._send(socket, "READY", self._ready())
                for guild_id in self.guilds:
                    await self._send(socket, "GUILD_CREATE", self._guild(guild_id))
                self._identified.append(socket)
            elif payload["op"] == 6:  # RESUME: this fake keeps no sessions to resume
                await socket.send_json({"op": 9, "d": False})

    def _ready(self) -> Json:
        guilds = [{"id": str(g), "unavailable": True} for g in self.guilds]
        return {"v": 10, "user": self.bot_user, "guilds": guilds, "session_id": "session-1",
                "resume_gateway_url": str(self.gateway_url),
                "application": {"id": str(APP_ID), "flags": 0}}  # fmt: skip

    def _guild(self, guild_id: int) -> Json:
        """GUILD_CREATE: the guild with its channels and active threads."""
        mine = [c for c in self.channels.values() if c.get("guild_id") == str(guild_id)]
        everyone = {"id": str(guild_id), "name": "@everyone", "permissions": "1024",
                    "position": 0, "color": 0, "hoist": False, "managed": False,
                    "mentionable": False, "flags": 0}  # fmt: skip
        return {"id": str(guild_id), "name": f"guild-{guild_id}", "owner_id": str(BOT_ID + 1),
                "roles": [everyone], "emojis": [], "stickers": [], "features": [],
                "member_count": 1, "members": [], "voice_states": [], "presences": [],
                "channels": [c for c in mine if c["type"] != 11],
                "threads": [c for c in mine if c["type"] == 11], "large": False,
                "unavailable": False, "joined_at": _now(), "premium_tier": 0,
                "afk_timeout": 300, "verification_level": 0, "default_message_notifications": 0,
                "explicit_content_filter": 0, "mfa_level": 0, "system_channel_flags": 0,
                "preferred_locale": "en-US", "nsfw_level": 0}  # fmt: skip

    async def close_gateway(self, code: int | None = None) -> None:
        """Drop the gateway connection: without a code, a network cut the client reconnects
        after; with one, as Discord does (e.g. 4012 when the API version is no longer served),
        and a code discord.py cannot recover from ends it."""
        assert self._socket is not None, "no gateway connection"
        if code is None:
            await self._socket.close()
            return
        self.gateway_close_code = code  # a reconnect would be refused the same way
        await self._socket.close(code=code)

    async def dispatch(self, event: str, data: Json) -> None:
        """Send one gateway event to every identified connection (a replay is the same data
        sent again; a broken one, as a test writes it, is sent as it is)."""
        assert self._socket is not None, "no gateway connection"
        if event == "MESSAGE_CREATE" and isinstance(data, dict) and "channel_id" in data:
            channel = self.history.setdefault(int(data["channel_id"]), [])
            if all(m["id"] != data["id"] for m in channel):
                self._append(int(data["channel_id"]), data)
        for socket in list(self._identified):
            with contextlib.suppress(ConnectionError):
                await self._send(socket, event, data)

    async def _send(self, socket: web.WebSocketResponse, event: str, data: Json) -> None:
        await socket.send_json({"op": 0, "t": event, "s": next(self._sequence), "d": data})

    async def typing_start(self, channel_id: int, user: Json, guild_id: int | None = None) -> bool:
        """Someone starts typing. Like Discord, TYPING_START reaches only a bot that identified
        with the typing intent for that kind of channel (guild: 1 << 11, DM: 1 << 14); returns
        whether it was sent."""
        assert self.identify is not None, "no identified gateway session"
        needed = 1 << 11 if guild_id is not None else 1 << 14
        if not self.identify["intents"] & needed:
            return False
        now = int(datetime.datetime.now(datetime.UTC).timestamp())
        data: Json = {"channel_id": str(channel_id), "user_id": user["id"], "timestamp": now}
        if guild_id is not None:
            data["guild_id"] = str(guild_id)
            data["member"] = {"user": user, "roles": [], "joined_at": _now(), "deaf": False,
                              "mute": False, "flags": 0}  # fmt: skip
        await self.dispatch("TYPING_START", data)
        return True

    async def wait_for(self, predicate: Any, within: float = 5.0) -> None:
        """Bounded wait for real I/O (the client's requests) to arrive."""
        async with asyncio.timeout(within):
            while not predicate():  # noqa: ASYNC110
                await asyncio.sleep(0.005)


class _Snowflakes:
    """Ids as Discord makes them: the creation time (ms since 2015) above 22 bits, increasing."""

    DISCORD_EPOCH_MS = 1_420_070_400_000

    def __init__(self) -> None:
        self._last = 0

    def __next__(self) -> int:
        now_ms = int(datetime.datetime.now(datetime.UTC).timestamp() * 1000)
        self._last = max(self._last + 1, (now_ms - self.DISCORD_EPOCH_MS) << 22)
        return self._last


def snowflake_at(when: datetime.datetime) -> int:
    """The smallest id of a message created at `when` (a message from long ago)."""
    return (int(when.timestamp() * 1000) - _Snowflakes.DISCORD_EPOCH_MS) << 22


def _unauthorized() -> web.Response:
    return _json({"message": "401: Unauthorized", "code": 0}, status=401)


def _unknown_message() -> web.Response:
    return _json({"message": "Unknown Message", "code": 10008}, status=404)


def _too_long() -> web.Response:
    error = {"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}
    errors = {"content": {"_errors": [error]}}
    return _json({"message": "Invalid Form Body", "code": 50035, "errors": errors}, status=400)


def _failed(failure: Failure) -> web.Response:
    if isinstance(failure.body, str):
        return web.Response(text=failure.body, status=failure.status, content_type="text/html",
                            headers=failure.headers)  # fmt: skip
    return _json(failure.body, status=failure.status, headers=failure.headers)


def _json(
    data: Json | list[Json], status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """JSON as Discord sends it: discord.py parses a body only for exactly `application/json`."""
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    return web.Response(body=json.dumps(data).encode(), status=status, headers=all_headers)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


def frontend_for(
    fake: FakeDiscord, clock: Clock, config: DiscordConfig | None = None, **options: Any
) -> DiscordFrontend:
    """A real discord.py front end for the fake (its routes already point there). It waits only
    briefly for GUILD_CREATEs after READY: discord.py waits seconds, and the fake may send none."""
    front = DiscordFrontend(config or DiscordConfig(enabled=True), token=fake.token, clock=clock,
                            **options)  # fmt: skip
    front.client._connection.guild_ready_timeout = 0.05
    return front


if __name__ == "__main__":  # by hand: see testkit/fake_discord_by_hand.py
    from testkit.fake_discord_by_hand import main

    main()
