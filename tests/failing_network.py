"""Network failures on 127.0.0.1, for the call-path tests of both platforms: a port nothing
listens on, a server that resets every connection, one that accepts and never answers, and one
that answers every request with the same scripted HTTP response (an outage page, a 429, an
error in the platform's JSON). Each yields its base URL."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web


@dataclass(frozen=True)
class Answer:
    """One HTTP response, given to every request."""

    status: int
    body: str
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


@contextlib.asynccontextmanager
async def refusing() -> AsyncIterator[str]:
    """A port that was just free: connecting is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    yield f"http://127.0.0.1:{port}/"


@contextlib.asynccontextmanager
async def resetting() -> AsyncIterator[str]:
    """Reads the request, then resets the connection (RST, no answer)."""

    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    async with _tcp(reset) as url:
        yield url


@contextlib.asynccontextmanager
async def silent() -> AsyncIterator[str]:
    """Accepts and reads, never answers: the client's timeout decides."""
    gone = asyncio.Event()

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await gone.wait()
        writer.close()

    async with _tcp(hang) as url:
        yield url
        gone.set()


@contextlib.asynccontextmanager
async def answering(answer: Answer) -> AsyncIterator[str]:
    """Every request, whatever its method and path, gets `answer`."""

    async def respond(request: web.Request) -> web.Response:
        await request.read()
        headers = {"Content-Type": answer.content_type, **answer.headers}  # exactly, no charset
        return web.Response(body=answer.body.encode(), status=answer.status, headers=headers)

    server = web.Application()
    server.router.add_route("*", "/{tail:.*}", respond)
    runner = web.AppRunner(server, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def _tcp(
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 1)
