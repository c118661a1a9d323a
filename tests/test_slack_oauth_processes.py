"""Three workspaces chatting at once through `burstbot run` on PostgreSQL, the first process
killed with SIGKILL while its posts are in flight (landed, not yet answered) and a second one
taking its work over: every
message is answered exactly once, in its own workspace,
with that workspace's token (the fake grid refuses another team's token on a channel with
`invalid_auth` and counts the attempt), and no answer quotes another workspace's message."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest

from testkit.fake_slack_grid import FakeSlackGrid
from tests import pg
from tests.slack_harness import SECRET
from tests.slack_oauth_harness import CLIENT_ID, CLIENT_SECRET, ENV, approve_at, land
from tests.test_chaos import postgres_url

ROOT = Path(__file__).resolve().parent.parent
TEAMS = {"T1": "Acme", "T2": "Globex", "T3": "Initech"}
MESSAGES = 6  # per workspace


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def config(path: Path, db_url: str, api: str, port: int, owner: str) -> Path:
    path.write_text(f"""
[console]
enabled = false
[llm]
provider = "offline"
[storage]
url = "{db_url}"
[debounce]
adaptive = false
speculate = false
quiet_seconds = 1.0
max_wait_seconds = 3.0
[lease]
ttl_seconds = 2.0
[engine]
poll_seconds = 0.2
owner = "{owner}"
[limits]
user_daily_tokens = 0
channel_daily_tokens = 0
[catch_up]
enabled = false
[slack]
enabled = true
mode = "http"
install = "oauth"
http_port = {port}
api_base_url = "{api}"
""")
    return path


async def started(port: int) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(200):
            try:
                async with http.get(f"http://127.0.0.1:{port}/slack/install") as page:
                    if page.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"no burstbot on port {port}")


def covered(grid: FakeSlackGrid, team: str) -> list[str]:
    """Every message text the workspace's replies quote (the offline replier quotes its burst)."""
    return [line.split(": ", 1)[1] for post in grid.workspaces[team].posts()
            for line in post.text.splitlines() if line.startswith("> ")]  # fmt: skip


@pytest.mark.slow
async def test_three_workspaces_two_processes_on_postgres_one_killed(tmp_path: Path) -> None:
    pg.dsn()  # skips with the reason when no PostgreSQL is reachable (fails under CI=true)
    schema = await pg.create_schema("burstbot_oauth")
    grid = FakeSlackGrid(CLIENT_ID, CLIENT_SECRET)
    # each workspace's first post lands and gets no answer until the first process is killed
    holds = {team: grid.add_workspace(team, name).hold("chat.postMessage")
             for team, name in TEAMS.items()}  # fmt: skip
    await grid.start()
    grid.signing_secret = SECRET
    env = {**os.environ, **ENV, "PYTHONPATH": str(ROOT)}
    ports = [free_port(), free_port()]
    workers = []

    async def start_worker(n: int) -> None:
        toml = config(tmp_path / f"w{n}.toml", postgres_url(schema), grid.url, ports[n], f"w{n}")
        workers.append(await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "run", "--config", str(toml), env=env,
            stderr=open(tmp_path / f"w{n}.log", "w"),  # noqa: ASYNC230, SIM115
        ))  # fmt: skip
        await started(ports[n])

    try:
        # the first process alone takes the first bursts, so the one it is killed in the middle of
        # is its own; the second starts after the kill (as a restart would) and takes them over
        await start_worker(0)
        grid.redirect_url = f"http://127.0.0.1:{ports[0]}/slack/oauth_redirect"
        for team in TEAMS:  # installed through the first process, stored for both
            status, _ = await land(*await approve_at(
                f"http://127.0.0.1:{ports[0]}/slack/install", team))  # fmt: skip
            assert status == 200
        for n in range(MESSAGES):
            target = ports[0] if n < MESSAGES // 2 else ports[1]
            grid.events_url = f"http://127.0.0.1:{target}/slack/events"
            said = [grid.say(team, f"D{team}", f"{team} says {n}") for team in TEAMS]
            assert [status for _, status in await asyncio.gather(*said)] == [200] * len(TEAMS)
            if n == MESSAGES // 2 - 1:
                held = [grid.workspaces[team].held["chat.postMessage"] for team in TEAMS]
                await asyncio.wait_for(asyncio.gather(*(h.wait() for h in held)), 30)
                workers[0].send_signal(signal.SIGKILL)  # every first post landed, unanswered
                await workers[0].wait()
                await start_worker(1)
                for hold in holds.values():
                    hold.set()
        want = {team: sorted(f"{team} says {n}" for n in range(MESSAGES)) for team in TEAMS}
        for _ in range(300):
            if all(sorted(covered(grid, team)) == want[team] for team in TEAMS):
                break
            await asyncio.sleep(0.1)
        for team in TEAMS:
            assert sorted(covered(grid, team)) == want[team], (tmp_path / "w1.log").read_text()
        texts = {team: [post.text for post in grid.workspaces[team].posts()] for team in TEAMS}
        # each workspace's messages as a burst before the kill and one after (a loaded machine may
        # split a burst): never the same reply twice
        assert all(len(set(t)) == len(t) >= 2 for t in texts.values()), texts
        looked_up = [t for t in TEAMS for m, _ in grid.workspaces[t].calls
                     if m == "conversations.history"]  # fmt: skip
        assert looked_up  # the survivor re-delivered a reply whose post had landed: checked first
        assert grid.cross_team == []
    finally:
        for worker in workers:
            if worker.returncode is None:
                worker.send_signal(signal.SIGTERM)
                await worker.wait()
        await grid.stop()
        await pg.drop_schema(schema)
