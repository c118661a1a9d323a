"""Claude's tools (`[tools]`, `[[tools.mcp]]`) and the checks a domain list gets wherever it is
set."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from bot.config.sections import CORE_TOOLS, DAY, HOUR, Section
from bot.core.settings import APPROVAL_TIMEOUT_SECONDS

DOMAIN = r"^[A-Za-z0-9*][A-Za-z0-9.*/_-]{0,252}$"
"""A domain as the web search tool takes it (`example.com`, `docs.example.com/api`)."""

SERVER_NAME = r"^[a-z][a-z0-9_-]{0,31}$"
TOOL_NAME = r"^[A-Za-z0-9_-]{1,64}$"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
Approve = Literal["ask", "never"]
MAX_TOOL_RESULT_CHARS = 20_000
"""A tool's result as the model reads it, by default: about 5,000 tokens, so one chatty tool
cannot crowd out the conversation (the rest is cut with a note)."""


def valid_domains(domains: list[str]) -> list[str]:
    for domain in domains:
        if not re.fullmatch(DOMAIN, domain):  # no ":" fits the pattern: a scheme never does
            raise ValueError(f"{domain!r} is not a domain (write example.com, no scheme)")
    return domains


Domains = Annotated[list[str], AfterValidator(valid_domains)]
"""A web search domain list (`[tools]`, `[channels.tools]`)."""


class McpServerConfig(Section):
    """One MCP server (`[[tools.mcp]]`): a stdio command, or a Streamable HTTP URL."""

    name: str = Field(pattern=SERVER_NAME)
    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set for a stdio server, with their values."""
    pass_env: list[str] = Field(default_factory=list)
    """Variables of burstbot's environment a stdio server gets, by name: it gets none of the
    others (only the SDK's few safe ones: HOME, LOGNAME, PATH, SHELL, TERM, USER)."""
    url: str | None = None
    bearer_token_env: str | None = Field(default=None, min_length=1)
    """The environment variable holding the bearer token sent to an HTTP server."""
    allowed_tools: list[str] = Field(min_length=1)
    """The server's tools Claude may call; each must be one the server lists at start."""
    timeout_seconds: float = Field(default=60.0, gt=0, le=HOUR)
    max_result_chars: int = Field(default=MAX_TOOL_RESULT_CHARS, ge=100, le=1_000_000)
    approve: Approve = "ask"
    """Whether a call to one of its tools that is not read-only waits for a person's Approve
    (read-only tools never ask); `approve_tools` sets it per tool."""
    approve_tools: dict[str, Approve] = Field(default_factory=dict)

    def asks(self, tool: str, read_only: bool) -> bool:
        """A call to `tool` waits for Approve / Deny."""
        return not read_only and self.approve_tools.get(tool, self.approve) == "ask"

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is None:
            return None
        scheme, separator, rest = url.partition("://")
        if not separator or scheme not in ("http", "https") or not rest:
            raise ValueError(f"{url!r} is not an http:// or https:// URL")
        return url

    @field_validator("allowed_tools")
    @classmethod
    def _tool_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.fullmatch(TOOL_NAME, name):
                raise ValueError(f"{name!r} is not a tool name")
        return names

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        _variable_names(list(env))
        return env

    @field_validator("pass_env")
    @classmethod
    def _pass_env_names(cls, names: list[str]) -> list[str]:
        return _variable_names(names)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("set either command (a stdio server) or url (Streamable HTTP)")
        if self.bearer_token_env and self.url is None:
            raise ValueError("bearer_token_env is for a url server (a stdio server gets none)")
        if (self.env or self.pass_env) and self.url is not None:
            raise ValueError("env and pass_env are for a stdio server (a url one runs on its own)")
        for name in self.pass_env:
            if name in self.env:
                raise ValueError(f"{name!r} is in both env and pass_env: keep one")
        for name in self.approve_tools:
            if name not in self.allowed_tools:
                raise ValueError(f"approve_tools: {name!r} is not in allowed_tools")
        return self


def _variable_names(names: list[str]) -> list[str]:
    for name in names:
        if not re.fullmatch(ENV_NAME, name):
            raise ValueError(f"{name!r} is not an environment variable name")
    return names


class ToolsConfig(Section):
    """Claude's tools (`[tools]`): web search and fetch, run and billed by Anthropic; and the
    MCP servers (`[[tools.mcp]]`) that channels enable by name."""

    web_search: bool = CORE_TOOLS.web_search
    web_search_max_uses: int = Field(default=CORE_TOOLS.max_uses, ge=1, le=1000)
    """Searches per burst, counted across the continuations of one reply."""
    web_search_allowed_domains: Domains = Field(default_factory=list)
    web_search_blocked_domains: Domains = Field(default_factory=list)
    web_fetch: bool = CORE_TOOLS.web_fetch
    mcp: list[McpServerConfig] = Field(default_factory=list)
    max_tool_calls: int = Field(default=CORE_TOOLS.max_tool_calls, ge=1, le=100)
    """MCP tool calls per burst, across its generations."""
    approval_timeout_seconds: float = Field(default=APPROVAL_TIMEOUT_SECONDS, gt=0, le=7 * DAY)
    """How long an approval card waits before it expires (the call then does not run)."""

    @model_validator(mode="after")
    def _one_domain_list(self) -> ToolsConfig:
        exclusive_domains(self.web_search_allowed_domains, self.web_search_blocked_domains)
        return self

    @model_validator(mode="after")
    def _servers_named_once(self) -> ToolsConfig:
        names = [server.name for server in self.mcp]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"tools.mcp: server {name!r} is defined twice")
        return self


def exclusive_domains(allowed: list[str] | None, blocked: list[str] | None) -> None:
    if allowed and blocked:
        raise ValueError(
            "web_search_allowed_domains and web_search_blocked_domains cannot both be set"
        )
