"""The operator's page in a real browser (headless Chromium through Selenium): log in, see the
processes (one idle elsewhere, one gone) and the failed reply, open its timeline, retry it with a
double click and from a second tab (posted once, counted on the recording front end's raw posts),
erase a conversation, see the usage charts; a wrong token and a missing CSRF token are refused,
and a chat message's HTML shows as text.

The screenshots go to the test's directory, and also to `BURSTBOT_WEB_SCREENSHOTS` when set
(`BURSTBOT_WEB_SCREENSHOTS=docs` refreshes the ones docs/operations.md shows).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot import __version__
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.processes import REFRESH_SECONDS
from tests.browser import chromium
from tests.test_vote_reports import vote
from tests.web_harness import (
    ANSWERED,
    FAILING,
    HOSTILE_TEXT,
    OPERATOR_TOKEN,
    Running,
    eventually,
    running_app,
)

START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC).timestamp()
SHOTS = ("web-overview", "web-timeline", "web-usage")
MORE = [  # other channels and days, so the usage charts have something to compare
    (ConversationKey("test", "w1", "support"), "how do I reset my password?"),
    (ConversationKey("test", "w2", "general"), "summarize yesterday's thread please"),
    (ConversationKey("test", "w2", "dev"), "why does the build fail on arm64?"),
]


def text_of(browser: Any, element_id: str) -> str:
    """The text of the element once the page that has it has loaded (a click's navigation is
    not waited for by Selenium, and a double click's second page may replace the first)."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    ignored = (NoSuchElementException, StaleElementReferenceException)
    wait = WebDriverWait(browser, 10, ignored_exceptions=ignored)
    return str(wait.until(lambda b: b.find_element(By.ID, element_id).text or False))


def click(browser: Any, element_id: str, double: bool = False, by: str = "id") -> None:
    """Click and wait until the page it leaves is gone."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.support.ui import WebDriverWait

    element = browser.find_element(by, element_id)
    if double:
        # the first click's page may replace the button before the second click lands
        with contextlib.suppress(WebDriverException):
            ActionChains(browser).double_click(element).perform()
    else:
        element.click()

    def gone(_: Any) -> bool:  # Chromium answers for a node of a left page with either error
        try:
            element.is_enabled()
        except WebDriverException:
            return True
        return False

    WebDriverWait(browser, 10).until(gone)


def log_in(browser: Any, base: str, token: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(base + "/")  # no session: redirected to the login
    assert browser.current_url == base + "/login"
    browser.find_element(By.ID, "token").send_keys(token)
    click(browser, "login")


def see_the_failure_and_retry(browser: Any, base: str, shots: Path) -> dict[str, str]:
    """Blocking (run off the event loop, which serves the pages); what each tab ended on."""
    from selenium.webdriver.common.by import By

    log_in(browser, base, "not-the-token")
    assert text_of(browser, "error") == "wrong token"
    log_in(browser, base, OPERATOR_TOKEN)
    processes = text_of(browser, "processes").splitlines()
    assert [line.split()[:2] for line in processes[1:]] == [
        ["w1", "(this"], ["w2:vm2:4121:9f3a0c", "alive"], ["w3:vm3:877:0b61d2", "gone"]
    ]  # fmt: skip
    troubled = text_of(browser, "troubled")
    assert "r1" in troubled and "failed" in troubled and "channel_not_found" in troubled
    browser.save_screenshot(str(shots / "web-overview.png"))

    click(browser, FAILING.id, by=By.LINK_TEXT)
    timeline = text_of(browser, "timeline")
    assert f"alice: {HOSTILE_TEXT[:59]}" in timeline  # shown as text, as `explain` shows it
    assert browser.title == f"burstbot · conversation {FAILING.id}"  # the script never ran
    assert browser.find_elements(By.TAG_NAME, "b") == []
    browser.save_screenshot(str(shots / "web-timeline.png"))

    # the form without its CSRF token is refused (and changes nothing)
    browser.execute_script("document.querySelector('#failed input[name=csrf]').remove()")
    click(browser, "retry-r1")
    assert "missing or wrong CSRF token" in text_of(browser, "error")

    # one form clicked twice, the same form sent again from another tab, a third tab's own
    timeline_url = base + "/conversation?id=" + FAILING.id
    tabs = []
    for n in range(3):
        if n:
            browser.switch_to.new_window("tab")
        browser.get(timeline_url)
        tabs.append(browser.current_window_handle)
    browser.switch_to.window(tabs[0])
    action = browser.find_element(By.CSS_SELECTOR, "#failed input[name=action]")
    first_action = action.get_attribute("value")
    click(browser, "retry-r1", double=True)
    outcomes = {"double click": text_of(browser, "notice")}
    browser.switch_to.window(tabs[1])
    resent = browser.find_element(By.CSS_SELECTOR, "#failed input[name=action]")
    browser.execute_script("arguments[0].value = arguments[1]", resent, first_action)
    click(browser, "retry-r1")
    outcomes["same form again"] = text_of(browser, "notice")
    browser.switch_to.window(tabs[2])
    click(browser, "retry-r1")
    outcomes["another tab"] = text_of(browser, "notice")
    for tab in tabs[1:]:
        browser.switch_to.window(tab)
        browser.close()
    browser.switch_to.window(tabs[0])
    return outcomes


def erase_and_see_usage(browser: Any, base: str, shots: Path) -> tuple[str, str, int, str, int]:
    from selenium.webdriver.common.by import By

    browser.get(base + "/conversation?id=" + ANSWERED.id)
    click(browser, "erase")
    assert "cannot be undone" in browser.find_element(By.TAG_NAME, "main").text
    click(browser, "confirm-erase")
    erased = text_of(browser, "notice")
    click(browser, "nav-usage")
    total = text_of(browser, "total")
    charts = len(browser.find_elements(By.CSS_SELECTOR, "#charts svg rect"))
    feedback = text_of(browser, "feedback-summary")
    vote_bars = len(browser.find_elements(By.CSS_SELECTOR, "#feedback svg rect"))
    browser.set_window_size(1000, 2300)  # down to the feedback panel
    browser.save_screenshot(str(shots / "web-usage.png"))
    click(browser, "logout")
    assert browser.current_url == base + "/login"
    return erased, total, charts, feedback, vote_bars


async def more_conversations(bot: Running) -> None:
    for n, (key, text) in enumerate(MORE):
        await bot.clock.advance(86_400.0 * (n % 2) + 600.0)
        await bot.app.ingest(IncomingMessage(key, f"more{n}", f"u{n}", f"person{n}", text))
        await bot.settle(key)


async def more_processes(bot: Running) -> None:
    """This process refreshed; another one idle on a second host, one that died unannounced."""
    refreshes = bot.app.presence.refreshes
    await bot.clock.advance(REFRESH_SECONDS)

    async def refreshed() -> bool:
        return bot.app.presence.refreshes > refreshes

    await eventually(refreshed)
    now = bot.clock.now()
    for at in (now - 7_200, now - 3):
        await bot.store.see_process("w2:vm2:4121:9f3a0c", "vm2", 4121, __version__, at)
    for at in (now - 86_000, now - 95):
        await bot.store.see_process("w3:vm3:877:0b61d2", "vm3", 877, "0.0.9", at)


async def test_an_operator_retries_and_erases_in_a_browser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    browser: Any = chromium()
    browser.set_window_size(1000, 1100)
    try:
        async with running_app(tmp_path, monkeypatch, start=START) as bot:
            await more_conversations(bot)
            await more_processes(bot)
            clicks = await asyncio.to_thread(see_the_failure_and_retry, browser, bot.base, tmp_path)
            assert clicks["double click"].startswith("re-queued r1")
            assert clicks["same form again"] == clicks["double click"]  # its first answer
            assert clicks["another tab"].endswith("not failed: nothing to retry")
            await bot.settle(FAILING, 0.1)
            assert await bot.reply_states(FAILING) == ["sent"]
            assert [p.reply_id for p in bot.frontend.posts].count("r1") == 1

            [answer] = await bot.store.replies(ANSWERED.id)
            [kept] = await bot.store.replies(FAILING.id)
            for key, reply, voter, value in (
                (FAILING, kept, "u8", "up"),
                (FAILING, kept, "u9", "down"),
                (ANSWERED, answer, "u7", "up"),  # erased with its conversation below
            ):
                voted = vote(key, f"r{reply.id}", voter, value, bot.clock.now())
                assert await bot.store.vote(voted, bot.clock.now()) == "voted"
            erased, total, bars, feedback, vote_bars = await asyncio.to_thread(
                erase_and_see_usage, browser, bot.base, tmp_path
            )
            assert feedback.startswith("1 up (👍), 1 down (👎) on answers")
            assert vote_bars == 2 * 2  # per channel and per model: one row, 👍 and 👎
            assert erased.startswith(f"forget conversation {ANSWERED.id}: erased 1 messages")
            assert [m.text for m in await bot.store.messages(ANSWERED.id)] == [""]
            assert total.startswith(f"{len(MORE) + 2} generations")
            assert "$0.0000" not in total  # priced: the charts compare costs
            assert bars >= 2 * 2 + 3 * 2  # cost and tokens: per day (2 days), per group
    finally:
        browser.quit()
    wanted = os.environ.get("BURSTBOT_WEB_SCREENSHOTS")
    for shot in SHOTS:
        assert (tmp_path / f"{shot}.png").stat().st_size > 0
        if wanted:
            shutil.copy(tmp_path / f"{shot}.png", Path(wanted) / f"{shot}.png")
