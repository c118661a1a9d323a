"""Tried as a new user would: the app is made from the shipped manifest's text on the fake grid
("Create New App" → "From a manifest", HTTP mode as the manifest's header says, "Install to
Workspace"), burstbot runs on the config's defaults with that token, and one exchange happens in
the Messages tab. The grid sends only the events the manifest subscribes to and gives the app
only what it declares, so a manifest missing an event, a scope or the agent view fails here; the
journal is every event and Web API call of the exchange, in order."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace

from adapters.slack import SlackFrontend
from bot.app import App
from storage.sqlite import SqliteStore
from testkit import ScriptedReplier
from testkit.clock import FakeClock
from testkit.fake_slack import TEAM
from testkit.fake_slack_grid import FakeSlackGrid
from tests.clock_steps import step
from tests.slack_harness import SECRET, TOKEN, shut_down, slack_config
from tests.test_slack_assistant import INTERVAL, PROMPTS, until

MANIFEST = Path(__file__).resolve().parent.parent / "adapters" / "slack" / "manifest.yml"

EXCHANGE = [
    "event app_home_opened channel=D1 tab=messages",
    "call assistant.threads.setSuggestedPrompts channel_id=D1",
    "event app_context_changed viewing=C5",
    "event message channel=D1 ts=<1>",
    "call agents.sessions.rename channel_id=D1 thread_ts=<1> title=how do I rotate",
    "event message channel=D1 ts=<2>",
    "event message channel=D1 ts=<3>",
    "call conversations.info channel=C5",
    "call agents.sessions.setStatus channel_id=D1 thread_ts=<1> status=processing",
    "call chat.startStream channel=D1 thread_ts=<1>",
    "call chat.stopStream channel=D1 ts=<answer>",
    "call chat.update channel=D1 ts=<answer>",
    "call conversations.replies channel=D1 ts=<1>",
    "call agents.sessions.setStatus channel_id=D1 thread_ts=<1> status=active",
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def named(line: str, names: dict[str, str]) -> str:
    """A journal line with each message's ts replaced by its name."""
    for ts, name in names.items():
        line = line.replace(ts, name)
    return line


def as_the_header_says_for_http(manifest: str, request_url: str) -> str:
    """The manifest's own instructions for HTTP mode: no socket mode, and the request URL."""
    manifest = manifest.replace("socket_mode_enabled: true", "socket_mode_enabled: false")
    return manifest.replace(
        "  event_subscriptions:\n", f"  event_subscriptions:\n    request_url: {request_url}\n"
    )


async def test_a_new_user_makes_the_app_from_the_manifest_and_has_one_exchange() -> None:
    grid = FakeSlackGrid(token_format=TOKEN)
    workspace = grid.add_workspace(TEAM, "Acme")
    workspace.channels = {"C5": {"name": "general", "is_member": True}}
    await grid.start()
    port = free_port()
    grid.create_app(
        as_the_header_says_for_http(MANIFEST.read_text(), f"http://127.0.0.1:{port}/slack/events")
    )
    assert grid.install_app(TEAM) == TOKEN
    grid.signing_secret = SECRET
    fake = SimpleNamespace(url=grid.url)
    config = slack_config(fake, http_port=port, assistant={"suggested_prompts": PROMPTS})  # type: ignore[arg-type]
    assert config.slack.surface == "agent"  # the default, as the docs say
    clock, replier, store = FakeClock(), ScriptedReplier(hold=True), SqliteStore(":memory:")
    frontend = SlackFrontend(config.slack, TOKEN, signing_secret=SECRET, clock=clock)
    app = App(config, store, replier, [frontend], clock=clock, owner="w1")
    await store.open()
    await frontend.start(app)
    assistant = frontend.only.assistant
    try:
        grid.journal.clear()  # from here: one exchange
        assert await grid.open_messages_tab(TEAM, "U1") == 200
        await assistant.idle()
        assert await grid.look_at(TEAM, "U1", "C5") == 200
        sent = []
        for text in ("how do I rotate", "the signing secret", "without downtime?"):
            ts, status = await grid.say(TEAM, "D1", text)
            assert status == 200
            sent.append(ts)
            await app.engine.idle()
            await assistant.idle()
        await clock.advance(1.5)
        await app.engine.run_due()
        call = await replier.next_call(0)
        assert "The user is looking at #general" in call.prompt.system
        await clock.advance(1.0)  # the indicator's delay
        await app.engine.indicator.idle()
        await until(lambda: workspace.agents.statuses_of("D1", sent[0]) == ["processing"])
        call.stream(3, "Add the new secret")
        await step(clock, INTERVAL)
        await until(lambda: "chat.startStream" in workspace.methods())
        call.finish("Add the new secret first, then remove the old one.")
        await step(clock, INTERVAL)
        await app.engine.idle()
        await app.engine.outbox.deliver_due()
        await app.engine.idle()
        await app.engine.indicator.idle()
        await until(lambda: workspace.agents.statuses_of("D1", sent[0])[-1:] == ["active"])
        [answer] = workspace.posts()
        assert answer.thread_ts == sent[0] and not answer.streaming
        names = {ts: f"<{n}>" for n, ts in enumerate(sent, 1)} | {answer.ts: "<answer>"}
        journal = [named(line, names) for line in grid.journal]
        assert journal == EXCHANGE
    finally:
        await shut_down(app, frontend, store)
        await grid.stop()
