"""A TCP proxy on 127.0.0.1 that can cut the network between a process and its database.

`cut()` is a partition without a reset: nothing is forwarded any more, in either direction, and
no connection is closed. The connections open at the cut stay silent for good (as after a
failover or lost NAT state), and so do connections accepted during the cut. After `heal()`, new
connections go through.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit, urlunsplit

CHUNK = 65536


class CuttableProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._cut_at = 0  # connections with a number below this one are silent for good
        self._cutting = False
        self._pumps: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> CuttableProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def cut(self) -> None:
        self._cutting = True
        self._cut_at = self.accepted

    def heal(self) -> None:
        self._cutting = False
        self._cut_at = self.accepted

    def dsn(self, dsn: str) -> str:
        """`dsn` with its host and port replaced by this proxy's."""
        parts = urlsplit(dsn)
        user = parts.netloc.rpartition("@")[0]
        netloc = f"{user}@127.0.0.1:{self.port}" if user else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for pump in self._pumps:
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            await self._server.wait_closed()

    def _silent(self, number: int) -> bool:
        return self._cutting or number < self._cut_at

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = self.accepted
        self.accepted += 1
        self._writers.append(writer)
        if self._silent(number):
            return  # accepted, never answered, never closed
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers.append(up_writer)
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            pump = asyncio.ensure_future(self._pump(number, source, sink))
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)

    async def _pump(
        self, number: int, source: asyncio.StreamReader, sink: asyncio.StreamWriter
    ) -> None:
        while True:
            data = await source.read(CHUNK)
            if self._silent(number):
                return  # dropped; the other side never hears of it, not even a close
            if not data:
                with contextlib.suppress(OSError):
                    sink.write_eof()
                return
            sink.write(data)
            with contextlib.suppress(OSError):
                await sink.drain()
