"""The systemd files, checked without systemd: the unit, the config it installs and
`check-config --service` agree on where the database and the pid file live, and a setting to fix
(exit 2) is not restarted forever. (`.ci/deploy-checks` runs `systemd-analyze verify` too.)"""

from __future__ import annotations

from pathlib import Path

from bot.config import load_config
from tests.test_cli import burstbot

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"


def unit() -> dict[str, list[str]]:
    """`Key=value` lines of the unit (a key may repeat, as ExecStartPre does)."""
    entries: dict[str, list[str]] = {}
    for raw in (DEPLOY / "burstbot.service").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "[")):
            continue
        key, _, value = line.partition("=")
        entries.setdefault(key, []).append(value)
    return entries


def test_the_unit_runs_the_installed_config_with_its_state_and_runtime_directories() -> None:
    service = unit()
    config = load_config(DEPLOY / "burstbot.toml")
    [state], [runtime] = service["StateDirectory"], service["RuntimeDirectory"]
    database = config.storage.url.removeprefix("sqlite:///")
    assert database.startswith(f"/var/lib/{state}/")  # absolute, in the unit's state directory
    assert service["WorkingDirectory"] == [f"/var/lib/{state}"]
    assert Path(config.engine.pid_file).parent == Path("/run") / runtime
    assert not config.console.enabled
    [binary] = {command.split()[0] for key in ("ExecStartPre", "ExecStart")
                for command in service[key]}  # fmt: skip
    assert binary == "/opt/burstbot/.venv/bin/burstbot"
    checks, migrate = service["ExecStartPre"]
    config_path = "--config /etc/burstbot/config.toml"
    assert checks == f"{binary} check-config --service {config_path}"
    assert migrate == f"{binary} migrate {config_path}"
    assert service["ExecStart"] == [f"{binary} run {config_path}"]
    assert service["EnvironmentFile"] == ["/etc/burstbot/env"]


def test_a_setting_to_fix_is_not_restarted_forever() -> None:
    service = unit()
    assert service["Restart"] == ["on-failure"]
    assert service["RestartPreventExitStatus"] == ["2"]


def test_the_installed_config_passes_check_config_with_its_secrets(tmp_path: Path) -> None:
    env = {"SLACK_BOT_TOKEN": "xoxb-x", "SLACK_APP_TOKEN": "xapp-x", "ANTHROPIC_API_KEY": "sk-x"}
    result = burstbot(
        ["check-config", "--config", str(DEPLOY / "burstbot.toml")], tmp_path, env=env
    )
    assert result.returncode == 0 and ": OK" in result.stdout, result.stderr
    assert "500000 tokens/user/day, 2000000 tokens/channel/day" in result.stdout


def service_config(tmp_path: Path, database: str, pid_file: str) -> Path:
    config = tmp_path / "service.toml"
    config.write_text(
        f'[storage]\nurl = "sqlite:///{database}"\n[llm]\nprovider = "offline"\n'
        f'[console]\nenabled = false\n[slack]\nenabled = true\n[engine]\npid_file = "{pid_file}"\n'
    )
    return config


def test_check_config_service_refuses_a_relative_database_and_a_missing_pid_directory(
    tmp_path: Path,
) -> None:
    env = {"SLACK_BOT_TOKEN": "xoxb-x", "SLACK_APP_TOKEN": "xapp-x"}
    config = service_config(tmp_path, "burstbot.db", str(tmp_path / "run" / "burstbot.pid"))
    args = ["check-config", "--config", str(config)]
    result = burstbot([*args, "--service"], tmp_path, env=env)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "burstbot: config error: storage.url: burstbot.db is relative to the working directory, "
        "so commands run elsewhere (status, backup) would not find it; use an absolute path such "
        "as sqlite:////var/lib/burstbot/burstbot.db",
        f"burstbot: config error: engine.pid_file: no directory {tmp_path / 'run'} (under "
        "systemd, RuntimeDirectory= creates /run/burstbot)",
    ]
    plain = burstbot(args, tmp_path, env=env)  # without --service: the same, as warnings
    assert plain.returncode == 0 and plain.stderr == ""
    assert plain.stdout.count("  warning: ") == 2
    (tmp_path / "run").mkdir()
    config = service_config(tmp_path, str(tmp_path / "burstbot.db"), str(tmp_path / "run" / "p"))
    ok = burstbot(["check-config", "--config", str(config), "--service"], tmp_path, env=env)
    assert ok.returncode == 0, ok.stderr
    warnings = [line for line in ok.stdout.splitlines() if "warning: " in line]
    assert all("warning: python: " in line for line in warnings)  # a pyenv or conda test run


def test_check_config_service_refuses_the_terminal(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        f'[storage]\nurl = "sqlite:///{tmp_path / "b.db"}"\n[llm]\nprovider = "offline"\n'
    )
    result = burstbot(["check-config", "--config", str(config), "--service"], tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "burstbot: config error: console.enabled: a service has no terminal; set [console] "
        "enabled = false"
    ]


def test_check_config_service_warns_of_a_python_under_a_home_directory() -> None:
    """A venv made with pyenv's Python under /root cannot be run by the service user, and
    ProtectHome= hides it from the unit."""
    from bot.cli.check import home_python

    assert home_python("/root/.pyenv/versions/3.11.7/bin/python3.11") is not None
    assert home_python("/home/ann/miniconda3/bin/python") is not None
    assert home_python("/usr/bin/python3.11") is None
