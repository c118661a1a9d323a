"""A burst's trace crosses processes: two `burstbot run` processes on one PostgreSQL database,
the one generating the burst is SIGKILLed mid-stream, the other takes the lease over when it
expires and answers; every span of both processes lands in the burst's one trace, sent over
OTLP/HTTP to a receiver on 127.0.0.1 (the processes' real exporter, the real Anthropic SDK
against the fake Messages API)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from testkit.fake_anthropic import FakeAnthropic, Plan
from testkit.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests import pg

pytestmark = pytest.mark.xdist_group("chaos")

WORDS = ("ultramarine-otter", "quartz-lantern", "velvet-harbour")


@pytest.fixture
async def receiver() -> AsyncIterator[OtlpReceiver]:
    otlp = await OtlpReceiver().start()
    yield otlp
    await otlp.stop()


@pytest.fixture
async def shared(
    tmp_path: Path, server: FakeAnthropic, receiver: OtlpReceiver
) -> AsyncIterator[tuple[Path, str]]:
    schema = await pg.create_schema("burstbot_traces")
    config = tmp_path / "burstbot.toml"
    config.write_text(
        f'[storage]\nurl = "{pg.dsn()}?search_path={schema}"\npool_size = 3\n'
        f'[llm]\nbase_url = "{server.base_url}"\napi_key_env = "BURSTBOT_TEST_KEY"\n'
        "max_retries = 0\n"
        "[debounce]\nadaptive = false\nquiet_seconds = 1.0\nmax_wait_seconds = 4.0\n"
        "[lease]\nttl_seconds = 3.0\n"
        "[engine]\npoll_seconds = 0.2\n"
        f'[telemetry]\notlp_endpoint = "{receiver.endpoint}"\n'
    )
    yield config, schema
    await pg.drop_schema(schema)


async def start(config: Path) -> asyncio.subprocess.Process:
    env = {**os.environ, "BURSTBOT_TEST_KEY": "sk-test-not-a-real-key",
           "OTEL_BSP_SCHEDULE_DELAY": "50"}  # fmt: skip
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", "--config", str(config),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip


async def lease_holder(schema: str) -> int:
    """The pid of the process holding the conversation's lease (owner names end `pid:hex`)."""
    conn = await asyncpg.connect(pg.dsn(), server_settings={"search_path": schema})
    try:
        owner = await conn.fetchval("SELECT lease_owner FROM conversations")
    finally:
        await conn.close()
    assert isinstance(owner, str), owner
    return int(owner.split(":")[-2])


async def a_reply(process: asyncio.subprocess.Process) -> str:
    assert process.stdout is not None
    while True:
        line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        assert line, "the process ended without a reply"
        if line.startswith("burstbot: "):
            return line


def names(spans: list[ReceivedSpan]) -> list[str]:
    return sorted(s.name for s in spans)


async def test_the_process_taking_a_killed_processs_burst_over_joins_its_trace(
    shared: tuple[Path, str], server: FakeAnthropic, receiver: OtlpReceiver
) -> None:
    config, schema = shared
    server.queue(Plan(pause_after=2), Plan())  # the first stream holds until its process dies
    typist = await start(config)
    other = await start(config)
    processes = {typist.pid: typist, other.pid: other}
    try:
        assert typist.stdin is not None
        typist.stdin.write("".join(f"{w}\n" for w in WORDS).encode())  # stdin stays open
        await server.wait_for(lambda: bool(server.streams) and server.streams[0].paused, 30)
        await receiver.wait_for(lambda spans: len([s for s in spans if s.name == "ingest"]) == 3)
        killed = processes.pop(await lease_holder(schema))
        killed.send_signal(signal.SIGKILL)
        await killed.wait()
        [survivor] = processes.values()
        await a_reply(survivor)
        assert survivor.stdin is not None
        survivor.stdin.close()
        _, err = await asyncio.wait_for(survivor.communicate(), 30)
        assert survivor.returncode == 0, err.decode()
    finally:
        for process in (typist, other):
            if process.returncode is None:
                process.kill()
                await process.wait()

    spans = receiver.spans
    ingests = [s for s in spans if s.name == "ingest"]
    [root] = [s for s in ingests if not s.parent_span_id]
    trace_id = root.trace_id
    assert {s.trace_id for s in spans} == {trace_id}, [(s.name, s.instance) for s in spans]
    [taker] = {s.instance for s in spans if s.name == "lease takeover"}
    taken = [s for s in spans if s.instance == taker]
    assert {"lease takeover", "generation", "commit", "console post"} <= set(names(taken))
    [generation] = [s for s in taken if s.name == "generation"]
    assert generation.attributes["burstbot.generation.outcome"] == "posted"
    [chat] = [s for s in taken if s.name.startswith("chat ")]
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert chat.parent_span_id == generation.span_id
    shown = repr([(s.name, s.attributes) for s in spans])
    assert not [w for w in WORDS if w in shown]
