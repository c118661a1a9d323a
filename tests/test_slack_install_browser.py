"""The "Add to Slack" install in a real browser: headless Chromium opens the install page,
follows Add to Slack to the fake Slack's authorize page, picks the workspace, presses Allow and
lands on the success page; then each workspace's DM is answered with that workspace's token."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from testkit.fake_slack_grid import FakeSlackGrid
from tests.browser import chromium
from tests.slack_oauth_harness import (
    bot_url,
    grid,
    install,
    oauth_bot,
    oauth_env,
)

__all__ = ["grid", "oauth_env"]


def install_in_browser(browser: Any, install_url: str, team: str, shots: Path) -> str:
    """What a person does (blocking: run it off the event loop, which serves the pages)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(install_url)
    browser.save_screenshot(str(shots / "install-page.png"))
    browser.find_element(By.ID, "add-to-slack").click()
    Select(browser.find_element(By.ID, "team")).select_by_value(team)
    browser.save_screenshot(str(shots / "authorize-page.png"))
    browser.find_element(By.ID, "allow").click()
    browser.save_screenshot(str(shots / "success-page.png"))
    return str(browser.find_element(By.ID, "outcome").text)


@pytest.mark.usefixtures("oauth_env")
async def test_a_browser_installs_the_app_and_each_workspace_is_answered_with_its_token(
    grid: FakeSlackGrid, tmp_path: Path
) -> None:
    browser: Any = chromium()
    try:
        async with oauth_bot(grid) as bot:
            await install(bot.frontend, "T1")  # installed earlier
            url = bot_url(bot.frontend, bot.frontend.config.install_path)
            outcome = await asyncio.to_thread(install_in_browser, browser, url, "T2", tmp_path)
            assert outcome.startswith("burstbot is installed in Globex.")
            assert grid.workspaces["T2"].token.startswith("xoxb-T2-")  # oauth.v2.access for T2
            await grid.say("T2", "D2", "hi from globex")
            await grid.say("T1", "D1", "hi from acme")
            await bot.step(1.5)
            for team, text in (("T2", "hi from globex"), ("T1", "hi from acme")):
                [post] = grid.workspaces[team].posts()
                assert post.text == f"reply to: {text}"
                posted = [a for m, a in grid.workspaces[team].calls if m == "chat.postMessage"]
                assert [a["channel"] for a in posted] == [f"D{team[1]}"]
            assert grid.cross_team == []
    finally:
        browser.quit()
    assert all((tmp_path / f"{page}.png").stat().st_size > 0
               for page in ("install-page", "authorize-page", "success-page"))  # fmt: skip
