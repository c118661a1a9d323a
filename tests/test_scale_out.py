"""Two `burstbot run --config C` processes on one PostgreSQL database cooperate.

Both start and migrate once; a burst typed into one is answered exactly once — also when the
process that took it is SIGKILLed before answering, in which case the other one answers it.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from storage.postgres import MIGRATIONS, PostgresStore
from tests import pg

CONVERSATION = "console/local/terminal/"


async def start(config: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", "--config", str(config),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def finish(process: asyncio.subprocess.Process) -> str:
    """Close stdin (the console then answers what is pending and exits); return stdout."""
    assert process.stdin is not None
    process.stdin.close()
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()
    return out.decode()


@pytest.fixture
async def shared(tmp_path: Path) -> AsyncIterator[tuple[Path, str]]:
    schema = await pg.create_schema("burstbot_scaleout")
    config = tmp_path / "burstbot.toml"
    config.write_text(
        f'[storage]\nurl = "{pg.dsn()}?search_path={schema}"\npool_size = 3\n'
        '[llm]\nprovider = "offline"\n'
        "[debounce]\nadaptive = false\nquiet_seconds = 1.0\nmax_wait_seconds = 4.0\n"
        "[lease]\nttl_seconds = 3.0\n"
        "[engine]\npoll_seconds = 0.2\n"
    )
    yield config, schema
    await pg.drop_schema(schema)


async def stored_version(store: PostgresStore) -> int:
    state = await store.conversation_state(CONVERSATION)
    return state.version if state else 0


async def wait_for_version(store: PostgresStore, version: int) -> None:
    async def reached() -> None:
        while await stored_version(store) < version:  # noqa: ASYNC110
            await asyncio.sleep(0.02)

    await asyncio.wait_for(reached(), 20)


async def test_two_processes_migrate_once_and_answer_a_burst_once(
    shared: tuple[Path, str],
) -> None:
    config, schema = shared
    a, b = await asyncio.gather(start(config), start(config))
    assert a.stdin is not None
    a.stdin.write(b"a\nb\nc\n")
    out_a = await finish(a)
    out_b = await finish(b)
    replies = (out_a + out_b).count("burstbot: ")
    assert replies == 1, (out_a, out_b)
    assert all(f"> you: {t}" in out_a + out_b for t in "abc")
    conn = await asyncpg.connect(pg.dsn(), server_settings={"search_path": schema})
    try:
        versions = [r[0] for r in await conn.fetch("SELECT version FROM burstbot_schema_version")]
    finally:
        await conn.close()
    assert sorted(versions) == list(range(1, len(MIGRATIONS) + 1))


async def test_a_burst_taken_by_a_killed_process_is_answered_by_the_other(
    shared: tuple[Path, str],
) -> None:
    config, schema = shared
    b = await start(config)
    a = await start(config)
    store = PostgresStore(pg.dsn(), pool_size=1, schema=schema)
    await asyncio.sleep(0.5)  # let both migrate (serialized) before the probe store opens
    await store.open()
    try:
        assert a.stdin is not None
        a.stdin.write(b"a\nb\nc\n")  # stdin stays open: A waits out the quiet window
        await wait_for_version(store, 3)
        a.send_signal(signal.SIGKILL)
        await a.wait()
        assert b.stdout is not None
        first = await asyncio.wait_for(b.stdout.readline(), 20)
        assert first.decode().startswith("burstbot: Got your 3 messages")
        rest = await finish(b)
        assert rest.count("burstbot: ") == 0
        assert all(f"> you: {t}" in rest for t in "abc")
        [reply] = await store.replies(CONVERSATION)
        assert (reply.covers_from_version, reply.covers_to_version, reply.state) == (0, 3, "sent")
    finally:
        await store.close()
        if a.returncode is None:
            a.kill()
            await a.wait()
