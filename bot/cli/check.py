"""`burstbot check-config` and `burstbot migrate`."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from bot.config import Config, DebounceConfig
from bot.ops.guards import active_limits


def display_url(url: str) -> str:
    """A storage URL safe to print: a password in it (postgresql://user:pw@host) is masked."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]  # and port, as written
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def _secret(name: str, env: Mapping[str, str], problems: list[str], setting: str) -> str:
    if env.get(name, "").strip():
        return f"{name} set"
    problems.append(f"{setting}: environment variable {name} is not set")
    return f"{name} MISSING"


def _tools(config: Config) -> str:
    """Web search and fetch as configured globally, and how many channels set their own."""
    tools = config.tools
    search = "web search off"
    if tools.web_search:
        search = f"web search on ({tools.web_search_max_uses}/burst"
        if tools.web_search_allowed_domains:
            search += f"; only {len(tools.web_search_allowed_domains)} domain(s)"
        if tools.web_search_blocked_domains:
            search += f"; {len(tools.web_search_blocked_domains)} domain(s) blocked"
        search += ")"
    overrides = sum(1 for channel in config.channels if channel.tools is not None)
    fetch = "web fetch on" if tools.web_fetch else "web fetch off"
    return f"{search}, {fetch}; {overrides} channel override(s)"


def _window(d: DebounceConfig) -> str:
    if d.adaptive:
        return f"adaptive quiet {d.min_quiet_seconds:g}-{d.max_quiet_seconds:g}s"
    return f"quiet {d.quiet_seconds:g}s"


def check_config(
    config: Config, environ: Mapping[str, str] | None = None
) -> tuple[list[str], list[str]]:
    """A summary an admin can read, and the problems that would stop `burstbot run`.

    Secrets are reported as set or missing, never shown."""
    env = os.environ if environ is None else environ
    problems: list[str] = []
    llm = config.llm
    if llm.provider == "offline":
        replier = "offline (no model calls)"
    else:
        key = _secret(llm.api_key_env, env, problems, "llm.api_key_env")
        replier = f"anthropic {llm.model} ({key})"
    frontends: list[str] = []
    if config.console.enabled:
        frontends.append("console")
    if config.slack.enabled:
        s = config.slack
        tokens = [_secret(s.bot_token_env, env, problems, "slack.bot_token_env")]
        if s.mode == "socket":
            tokens.append(_secret(s.app_token_env, env, problems, "slack.app_token_env"))
        else:
            tokens.append(_secret(s.signing_secret_env, env, problems, "slack.signing_secret_env"))
        frontends.append(f"slack ({s.mode}; {', '.join(tokens)})")
    if config.discord.enabled:
        token = _secret(config.discord.token_env, env, problems, "discord.token_env")
        frontends.append(f"discord ({token})")
    if not frontends:
        problems.append("config: no front end enabled (console, slack or discord)")
    a = config.access
    lists = [
        f"{label} {len(values)}"
        for label, values in (
            ("allow users", a.allow_users), ("block users", a.block_users),
            ("allow channels", a.allow_channels), ("block channels", a.block_channels),
            ("allow workspaces", a.allow_workspaces), ("block workspaces", a.block_workspaces),
            ("admins", a.admin_ids),
        )
        if values
    ]  # fmt: skip
    m = config.metrics
    w = config.web
    web = "off"
    if w.enabled:
        tokens = [_secret(w.token_env, env, problems, "web.token_env")]
        if w.viewer_token_env:
            tokens.append(_secret(w.viewer_token_env, env, problems, "web.viewer_token_env"))
        web = f"http://{w.host}:{w.port}/ ({', '.join(tokens)})"
    d = config.debounce
    summary = [
        f"storage     {display_url(config.storage.url)}",
        f"replier     {replier}",
        f"front ends  {', '.join(frontends) or '-'}",
        f"debounce    {_window(d)}, cap {d.max_wait_seconds:g}s; "
        f"{len(config.channels)} channel override(s)",
        f"access      {', '.join(lists) or 'everyone'}; direct messages {a.dm_policy}",
        f"limits      {', '.join(active_limits(config.limits)) or 'off'}",
        f"tools       {_tools(config)}",
        f"metrics     {f'http://{m.host}:{m.port}/metrics' if m.enabled else 'off'}",
        f"web         {web}",
        f"logging     {config.logging.format}, {config.logging.level}",
    ]
    return summary, problems


def service_checks(config: Config, service: bool) -> tuple[list[str], list[str]]:
    """What running unattended needs: (problems, warnings).

    With `service` (the unit runs `check-config --service` as the bot's user before each start)
    these are problems, so a service that could not start refuses at once with one line instead of
    restarting forever; without it, warnings, since an operator may check a service's file from
    another account or directory. A Python under a home directory stays a warning (see below)."""
    found: list[str] = []
    database = sqlite_path(config.storage.url)
    if database is not None and not os.path.isabs(database):
        found.append(
            f"storage.url: {database} is relative to the working directory, so commands run "
            "elsewhere (status, backup) would not find it; use an absolute path such as "
            "sqlite:////var/lib/burstbot/burstbot.db"
        )
    elif database is not None and service:
        folder = os.path.dirname(database)
        if not os.access(folder, os.W_OK | os.X_OK):
            found.append(
                f"storage.url: directory {folder} is not writable by this user (SQLite writes "
                "its -wal and -shm files beside the database)"
            )
        elif os.path.exists(database) and not os.access(database, os.R_OK | os.W_OK):
            found.append(f"storage.url: {database} is not readable and writable by this user")
    pid_file = config.engine.pid_file
    if pid_file:
        folder = os.path.dirname(pid_file) or "."
        if not os.path.isabs(pid_file):
            found.append(f"engine.pid_file: {pid_file} is relative; use an absolute path")
        elif not os.path.isdir(folder):
            found.append(
                f"engine.pid_file: no directory {folder} (under systemd, RuntimeDirectory= "
                "creates /run/burstbot)"
            )
        elif not os.access(folder, os.W_OK | os.X_OK):
            found.append(f"engine.pid_file: directory {folder} is not writable by this user")
    if service and config.console.enabled:
        found.append("console.enabled: a service has no terminal; set [console] enabled = false")
    if not service:
        return [], found
    warnings = []
    if python := home_python(sys.executable):  # a warning: run by hand, it did start after all
        warnings.append(
            f"python: this burstbot runs on {python}, under a home directory; the service user "
            "may not run it and systemd's ProtectHome= hides it: make the venv with the system's "
            "python3 (/usr/bin/python3 -m venv)"
        )
    return found, warnings


HOME_DIRECTORIES = ("/root/", "/home/", "/run/user/")


def home_python(executable: str) -> str | None:
    """The real interpreter behind a venv's python, if it lives under a home directory."""
    real = os.path.realpath(executable)
    return real if real.startswith(HOME_DIRECTORIES) else None


def sqlite_path(url: str) -> str | None:
    """The file of a sqlite:/// URL (sqlite:////abs/path is absolute); None for anything else."""
    if not url.startswith("sqlite:///"):
        return None
    path = url.removeprefix("sqlite:///")
    return None if path in ("", ":memory:") else path
