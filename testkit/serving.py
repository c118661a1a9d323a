"""Serving a fake on 127.0.0.1: the one start-up every fake server and control endpoint shares."""

from __future__ import annotations

from typing import Any

from aiohttp import web


async def serve_locally(
    app: web.Application, port: int = 0, **runner_options: Any
) -> tuple[web.AppRunner, int]:
    """Serve `app` on 127.0.0.1:`port` (0: any free port); the runner (its `cleanup` stops the
    server) and the port it listens on."""
    runner = web.AppRunner(app, **runner_options)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, int(runner.addresses[0][1])
