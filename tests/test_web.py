"""The operator's page over HTTP: the gates (login, roles, CSRF, Host, the bound address), the
actions run once, and what a page may never show (a chat user's markup, a secret)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from bot.config import parse_config
from bot.core.clock import SystemClock
from bot.core.errors import ConfigError
from bot.core.events import IncomingMessage
from bot.web.server import WebContext, WebServer
from storage.sqlite import SqliteStore
from tests.web_harness import (
    ANSWERED,
    CSRF,
    FAILING,
    LEAKED,
    OPERATOR_TOKEN,
    TOKEN_ENV,
    VIEWER_TOKEN,
    client,
    forms,
    log_in,
    running_app,
)


async def test_without_a_session_every_page_and_action_leads_to_the_login(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_app(tmp_path, monkeypatch) as bot, client() as http:
        requests = [("GET", "/"), ("GET", "/usage"), ("GET", "/conversation?id=test/w1/c1/"),
                    ("POST", "/retry"), ("POST", "/erase")]  # fmt: skip
        for method, path in requests:
            async with http.request(method, bot.base + path, allow_redirects=False) as response:
                assert (response.status, response.headers["Location"]) == (303, "/login")
        made_up = {"burstbot_session": "made-up"}
        form = {"reply": "1", "action": "a1"}
        async with http.post(bot.base + "/retry", data=form, cookies=made_up,
                             allow_redirects=False) as response:  # fmt: skip
            assert response.status == 303
        assert await bot.reply_states(FAILING) == ["failed"]


async def test_a_login_gives_an_httponly_strict_cookie_and_a_wrong_token_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_app(tmp_path, monkeypatch) as bot, client() as http:
        wrong = await log_in(http, bot.base, "not-the-token")
        assert wrong.status == 401 and "burstbot_session" not in wrong.cookies
        response = await log_in(http, bot.base, OPERATOR_TOKEN)
        assert (response.status, response.headers["Location"]) == (303, "/")
        cookie = response.headers["Set-Cookie"]
        assert cookie.startswith("burstbot_session=")
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
        async with http.get(bot.base + "/") as page:
            assert page.status == 200 and 'id="role">operator<' in await page.text()
            assert "default-src 'none'" in page.headers["Content-Security-Policy"]


async def test_a_login_without_the_forms_csrf_token_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_app(tmp_path, monkeypatch) as bot, client() as http:
        form = {"token": OPERATOR_TOKEN}
        async with http.post(bot.base + "/login", data=form, allow_redirects=False) as response:
            assert response.status == 403 and "burstbot_session" not in response.cookies


async def test_failed_logins_are_limited_per_client_until_the_window_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_app(tmp_path, monkeypatch, login_attempts=3) as bot, client() as http:
        statuses = [(await log_in(http, bot.base, f"guess-{n}")).status for n in range(4)]
        assert statuses == [401, 401, 401, 429]
        async with http.get(bot.base + "/login") as page:
            csrf = CSRF.search(await page.text())
        assert csrf is not None
        form = {"csrf": csrf.group(1), "token": "guess-4"}
        async with http.post(bot.base + "/login", data=form) as refused:
            assert refused.status == 429
            assert "too many failed logins: try again in 60 s" in await refused.text()
        assert (await log_in(http, bot.base, OPERATOR_TOKEN)).status == 429  # even the right one
        await bot.clock.advance(61.0)
        assert (await log_in(http, bot.base, OPERATOR_TOKEN)).status == 303


async def test_a_viewer_sees_the_pages_but_may_not_act(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_app(tmp_path, monkeypatch) as bot, client() as http:
        assert (await log_in(http, bot.base, VIEWER_TOKEN)).status == 303
        async with http.get(bot.base + "/") as page:
            text = await page.text()
        assert 'id="role">viewer<' in text and "r1" in text and forms(text) == []
        csrf = text.split('name="csrf" value="')[1].split('"')[0]  # the log-out form's
        retry = {"csrf": csrf, "action": "a1", "reply": "1"}
        erase = {"csrf": csrf, "action": "a2", "conversation": ANSWERED.id, "confirm": "yes"}
        for path, form in (("/retry", retry), ("/erase", erase)):
            async with http.post(bot.base + path, data=form, allow_redirects=False) as response:
                assert response.status == 403
        async with http.get(bot.base + "/erase?id=" + ANSWERED.id) as response:
            assert response.status == 403
        assert await bot.reply_states(FAILING) == ["failed"]
        assert [m.text for m in await bot.store.messages(ANSWERED.id)] == ["a plain question"]


async def test_an_action_without_the_csrf_token_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_app(tmp_path, monkeypatch) as bot, client() as http:
        await log_in(http, bot.base, OPERATOR_TOKEN)
        for form in ({"action": "a1", "reply": "1"},
                     {"csrf": "forged", "action": "a1", "reply": "1"}):  # fmt: skip
            async with http.post(bot.base + "/retry", data=form, allow_redirects=False) as r:
                assert r.status == 403 and "CSRF" in await r.text()
        assert await bot.reply_states(FAILING) == ["failed"]


async def test_one_action_id_runs_once_and_another_tab_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same form sent twice at once (a double click), then a second tab's own form: one
    re-queue, one post."""
    async with running_app(tmp_path, monkeypatch) as bot, client() as http:
        await log_in(http, bot.base, OPERATOR_TOKEN)
        url = bot.base + "/conversation?id=" + FAILING.id
        tabs = []
        for _ in range(2):
            async with http.get(url) as page:
                tabs.append(forms(await page.text()))
        [(path, first)], [(_, second)] = [[f for f in t if f[0] == "/retry"] for t in tabs]
        assert first["action"] != second["action"]

        async def send(form: dict[str, str]) -> str:
            async with http.post(bot.base + path, data=form) as response:
                assert response.status == 200
                return await response.text()

        pages = await asyncio.gather(send(first), send(first))
        assert all("re-queued r1" in page for page in pages)
        again = await send(second)  # pending, or sent already: refused either way
        assert "<h1>conversation test/w1/c1/</h1>" in again
        assert "not failed: nothing to retry" in again
        await bot.settle(FAILING, 0.1)
        assert await bot.reply_states(FAILING) == ["sent"]
        assert [p.reply_id for p in bot.frontend.posts].count("r1") == 1


async def test_erasing_needs_its_confirmation_then_erases_the_conversations_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_app(tmp_path, monkeypatch) as bot, client() as http:
        await log_in(http, bot.base, OPERATOR_TOKEN)
        async with http.get(bot.base + "/erase?id=" + ANSWERED.id) as page:
            [(path, form)] = forms(await page.text())
        async with http.post(bot.base + path, data={**form, "confirm": ""}) as response:
            assert response.status == 400
        assert [m.text for m in await bot.store.messages(ANSWERED.id)] == ["a plain question"]
        async with http.post(bot.base + path, data=form) as response:
            assert "forget conversation test/w1/c2/: erased" in await response.text()
        assert [m.text for m in await bot.store.messages(ANSWERED.id)] == [""]


async def test_a_page_escapes_chat_text_and_shows_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_app(tmp_path, monkeypatch) as bot, client() as http:
        await log_in(http, bot.base, OPERATOR_TOKEN)
        texts = []
        for path in ("/", "/conversation?id=" + FAILING.id, "/usage"):
            async with http.get(bot.base + path) as page:
                texts.append(await page.text())
        overview, timeline, _ = texts
        assert "&lt;script&gt;document.title=" in timeline and "<script>" not in timeline
        assert "&lt;b&gt;bold?&lt;/b&gt;" in timeline
        assert "channel_not_found ([redacted])" in overview
        for text in texts:
            assert LEAKED not in text and OPERATOR_TOKEN not in text and VIEWER_TOKEN not in text


async def test_the_page_answers_only_to_its_own_host_name_and_its_proxys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxied = {"proxy_hosts": ["ops.example.com"]}
    async with running_app(tmp_path, monkeypatch, **proxied) as bot, client() as http:
        port = bot.base.rsplit(":", 1)[1]
        for host, status in ((f"rebound.example:{port}", 421), (f"localhost:{port}", 421),
                             ("ops.example.com", 200), (f"127.0.0.1:{port}", 200)):  # fmt: skip
            async with http.get(bot.base + "/login", headers={"Host": host}) as response:
                assert (host, response.status) == (host, status)


async def test_the_page_listens_on_the_configured_address_only(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "bound.db"))
    await store.open()
    config = parse_config({"web": {"host": "127.0.0.2", "port": 0,
                                   "token_env": "TEST_WEB_OPERATOR"}})  # fmt: skip
    server = WebServer(config.web, WebContext(lambda: config, store, SystemClock()), TOKEN_ENV)
    await server.start()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.2:{server.port}/login") as response:
                assert response.status == 200
            with pytest.raises(aiohttp.ClientConnectorError):
                await http.get(f"http://127.0.0.1:{server.port}/login")
    finally:
        await server.stop()
        await store.close()


def test_the_web_section_is_strict() -> None:
    with pytest.raises(ConfigError, match=r"^web\.tokn_env: unknown key$"):
        parse_config({"web": {"tokn_env": "X"}})
    with pytest.raises(ConfigError, match=r"^web\.port: .*less than or equal to 65535$"):
        parse_config({"web": {"port": 70000}})
    with pytest.raises(ConfigError, match=r"^web: viewer_token_env must name another variable"):
        parse_config({"web": {"token_env": "A", "viewer_token_env": "A"}})


async def test_a_token_variable_that_is_not_set_stops_the_start_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEST_WEB_NOT_SET", raising=False)
    config = parse_config({"web": {"token_env": "TEST_WEB_NOT_SET"}})
    store = SqliteStore(str(tmp_path / "unset.db"))
    with pytest.raises(ConfigError) as failure:
        WebServer(config.web, WebContext(lambda: config, store, SystemClock()))
    assert str(failure.value) == "web.token_env: environment variable TEST_WEB_NOT_SET is not set"


async def test_burstbot_web_serves_the_page_from_the_database(tmp_path: Path) -> None:
    database = tmp_path / "served.db"
    store = SqliteStore(str(database))
    await store.open()
    await store.close()
    config = tmp_path / "burstbot.toml"
    config.write_text(f'[storage]\nurl = "sqlite:///{database}"\n[console]\nenabled = false\n'
                      '[web]\nport = 0\ntoken_env = "TEST_WEB_OPERATOR"\n')  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "web", "--config", str(config),
        stdout=asyncio.subprocess.PIPE, env={**os.environ, **TOKEN_ENV},
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        assert line.startswith("burstbot: operator page on http://127.0.0.1:")
        url = line.split(" on ")[1].split(" ")[0]
        async with client() as http:
            assert (await log_in(http, url.rstrip("/"), OPERATOR_TOKEN)).status == 303
            async with http.get(url) as page:
                assert page.status == 200 and "<h1>overview</h1>" in await page.text()
    finally:
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0


async def test_a_busy_port_is_one_config_line(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "busy.db"))
    config = parse_config({"web": {"port": 0, "token_env": "TEST_WEB_OPERATOR"}})
    context = WebContext(lambda: config, store, SystemClock())
    first = WebServer(config.web, context, TOKEN_ENV)
    await first.start()
    try:
        taken = config.web.model_copy(update={"port": first.port})
        with pytest.raises(ConfigError, match=rf"^web: cannot listen on 127.0.0.1:{first.port} "):
            await WebServer(taken, context, TOKEN_ENV).start()
    finally:
        await first.stop()


async def test_a_timeline_refreshes_itself_while_its_conversation_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_app(tmp_path, monkeypatch, refresh_seconds=3.0) as bot, client() as http:
        await log_in(http, bot.base, OPERATOR_TOKEN)
        url = bot.base + "/conversation?id=" + ANSWERED.id
        refresh = '<meta http-equiv="refresh" content="3">'
        async with http.get(url) as page:
            assert refresh not in await page.text()  # answered and posted: nothing to wait for
        await bot.app.ingest(IncomingMessage(ANSWERED, "m3", "u2", "bob", "one more thing"))
        async with http.get(url) as page:
            text = await page.text()
        assert refresh in text and "received  #2 bob: one more thing" in text
        await bot.settle(ANSWERED)
        async with http.get(url) as page:
            assert refresh not in await page.text()


async def test_a_token_short_enough_to_guess_is_refused(tmp_path: Path) -> None:
    config = parse_config({"web": {"token_env": "TEST_WEB_SHORT"}})
    store = SqliteStore(str(tmp_path / "short.db"))
    with pytest.raises(ConfigError) as failure:
        WebServer(config.web, WebContext(lambda: config, store, SystemClock()),
                  {"TEST_WEB_SHORT": "hunter2"})  # fmt: skip
    assert str(failure.value).startswith(
        "web.token_env: the token in TEST_WEB_SHORT is too short (at least 16 characters"
    )
    assert "hunter2" not in str(failure.value)
