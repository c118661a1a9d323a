"""The fake Discord by hand: `python -m testkit.fake_discord --port 8767 --control-port 8768`.

It serves the fake Discord API and gateway (`testkit.fake_discord`) with one server (guild
`GUILD`, text channel `general`) and a DM with alice. The config names no Discord URL, so
`python -m testkit.fake_discord run --port 8767 --config CONFIG` is `burstbot run --config CONFIG`
with discord.py's REST base and gateway pointed at the fake on that port. The token it accepts is
`test-token` (`DISCORD_TOKEN=test-token`).

People are `alice`, `bob` and `carol`. A control server on `--control-port` plays them:

- `POST /fake/say` (form: `text`, optional `user` (alice), `channel`: `general` (default) or
  `dm`): a person writes; the message lands in the channel's history and goes to the bot over
  the gateway as MESSAGE_CREATE.
- `POST /fake/press` (form: `id` of a bot's message, `button`: `stop`, `approve`, `deny`, `up`
  for 👍 or `down` for 👎, optional `user`): a person presses one of its buttons (an
  INTERACTION_CREATE).
- `GET /fake/posts`: the bot's messages as they show now (`content` and the `buttons` under it).
- `GET /fake/answers`: what the bot answered each press (interaction responses): `type` (4: a
  message, 6: a deferred update), `content`, and whether only the presser saw it (`ephemeral`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

import discord
import yarl
from aiohttp import web

from testkit.fake_discord import FakeDiscord, Json
from testkit.serving import serve_locally

GUILD, GENERAL, DM = 400_000_000_000_000_001, 400_000_000_000_000_002, 400_000_000_000_000_003
PEOPLE: dict[str, Json] = {
    name: {"id": str(200_000_000_000_000_000 + n), "username": name, "discriminator": "0",
           "global_name": name.capitalize(), "avatar": None}
    for n, name in enumerate(("alice", "bob", "carol"), start=1)
}  # fmt: skip
EPHEMERAL = 64
BUTTONS = {
    "stop": ("label", "Stop"),
    "approve": ("label", "Approve"),
    "deny": ("label", "Deny"),
    "up": ("emoji", "👍"),
    "down": ("emoji", "👎"),
}


def _buttons(message: Json) -> list[Json]:
    return [b for row in message.get("components", []) for b in row.get("components", [])]


def _name(button: Json) -> str:
    return str(button.get("label") or (button.get("emoji") or {}).get("name", ""))


class ByHand:
    """The control server's handlers, over one fake Discord."""

    def __init__(self, fake: FakeDiscord) -> None:
        self.fake = fake

    def application(self) -> web.Application:
        """The control server: /fake/say, /fake/press, /fake/posts, /fake/answers."""
        app = web.Application()
        app.router.add_post("/fake/say", self.say)
        app.router.add_post("/fake/press", self.press)
        app.router.add_get("/fake/posts", self.posts)
        app.router.add_get("/fake/answers", self.answers)
        return app

    async def say(self, request: web.Request) -> web.Response:
        form = await request.post()
        user = PEOPLE.get(str(form.get("user", "alice")))
        if user is None:
            refused = {"error": f"no such person; one of {list(PEOPLE)}"}
            return web.json_response(refused, status=400)
        if str(form.get("channel", "general")) == "dm":
            message = self.fake.message(DM, user, str(form["text"]))
        else:
            message = self.fake.message(GENERAL, user, str(form["text"]), guild_id=str(GUILD))
        await self.fake.dispatch("MESSAGE_CREATE", message)
        return web.json_response({"id": message["id"]})

    async def press(self, request: web.Request) -> web.Response:
        form = await request.post()
        user = PEOPLE.get(str(form.get("user", "alice")))
        button = BUTTONS.get(str(form["button"]))
        if user is None or button is None:
            choices = "user: alice|bob|carol, button: " + "|".join(BUTTONS)
            return web.json_response({"error": choices},
                                     status=400)  # fmt: skip
        message_id = str(form["id"])
        found = [m for m in self._posts() if m["id"] == message_id]
        pressed = [b for m in found for b in _buttons(m) if _name(b) == button[1]]
        if not pressed:
            return web.json_response({"error": f"message {message_id} shows no {button[1]}"},
                                     status=409)  # fmt: skip
        payload = self.fake.click(message_id, str(pressed[0]["custom_id"]), user)
        answered = len(self.fake.callbacks)
        await self.fake.dispatch("INTERACTION_CREATE", payload)
        with contextlib.suppress(TimeoutError):  # Discord gives the bot 3 seconds
            await self.fake.wait_for(lambda: len(self.fake.callbacks) > answered, within=3.0)
        return web.json_response({"interaction": payload["id"]})

    def _posts(self) -> list[Json]:
        bot = self.fake.bot_user["id"]
        return [m for channel in self.fake.history.values() for m in channel
                if m["author"]["id"] == bot]  # fmt: skip

    async def posts(self, request: web.Request) -> web.Response:
        shown = [{"id": m["id"], "channel": "dm" if int(m["channel_id"]) == DM else "general",
                  "content": m["content"], "buttons": [_name(b) for b in _buttons(m)]}
                 for m in self._posts()]  # fmt: skip
        return web.json_response(shown)

    async def answers(self, request: web.Request) -> web.Response:
        answered = [{"interaction": c["interaction_id"], "type": c.get("type"),
                     "content": (c.get("data") or {}).get("content", ""),
                     "ephemeral": bool(((c.get("data") or {}).get("flags") or 0) & EPHEMERAL)}
                    for c in self.fake.callbacks]  # fmt: skip
        return web.json_response(answered)


async def _serve(port: int, control_port: int) -> None:
    fake = FakeDiscord(port=port)
    fake.guilds.append(GUILD)
    fake.add_channel(GENERAL, "text", guild_id=GUILD)
    fake.add_channel(DM, "dm", recipient=PEOPLE["alice"])
    async with fake:
        runner, bound = await serve_locally(
            ByHand(fake).application(), control_port, access_log=None
        )
        command = f"python -m testkit.fake_discord run --port {fake.port} --config CONFIG"
        print(f"fake Discord API {fake.api_base}, gateway {fake.gateway_url}", flush=True)
        people = ", ".join(f"{name} ({person['id']})" for name, person in PEOPLE.items())
        print(f"people: {people}; server {GUILD}, channel general {GENERAL}", flush=True)
        print(f"control: http://127.0.0.1:{bound}/fake/ (say, press, posts, answers)", flush=True)
        print(
            f"run burstbot against it (DISCORD_TOKEN={fake.token}):\n  {command}",
            flush=True,
        )
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()


def run_burstbot(argv: list[str]) -> None:
    """`burstbot run --config CONFIG` against the fake on `--port`."""
    parser = argparse.ArgumentParser(prog="python -m testkit.fake_discord run")
    parser.add_argument("--port", type=int, default=8767, help="the fake's --port")
    parser.add_argument("--config", required=True)
    args = parser.parse_args(argv)
    discord.http.Route.BASE = f"http://127.0.0.1:{args.port}/api/v10"
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(
        f"ws://127.0.0.1:{args.port}/gateway"
    )
    from bot.cli import main as burstbot

    raise SystemExit(burstbot(["run", "--config", args.config]))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:
        run_burstbot(argv[1:])
    parser = argparse.ArgumentParser(description="A fake Discord on 127.0.0.1, by hand")
    parser.add_argument("--port", type=int, default=8767, help="the Discord API and gateway")
    parser.add_argument("--control-port", type=int, default=8768, help="/fake/say, press, ...")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.port, args.control_port))
