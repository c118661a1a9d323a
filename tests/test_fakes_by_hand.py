"""The fakes' by-hand controls (`python -m testkit.fake_slack`, `python -m testkit.fake_discord`):
a person's message, a button press and Slack's agent-session Stop reach the bot as the platform
sends them, over HTTP or Socket Mode on Slack and over the gateway on Discord."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from testkit.fake_discord import FakeDiscord
from testkit.fake_discord_by_hand import DM, GENERAL, GUILD, ByHand
from testkit.fake_slack import EventSender, FakeSlackApi
from testkit.serving import serve_locally

SECRET = "by-hand-secret"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlackApi]:
    fake = await FakeSlackApi(agent=True).start()
    yield fake
    await fake.stop()


def base(api: FakeSlackApi) -> str:
    return api.url.removesuffix("/api/")


async def form(session: aiohttp.ClientSession, url: str, **fields: str) -> Any:
    async with session.post(url, data=fields) as response:
        return response.status, await response.json()


def posted(api: FakeSlackApi, text: str, buttons: list[dict[str, Any]]) -> str:
    """The bot posts `text` with these blocks' buttons; its ts."""
    section = {"type": "section", "text": {"type": "mrkdwn", "text": text}}
    api._chat_postMessage({"channel": "D1", "text": text, "blocks": [section, *buttons]})
    return api.messages[-1].ts


STOP = [{"type": "actions", "elements": [{"type": "button", "action_id": "burstbot_stop",
         "text": {"type": "plain_text", "text": "Stop"}, "value": "draft-1"}]}]  # fmt: skip
THUMBS = {
    "type": "feedback_buttons",
    "action_id": "burstbot_vote",
    "positive_button": {"text": {"type": "plain_text", "text": "Good"}, "value": "r1:up"},
    "negative_button": {"text": {"type": "plain_text", "text": "Bad"}, "value": "r1:down"},
}
VOTES = [{"type": "context_actions", "elements": [THUMBS]}]


async def test_slack_by_hand_over_http_says_presses_and_stops_a_session(
    slack: FakeSlackApi,
) -> None:
    received: list[dict[str, Any]] = []

    async def bot(request: web.Request) -> web.Response:
        body = await request.text()
        if body.startswith("payload="):
            received.append(json.loads((await request.post())["payload"]))  # type: ignore[arg-type]
        else:
            received.append(json.loads(body)["event"])
        return web.Response()

    app = web.Application()
    app.router.add_post("/slack/events", bot)
    runner, port = await serve_locally(app)
    slack.events = EventSender(f"http://127.0.0.1:{port}/slack/events", SECRET)
    stop_ts, vote_ts = posted(slack, "Going", STOP), posted(slack, "Done", VOTES)
    try:
        async with aiohttp.ClientSession() as session:
            url = base(slack)
            said = await form(session, f"{url}/fake/say", channel="C7", text="hi", thread_ts="1.0")
            assert said[1]["event"] == 200
            assert (await form(session, f"{url}/fake/press", ts=stop_ts, button="stop", user="U2"))[
                1
            ] == {"press": 200}
            assert (await form(session, f"{url}/fake/press", ts=vote_ts, button="down"))[0] == 200
            refused = await form(session, f"{url}/fake/press", ts=vote_ts, button="stop")
            assert refused[0] == 409
            idle = await form(session, f"{url}/fake/stop-session", channel="C7", thread_ts="1.0")
            assert idle[0] == 409  # no Stop to press: the session is not processing
            slack.agents.sessions[("C7", "1.0")] = "processing"
            stopped = await form(session, f"{url}/fake/stop-session", channel="C7", thread_ts="1.0")
            assert stopped[1] == {"event": 200}
            async with session.get(f"{url}/fake/posts") as response:
                shown = await response.json()
    finally:
        await runner.cleanup()
    message, stop, vote, session_stop = received
    assert (message["type"], message["text"], message["thread_ts"]) == ("message", "hi", "1.0")
    assert stop["actions"][0]["action_id"] == "burstbot_stop" and stop["user"]["id"] == "U2"
    assert vote["actions"][0]["value"] == "r1:down"
    assert session_stop["type"] == "agent_session_stopped"
    assert [(p["shows"], p["buttons"]) for p in shown] == [
        ("Going", ["Stop"]),
        ("Done", ["👍", "👎"]),
    ]


async def test_slack_by_hand_opens_the_agent_views_messages_tab() -> None:
    received: list[dict[str, Any]] = []

    async def bot(request: web.Request) -> web.Response:
        body = json.loads(await request.text())
        received.append({**body["event"], "authorizations": body.get("authorizations")})
        return web.Response()

    app = web.Application()
    app.router.add_post("/slack/events", bot)
    runner, port = await serve_locally(app)
    slack = await FakeSlackApi(view="agent").start()
    slack.events = EventSender(f"http://127.0.0.1:{port}/slack/events", SECRET)
    try:
        async with aiohttp.ClientSession() as session:
            url = f"{base(slack)}/fake/messages-tab"
            opened = await form(session, url, user="U1", viewing="C7")
            assert opened[1] == {"channel": "D1", "events": [200, 200]}
    finally:
        await slack.stop()
        await runner.cleanup()
    looking, home = received
    assert looking["type"] == "app_context_changed"
    assert looking["context"]["entities"][0]["value"] == "C7"
    assert looking["authorizations"][0]["user_id"] == "U1"
    assert (home["type"], home["tab"], home["channel"], home["user"]) == (
        "app_home_opened", "messages", "D1", "U1")  # fmt: skip


async def test_slack_by_hand_without_an_events_url_goes_over_socket_mode(
    slack: FakeSlackApi,
) -> None:
    stop_ts = posted(slack, "Going", STOP)
    socket_url = base(slack).replace("http", "ws") + "/socket"
    async with aiohttp.ClientSession() as session, session.ws_connect(socket_url) as socket:
        assert (await socket.receive_json())["type"] == "hello"
        said = await form(session, f"{base(slack)}/fake/say", channel="D1", text="hi")
        event = await socket.receive_json()
        assert said[1]["event"] == event["envelope_id"]
        assert event["payload"]["event"]["text"] == "hi"
        await form(session, f"{base(slack)}/fake/press", ts=stop_ts, button="stop")
        press = await socket.receive_json()
        assert press["type"] == "interactive"
        assert press["payload"]["actions"][0]["action_id"] == "burstbot_stop"


CARD = [{"type": "actions", "elements": [
    {"type": "button", "action_id": "burstbot_approve", "value": "card-1", "style": "primary",
     "text": {"type": "plain_text", "text": "Approve"}},
    {"type": "button", "action_id": "burstbot_deny", "value": "card-1", "style": "danger",
     "text": {"type": "plain_text", "text": "Deny"}}]}]  # fmt: skip


async def test_slack_by_hand_presses_a_cards_approve_or_deny(slack: FakeSlackApi) -> None:
    """A card shows two buttons: each is pressed by its label, over the socket as Slack sends it."""
    card_ts = posted(slack, "May I run create_ticket?", CARD)
    socket_url = base(slack).replace("http", "ws") + "/socket"
    async with aiohttp.ClientSession() as session, session.ws_connect(socket_url) as socket:
        assert (await socket.receive_json())["type"] == "hello"
        pressed = []
        for button, user in (("approve", "U2"), ("deny", "U1")):
            await form(session, f"{base(slack)}/fake/press", ts=card_ts, button=button, user=user)
            payload = (await socket.receive_json())["payload"]
            pressed.append((payload["actions"][0]["action_id"], payload["user"]["id"]))
        refused = await form(session, f"{base(slack)}/fake/press", ts=card_ts, button="stop")
        async with session.get(f"{base(slack)}/fake/posts") as response:
            shown = await response.json()
    assert pressed == [("burstbot_approve", "U2"), ("burstbot_deny", "U1")]
    assert refused[0] == 409
    assert shown[0]["buttons"] == ["Approve", "Deny"]


async def test_discord_by_hand_presses_a_cards_approve_or_deny() -> None:
    fake = FakeDiscord()
    fake.guilds.append(GUILD)
    fake.add_channel(GENERAL, "text", guild_id=GUILD)
    async with fake:
        runner, port = await serve_locally(ByHand(fake).application())
        control = f"http://127.0.0.1:{port}/fake"
        approve = {"type": 2, "style": 3, "label": "Approve", "custom_id": "burstbot:approve:c1"}
        deny = {"type": 2, "style": 4, "label": "Deny", "custom_id": "burstbot:deny:c1"}
        buttons = [{"type": 1, "components": [approve, deny]}]
        fake.create_post(GENERAL, {"content": "May I?", "components": buttons})
        [post] = fake.created
        pressed = []
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.ws_connect(str(fake.gateway_url)) as gateway,
            ):
                await gateway.receive_json()  # hello
                await gateway.send_json({"op": 2, "d": {"token": fake.token, "intents": 0}})
                assert (await gateway.receive_json())["t"] == "READY"
                assert (await gateway.receive_json())["t"] == "GUILD_CREATE"
                for button in ("deny", "approve"):
                    pressing = asyncio.create_task(
                        form(session, f"{control}/press", id=post["id"], button=button, user="bob")
                    )
                    pressed.append((await gateway.receive_json())["d"]["data"]["custom_id"])
                    await pressing  # no answer from a bot here: it waits out Discord's 3 s
                refused = await form(session, f"{control}/press", id=post["id"], button="stop")
        finally:
            await runner.cleanup()
    assert pressed == ["burstbot:deny:c1", "burstbot:approve:c1"]
    assert refused[0] == 409


async def test_discord_by_hand_says_and_presses_over_the_gateway() -> None:
    fake = FakeDiscord()
    fake.guilds.append(GUILD)
    fake.add_channel(GENERAL, "text", guild_id=GUILD)
    fake.add_channel(DM, "dm")
    async with fake:
        runner, port = await serve_locally(ByHand(fake).application())
        control = f"http://127.0.0.1:{port}/fake"
        buttons = [{"type": 1, "components": [
            {"type": 2, "style": 4, "label": "Stop", "custom_id": "stop:d1"}]}]  # fmt: skip
        fake.create_post(GENERAL, {"content": "Going", "components": buttons})
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.ws_connect(str(fake.gateway_url)) as gateway,
            ):
                await gateway.receive_json()  # hello
                await gateway.send_json({"op": 2, "d": {"token": fake.token, "intents": 0}})
                assert (await gateway.receive_json())["t"] == "READY"
                assert (await gateway.receive_json())["t"] == "GUILD_CREATE"
                await form(session, f"{control}/say", user="bob", text="hello")
                said = (await gateway.receive_json())["d"]
                [post] = fake.created
                pressing = asyncio.create_task(
                    form(session, f"{control}/press", id=post["id"], button="stop")
                )
                pressed = (await gateway.receive_json())["d"]
                await pressing  # no answer from a bot here: it waits out Discord's 3 s
                async with session.get(f"{control}/posts") as response:
                    shown = await response.json()
        finally:
            await runner.cleanup()
    assert (said["content"], said["author"]["username"]) == ("hello", "bob")
    assert said["guild_id"] == str(GUILD)
    assert pressed["data"]["custom_id"] == "stop:d1"
    assert pressed["member"]["user"]["username"] == "alice"
    assert shown == [{"id": post["id"], "channel": "general", "content": "Going",
                      "buttons": ["Stop"]}]  # fmt: skip


async def test_discord_by_hand_runs_burstbot_against_the_fake(tmp_path: Path) -> None:
    """`python -m testkit.fake_discord run --port P --config C` is `burstbot run --config C` on
    the fake: it connects, registers /reset, and stops cleanly on SIGTERM."""
    config = tmp_path / "c.toml"
    config.write_text(
        '[llm]\nprovider = "offline"\n[console]\nenabled = false\n'
        '[storage]\nurl = "sqlite:///b.db"\n[discord]\nenabled = true\n'
    )
    async with FakeDiscord() as fake:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "testkit.fake_discord", "run", "--port", str(fake.port),
            "--config", str(config), cwd=tmp_path,
            env={**os.environ, "DISCORD_TOKEN": fake.token, "PYTHONPATH": str(ROOT)},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            await fake.wait_for(lambda: bool(fake.command_posts), within=30)
        finally:
            process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                _, stderr = await process.communicate()
    assert process.returncode == 0, stderr.decode()
    assert fake.identify is not None and fake.identify["token"] == fake.token
