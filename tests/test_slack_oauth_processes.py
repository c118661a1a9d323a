"""Several workspaces served by two `burstbot run` processes on PostgreSQL, with Claude played
by the test kit's fake Messages API (it records every prompt).

- Three workspaces chatting at once; while each workspace's first reply is in flight (the post
  landed, not yet answered) the process delivering one of them is killed with SIGKILL and
  restarted, as a supervisor would: every message is answered exactly once, in its own workspace,
  with that workspace's token (the fake grid refuses another team's token on a channel with
  `invalid_auth` and counts the attempt), and no prompt holds another workspace's message.
- Tokens that expire after a minute: both processes need the token in its last quarter at the
  same moment, and it is refreshed once (the fake refuses a reused refresh token); after the old
  token expired both answer with the new one.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from testkit.fake_anthropic import FakeAnthropic, RecordedRequest
from testkit.fake_slack_grid import FakeSlackGrid
from tests import pg
from tests.slack_harness import SECRET
from tests.slack_oauth_harness import CLIENT_ID, CLIENT_SECRET, ENV, approve_at, land
from tests.test_chaos import postgres_url

ROOT = Path(__file__).resolve().parent.parent
TEAMS = {"T1": "Acme", "T2": "Globex", "T3": "Initech"}
MESSAGES = 6  # per workspace
SAID = re.compile(r"T\d says \d+")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def config(path: Path, db_url: str, api: str, model: str, port: int, owner: str) -> Path:
    path.write_text(f"""
[console]
enabled = false
[llm]
base_url = "{model}"
api_key_env = "BURSTBOT_TEST_MODEL_KEY"
max_retries = 1
[streaming]
enabled = false
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


def answer(request: RecordedRequest) -> str:
    """The model names the messages of its burst (the last user turn): posts show coverage."""
    return "answering: " + " | ".join(SAID.findall(request.last_user_text))


def prompt_teams(request: RecordedRequest) -> set[str]:
    """The workspaces whose messages this prompt holds (system, history and burst)."""
    texts = [block.get("text", "") for block in request.system_blocks]
    texts += [text for message in request.messages for text in request.texts(message)]
    return {said.split()[0] for text in texts for said in SAID.findall(text)}


def covered(grid: FakeSlackGrid, team: str) -> list[str]:
    """The messages the workspace's posted replies answer, sorted (a message twice: twice)."""
    posts = grid.workspaces[team].posts()
    return sorted(said for post in posts for said in SAID.findall(post.text))


class Deployment:
    """Two `burstbot run` processes (w0, w1) sharing one PostgreSQL schema, the fake grid and the
    fake model; each logs to its own file in `tmp_path`."""

    def __init__(self, tmp_path: Path, schema: str, grid: FakeSlackGrid, model: FakeAnthropic):
        self.tmp_path, self.schema, self.grid, self.model = tmp_path, schema, grid, model
        self.ports = [free_port(), free_port()]
        self.workers: dict[str, asyncio.subprocess.Process] = {}
        env = {"PYTHONPATH": str(ROOT), "BURSTBOT_TEST_MODEL_KEY": "sk-test"}
        self.env = {**os.environ, **ENV, **env}

    async def start(self, n: int) -> None:
        """Start worker `n` and wait until it serves. The port was free when picked, but another
        test's server (the suite runs in parallel workers) may take it before this process binds
        it: then the process exits saying so, and it is started again on a new port."""
        for _ in range(3):
            if await self._serving(n):
                return
            if "address already in use" not in self.logs():
                break
            self.ports[n] = free_port()
        raise AssertionError(f"no burstbot on port {self.ports[n]}\n{self.logs()}")

    async def _serving(self, n: int) -> bool:
        owner = f"w{n}"
        toml = config(self.tmp_path / f"{owner}.toml", postgres_url(self.schema), self.grid.url,
                      self.model.base_url, self.ports[n], owner)  # fmt: skip
        with open(self.tmp_path / f"{owner}.log", "a") as log:  # noqa: ASYNC230
            process = self.workers[owner] = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot", "run", "--config", str(toml), env=self.env,
                stderr=log)  # fmt: skip
        async with aiohttp.ClientSession() as http:
            for _ in range(600):  # a hang only: a fresh checkout compiles at first start
                if process.returncode is not None:
                    return False
                try:
                    async with http.get(f"{self.url(n)}/slack/install") as page:
                        if page.status == 200:
                            return True
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        return False

    def url(self, n: int) -> str:
        return f"http://127.0.0.1:{self.ports[n]}"

    async def install(self, team: str) -> None:
        """Through the first process: the installation is stored for both."""
        self.grid.redirect_url = f"{self.url(0)}/slack/oauth_redirect"
        status, _ = await land(*await approve_at(f"{self.url(0)}/slack/install", team))
        assert status == 200

    async def say(self, n: int, *teams: str, text: str) -> None:
        """A DM in each team, its event delivered to process n."""
        to = f"{self.url(n)}/slack/events"
        said = [self.grid.say(team, f"D{team}", text.format(team=team), to=to) for team in teams]
        assert [status for _, status in await asyncio.gather(*said)] == [200] * len(teams)

    async def kill(self, owner: str) -> None:
        self.workers[owner].send_signal(signal.SIGKILL)
        await self.workers[owner].wait()

    async def delivering(self) -> set[str]:
        """The processes delivering a reply right now (read from the database)."""
        conn = await asyncpg.connect(pg.dsn(), server_settings={"search_path": self.schema})
        try:
            pending = "state = 'pending' AND claim_owner IS NOT NULL"
            rows = await conn.fetch(f"SELECT claim_owner FROM replies WHERE {pending}")
        finally:
            await conn.close()
        return {str(row["claim_owner"]).split(":")[0] for row in rows}  # "w0:host:pid:nonce"

    def logs(self) -> str:
        return "\n".join(log.read_text() for log in sorted(self.tmp_path.glob("w*.log")))

    async def stop(self) -> None:
        for worker in self.workers.values():
            if worker.returncode is None:
                worker.send_signal(signal.SIGTERM)
                await worker.wait()


async def until(condition: Callable[[], bool], within: float) -> None:
    for _ in range(int(within * 10)):
        if condition():
            return
        await asyncio.sleep(0.1)


@pytest.mark.slow
async def test_three_workspaces_two_processes_on_postgres_one_killed(tmp_path: Path) -> None:
    pg.dsn()  # skips with the reason when no PostgreSQL is reachable (fails under CI=true)
    schema = await pg.create_schema("burstbot_oauth")
    model = await FakeAnthropic(reply=answer).start()
    grid = FakeSlackGrid(CLIENT_ID, CLIENT_SECRET)
    # each workspace's first post lands and gets no answer until one deliverer is killed
    holds = [grid.add_workspace(team, name).hold("chat.postMessage")
             for team, name in TEAMS.items()]  # fmt: skip
    await grid.start()
    grid.signing_secret = SECRET
    bots = Deployment(tmp_path, schema, grid, model)
    try:
        await asyncio.gather(bots.start(0), bots.start(1))  # both at once from the start
        for team in TEAMS:
            await bots.install(team)
        for n in range(MESSAGES):
            await bots.say(n % 2, *TEAMS, text=f"{{team}} says {n}")  # both ingest
            if n == MESSAGES // 2 - 1:
                held = [grid.workspaces[team].held["chat.postMessage"] for team in TEAMS]
                await asyncio.wait_for(asyncio.gather(*(h.wait() for h in held)), 30)
                owners = await bots.delivering()  # every first post landed, unanswered
                assert owners, bots.logs()
                killed = sorted(owners)[0]
                await bots.kill(killed)
                await bots.start(int(killed[1]))  # restarted, as a supervisor would
                for hold in holds:
                    hold.set()
        want = {team: sorted(f"{team} says {n}" for n in range(MESSAGES)) for team in TEAMS}
        await until(lambda: all(covered(grid, team) == want[team] for team in TEAMS), 30)
        for team in TEAMS:  # every message in exactly one reply: none missed, none twice
            assert covered(grid, team) == want[team], bots.logs()
        mixed = [sorted(prompt_teams(r)) for r in model.requests if len(prompt_teams(r)) != 1]
        assert mixed == []  # each prompt holds one workspace's messages only
        assert {t for r in model.requests for t in prompt_teams(r)} == set(TEAMS)
        looked_up = [t for t in TEAMS for m, _ in grid.workspaces[t].calls
                     if m == "conversations.history"]  # fmt: skip
        assert looked_up, bots.logs()  # the killed one's landed post was looked up, not reposted
        assert grid.cross_team == []
    finally:
        await bots.stop()
        await grid.stop()
        await model.stop()
        await pg.drop_schema(schema)


@pytest.mark.slow
async def test_a_token_that_expires_in_a_minute_is_refreshed_once_by_two_processes(
    tmp_path: Path,
) -> None:
    pg.dsn()
    schema = await pg.create_schema("burstbot_rotation")
    model = await FakeAnthropic(reply=answer).start()
    grid = FakeSlackGrid(CLIENT_ID, CLIENT_SECRET, token_lifetime=60)
    grid.add_workspace("T1", "Acme")
    await grid.start()
    grid.signing_secret = SECRET
    bots = Deployment(tmp_path, schema, grid, model)
    try:
        await asyncio.gather(bots.start(0), bots.start(1))
        await bots.install("T1")
        installed = asyncio.get_running_loop().time()
        first_token = grid.workspaces["T1"].token
        rounds = []
        # both use the first token; then both need it in its last quarter at the same moment
        # (each checks it as it authorizes the event); then both after it expired
        for n, at in enumerate((0.0, 48.0, 63.0)):
            await asyncio.sleep(max(0.0, installed + at - asyncio.get_running_loop().time()))
            texts = [f"T1 says {2 * n}", f"T1 says {2 * n + 1}"]
            await asyncio.gather(*(bots.say(k, "T1", text=texts[k]) for k in range(2)))
            rounds.append(texts)
            want = sorted(text for texts in rounds for text in texts)
            await until(lambda: covered(grid, "T1") == want, 20)  # noqa: B023 (used at once)
            assert covered(grid, "T1") == want, bots.logs()
            if n == 0:
                assert grid.refreshes == {}
        assert grid.refreshes == {"T1": 1}, bots.logs()
        assert grid.refused_refreshes == []
        assert grid.workspaces["T1"].token != first_token
        assert grid.workspaces["T1"].refused == []  # no call with an expired token
    finally:
        await bots.stop()
        await grid.stop()
        await model.stop()
        await pg.drop_schema(schema)
