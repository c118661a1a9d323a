"""Approval settings in the config: `approve` per MCP server and per tool, `[tools]
approval_timeout_seconds` and `[access] approvers`; strict, each mistake one line naming the key,
and the defaults: a tool that is not read-only asks, a read-only one never does."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import load_config, parse_config
from bot.config.tools import McpServerConfig
from bot.core.errors import ConfigError

TRACKER = {"name": "tracker", "command": "tracker-mcp",
           "allowed_tools": ["create_ticket", "close_ticket", "search_tickets"]}  # fmt: skip


@pytest.mark.parametrize(
    ("data", "line"),
    [
        ({"tools": {"mcp": [{**TRACKER, "approve": "always"}]}},
         "tools.mcp.0.approve: Input should be 'ask' or 'never'"),
        ({"tools": {"mcp": [{**TRACKER, "approve": True}]}},
         "tools.mcp.0.approve: Input should be 'ask' or 'never'"),
        ({"tools": {"mcp": [{**TRACKER, "approve_tools": {"delete_all": "never"}}]}},
         "tools.mcp.0: approve_tools: 'delete_all' is not in allowed_tools"),
        ({"tools": {"mcp": [{**TRACKER, "approve_tools": {"create_ticket": "maybe"}}]}},
         "tools.mcp.0.approve_tools.create_ticket: Input should be 'ask' or 'never'"),
        ({"tools": {"approval_timeout_seconds": 0}},
         "tools.approval_timeout_seconds: Input should be greater than 0"),
        ({"tools": {"approval_timeout_seconds": 1e12}},
         "tools.approval_timeout_seconds: Input should be less than or equal to"),
        ({"tools": {"approval_timeout": 60}}, "tools.approval_timeout: unknown key"),
        ({"access": {"approvers": "everyone"}},
         "access.approvers: Input should be 'authors_and_admins' or 'admins'"),
    ],
)  # fmt: skip
def test_each_mistake_is_one_line_naming_the_key(data: dict[str, object], line: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(line), message


def test_the_defaults_ask_for_tools_that_act_and_never_for_read_only_ones() -> None:
    config = parse_config({"tools": {"mcp": [TRACKER]}})
    [server] = config.tools.mcp
    assert config.tools.approval_timeout_seconds == 900.0
    assert config.access.approvers == "authors_and_admins"
    assert server.asks("create_ticket", read_only=False)
    assert not server.asks("search_tickets", read_only=True)


def test_approve_per_server_and_per_tool(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[[tools.mcp]]\nname = "tracker"\ncommand = "tracker-mcp"\n'
        'allowed_tools = ["create_ticket", "close_ticket", "search_tickets"]\n'
        'approve = "never"\n'
        '[tools.mcp.approve_tools]\nclose_ticket = "ask"\n'
        "[tools]\napproval_timeout_seconds = 120\n"
        '[access]\napprovers = "admins"\n'
    )
    config = load_config(path)
    server: McpServerConfig = config.tools.mcp[0]
    assert not server.asks("create_ticket", read_only=False)  # the server's "never"
    assert server.asks("close_ticket", read_only=False)  # the tool's own "ask"
    assert not server.asks("close_ticket", read_only=True)  # read-only never asks
    assert (config.tools.approval_timeout_seconds, config.access.approvers) == (120.0, "admins")
