"""`burstbot run` with Claude, as a user meets it, against a fake Messages API on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from testkit.fake_anthropic import FakeAnthropic

ROOT = Path(__file__).resolve().parent.parent


async def burstbot(
    args: list[str], cwd: Path, stdin: str, env: dict[str, str]
) -> tuple[int, str, str]:
    """Run the CLI without blocking the loop the fake server answers on."""
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "BURSTBOT_TEST"))
    }
    environ["PYTHONPATH"] = str(ROOT)
    environ.update(env)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        *args,
        cwd=cwd,
        env=environ,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await process.communicate(stdin.encode())
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_piped_burst_is_one_model_request_and_the_reply_is_printed(
    tmp_path: Path, server: FakeAnthropic
) -> None:
    config = tmp_path / "burstbot.toml"
    config.write_text(
        f'[storage]\nurl = "sqlite:///{tmp_path / "bot.db"}"\n'
        f'[llm]\nbase_url = "{server.base_url}"\napi_key_env = "BURSTBOT_TEST_KEY"\n'
    )
    code, out, err = await burstbot(
        ["run", "--config", str(config)], tmp_path, "a\nb\nc\n", {"BURSTBOT_TEST_KEY": "sk-test"}
    )
    assert code == 0, err
    assert len(server.requests) == 1
    assert server.requests[0].last_user_text == "you: a\nyou: b\nyou: c"
    assert out == "burstbot: You said:\nyou: a\nyou: b\nyou: c\n"
    assert "sk-test" not in out + err


async def test_without_a_config_file_the_key_selects_claude_and_the_banner_says_so(
    tmp_path: Path, server: FakeAnthropic
) -> None:
    env = {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": server.base_url}
    code, out, err = await burstbot(["run"], tmp_path, "hello\n", env)
    assert code == 0, err
    assert err.splitlines()[0].startswith("burstbot: terminal chat on sqlite:///burstbot.db")
    assert "with Claude (claude-sonnet-5-5)" in err.splitlines()[0]
    assert out == "burstbot: You said:\nyou: hello\n"
    assert len(server.requests) == 1


async def test_missing_key_is_one_line_naming_the_variable(tmp_path: Path) -> None:
    config = tmp_path / "burstbot.toml"
    config.write_text('[llm]\napi_key_env = "BURSTBOT_TEST_MISSING_KEY"\n')
    code, out, err = await burstbot(["run", "--config", str(config)], tmp_path, "", {})
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "burstbot: config error: llm.api_key_env: environment variable "
        "BURSTBOT_TEST_MISSING_KEY is not set"
    ]
