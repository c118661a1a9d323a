"""MCP servers in the config: `[[tools.mcp]]` entries enabled per channel by name, every mistake
one line naming the key; a channel (or DM) that does not list a server gets none of its tools."""

from __future__ import annotations

import pytest

from bot.config import Config, parse_config
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey
from bot.core.settings import WebTools
from bot.wiring import engine_settings

TRACKER = {"name": "tracker", "command": "tracker-mcp", "allowed_tools": ["create_ticket"]}


def config_with(
    server: dict[str, object], channel_tools: dict[str, object] | None = None
) -> Config:
    data: dict[str, object] = {"tools": {"mcp": [server]}}
    if channel_tools is not None:
        data["channels"] = [{"platform": "slack", "channel": "C1", "tools": channel_tools}]
    return parse_config(data)


@pytest.mark.parametrize(
    ("server", "channel_tools", "line"),
    [
        (
            {**TRACKER, "url": "http://a"},
            None,
            "tools.mcp.0: set either command (a stdio server) or url (Streamable HTTP)",
        ),
        (
            {"name": "tracker", "allowed_tools": ["x"]},
            None,
            "tools.mcp.0: set either command (a stdio server) or url (Streamable HTTP)",
        ),
        (
            {"name": "tracker", "url": "localhost:8000/mcp", "allowed_tools": ["x"]},
            None,
            "tools.mcp.0.url: 'localhost:8000/mcp' is not an http:// or https:// URL",
        ),
        ({**TRACKER, "allowed_tools": []}, None, "tools.mcp.0.allowed_tools: List should have"),
        (
            {**TRACKER, "bearer_token_env": "TRACKER_TOKEN"},
            None,
            "tools.mcp.0: bearer_token_env is for a url server (a stdio server gets none)",
        ),
        ({**TRACKER, "token": "s3cret"}, None, "tools.mcp.0.token: unknown key"),
        (
            {**TRACKER, "pass_env": ["TRACKER-TOKEN"]},
            None,
            "tools.mcp.0.pass_env: 'TRACKER-TOKEN' is not an environment variable name",
        ),
        (
            {**TRACKER, "env": {"TRACKER_TOKEN": "a"}, "pass_env": ["TRACKER_TOKEN"]},
            None,
            "tools.mcp.0: 'TRACKER_TOKEN' is in both env and pass_env: keep one",
        ),
        (
            {"name": "wiki", "url": "http://a", "allowed_tools": ["x"], "env": {"A": "1"}},
            None,
            "tools.mcp.0: env and pass_env are for a stdio server (a url one runs on its own)",
        ),
        (
            TRACKER,
            {"mcp": ["wiki"]},
            "channels.0.tools.mcp: unknown server 'wiki' (define it in a [[tools.mcp]] entry)",
        ),
    ],
)
def test_each_mistake_is_one_line(
    server: dict[str, object], channel_tools: dict[str, object] | None, line: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        config_with(server, channel_tools)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(line)


def test_a_server_defined_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="server 'tracker' is defined twice"):
        parse_config({"tools": {"mcp": [TRACKER, TRACKER]}})


def test_only_channels_that_list_a_server_get_it() -> None:
    config = parse_config(
        {
            "tools": {"mcp": [TRACKER], "max_tool_calls": 3},
            "channels": [
                {"platform": "slack", "channel": "C1", "tools": {"mcp": ["tracker"]}},
                {"platform": "slack", "channel": "D7", "tools": {"mcp": ["tracker"]}},
                {"platform": "slack", "channel": "C2", "tools": {"web_search": True}},
            ],
        }
    )
    settings = engine_settings(config)

    def tools(*key: str) -> WebTools:
        return settings.for_conversation(ConversationKey(*key)).tools

    listed = tools("slack", "T1", "C1", "171.2")
    assert (listed.mcp, listed.max_tool_calls) == (("tracker",), 3)
    assert tools("slack", "T1", "D7").mcp == ("tracker",)
    assert tools("slack", "T1", "C2").mcp == ()
    assert tools("slack", "T1", "D9").mcp == ()  # an unlisted DM
    assert tools("discord", "@me", "5").mcp == ()


def test_the_bearer_token_variable_is_redacted_from_logs() -> None:
    server = {"name": "wiki", "url": "https://wiki.example/mcp", "bearer_token_env": "WIKI_TOKEN",
              "allowed_tools": ["search"]}  # fmt: skip
    assert "WIKI_TOKEN" in parse_config({"tools": {"mcp": [server]}}).secret_env_names()
