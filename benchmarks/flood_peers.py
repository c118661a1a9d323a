"""The processes a Slack flood needs besides burstbot: the fake platform and the bare Bolt app.

`python -m benchmarks.flood_peers fakes --model-delay S --model-words N` serves the fake Slack Web
API and the fake Anthropic Messages API (testkit) from one process, plus `GET /counts` on the
Slack port's neighbour: every Web API method called so far and how many replies were posted. The
model streams `N` words, one every `S` seconds, so a reply takes a while, as a real one does.

`python -m benchmarks.flood_peers bare --port P --api URL` is the baseline: a Bolt `AsyncApp`
whose listeners do nothing, served by Bolt's own aiohttp adapter. Its ack is the least any Bolt
app can do for an event.

Each prints one JSON line with its ports once it listens, then serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
from typing import Any

from aiohttp import web

from bot.cli.serve import run_event_loop
from testkit.fake_anthropic import FakeAnthropic, Plan
from testkit.fake_slack import FakeSlackApi
from testkit.serving import serve_locally

SIGNING_SECRET = "flood-signing-secret"
BOT_TOKEN = "xoxb-flood"
MODEL_KEY = "flood-model-key"


async def serve_fakes(model_delay: float, model_words: int) -> None:
    slack = await FakeSlackApi(token=BOT_TOKEN).start()
    words = " ".join(f"w{i}" for i in range(model_words))
    model = FakeAnthropic(default_plan=Plan(text=words, delay=model_delay))
    await model.start()

    async def counts(request: web.Request) -> web.Response:
        methods = collections.Counter(name for name, _ in slack.calls)
        return web.json_response(
            {
                "methods": dict(methods),
                "posts": len(slack.posts()),
                "reactions_left": len(slack.reactions),
            }
        )

    async def forget(request: web.Request) -> web.Response:
        """Between runs: drop what was recorded so memory and counts start from zero."""
        slack.calls.clear()
        slack.messages.clear()
        slack.reaction_log.clear()
        slack.reactions.clear()
        model.requests.clear()
        model.streams.clear()
        return web.json_response({})

    control = web.Application()
    control.router.add_get("/counts", counts)
    control.router.add_post("/forget", forget)
    _, control_port = await serve_locally(control, access_log=None)
    ports = {"slack": slack.url, "model": model.base_url}
    ports["control"] = f"http://127.0.0.1:{control_port}"
    print(json.dumps(ports), flush=True)
    await asyncio.Event().wait()


async def serve_bare(port: int, api: str) -> None:
    from slack_bolt.app.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    app = AsyncApp(signing_secret=SIGNING_SECRET, client=AsyncWebClient(BOT_TOKEN, base_url=api))

    async def nothing(**_: Any) -> None:
        return None

    app.event("message")(nothing)
    app.event("app_mention")(nothing)
    web_app = app.web_app(path="/slack/events", port=port)
    _, bound = await serve_locally(web_app, port, access_log=None)
    print(json.dumps({"port": bound}), flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description="fakes and the bare baseline of the Slack flood")
    sub = parser.add_subparsers(dest="what", required=True)
    fakes = sub.add_parser("fakes")
    fakes.add_argument("--model-delay", type=float, default=0.0)
    fakes.add_argument("--model-words", type=int, default=10)
    bare = sub.add_parser("bare")
    bare.add_argument("--port", type=int, default=0)
    bare.add_argument("--api", required=True)
    args = parser.parse_args()
    if args.what == "fakes":
        asyncio.run(serve_fakes(args.model_delay, args.model_words))
    else:
        run_event_loop(serve_bare(args.port, args.api))  # the loop `burstbot run` uses
    sys.exit(0)


if __name__ == "__main__":
    main()
