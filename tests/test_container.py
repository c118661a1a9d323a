"""The container files, checked without building anything or touching the network: the Dockerfile
and compose.yaml parse, and they agree with each other, with the config the container reads and
with the package (entry point, ports, config keys, secrets, volumes)."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path
from typing import Any

import yaml

from bot.cli.main import main
from bot.config import load_config

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: comments dropped, `\\` continuations joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in (DEPLOY / "Dockerfile").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, rest = line.partition(" ")
        assert keyword.isupper(), f"not an instruction: {line!r}"
        instructions.append((keyword, rest.strip()))
    assert not pending, "a continuation runs off the end of the Dockerfile"
    return instructions


def only(instructions: list[tuple[str, str]], keyword: str) -> str:
    found = [rest for kw, rest in instructions if kw == keyword]
    assert len(found) == 1, f"{keyword}: {found}"
    return found[0]


def compose() -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_the_image_runs_burstbot_as_a_non_root_user_with_a_data_volume() -> None:
    steps = dockerfile_instructions()
    base = only(steps, "FROM")
    assert base.startswith("python:") and base.endswith("-slim")
    entry = json.loads(only(steps, "ENTRYPOINT")) + json.loads(only(steps, "CMD"))
    assert entry == ["burstbot", "run", "--config", "/etc/burstbot/config.toml"]
    assert only(steps, "USER") == "burstbot"
    [create] = [rest for kw, rest in steps if kw == "RUN" and "useradd" in rest]
    assert "useradd --system" in create and "install -d -o burstbot -g burstbot" in create
    assert json.loads(only(steps, "VOLUME")) == ["/data"]
    assert ("WORKDIR", "/data") in steps[[kw for kw, _ in steps].index("USER") :]
    # the package is installed from the checkout: every package folder is copied, then pip
    copied = {rest.split()[0] for kw, rest in steps if kw == "COPY"}
    assert {"bot", "adapters", "storage", "pyproject.toml"} <= copied
    installs = [rest for kw, rest in steps if kw == "RUN" and "pip install" in rest]
    assert len(installs) == 1 and '".[postgres]"' in installs[0]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["scripts"]["burstbot"] == "bot.cli:main"


def test_the_healthcheck_reads_healthz_on_the_metrics_port_of_the_container_config() -> None:
    steps = dockerfile_instructions()
    check = only(steps, "HEALTHCHECK")
    options, _, command = check.partition("CMD ")
    assert "--interval=" in options and "--timeout=" in options
    argv = json.loads(command)
    assert argv[:2] == ["python", "-c"]
    config = load_config(DEPLOY / "docker.toml")
    assert config.metrics.enabled
    assert f"http://127.0.0.1:{config.metrics.port}/healthz" in argv[2]
    compile(argv[2], "healthcheck", "exec")  # the one-liner is valid Python
    exposed = {int(port) for port in only(steps, "EXPOSE").split()}
    assert {config.metrics.port, config.slack.http_port} <= exposed


def test_compose_runs_burstbot_beside_a_healthy_postgres() -> None:
    data = compose()
    services = data["services"]
    assert set(services) == {"burstbot", "postgres"}
    bot, db = services["burstbot"], services["postgres"]
    assert bot["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    assert (DEPLOY / bot["build"]["context"] / bot["build"]["dockerfile"]).is_file()
    assert bot["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    # named volumes: the database's and burstbot's /data
    assert set(data["volumes"]) == {"burstbot-data", "postgres-data"}
    assert "postgres-data:/var/lib/postgresql/data" in db["volumes"]
    assert "burstbot-data:/data" in bot["volumes"]
    # the config mounted where the entry point reads it
    [mount] = [v for v in bot["volumes"] if v.endswith(":/etc/burstbot/config.toml:ro")]
    config_file = DEPLOY / mount.split(":")[0]
    config = load_config(config_file)
    # the storage URL names the compose service, user and database, and holds no password
    url = config.storage.url
    env = db["environment"]
    assert url == f"postgresql://{env['POSTGRES_USER']}@postgres:5432/{env['POSTGRES_DB']}"
    assert f"-U {env['POSTGRES_USER']} -d {env['POSTGRES_DB']}" in db["healthcheck"]["test"][1]
    # the metrics port is published on the host's loopback only
    assert bot["ports"] == [f"127.0.0.1:{config.metrics.port}:{config.metrics.port}"]
    assert not config.console.enabled and (config.slack.enabled or config.discord.enabled)
    assert config.engine.pid_file.startswith("/data/")


def env_names(example: str) -> set[str]:
    text = (DEPLOY / example).read_text(encoding="utf-8")
    return {line.split("=", 1)[0] for line in text.splitlines() if line and line[0] != "#"}


def test_secrets_come_from_env_files_each_service_reading_only_its_own() -> None:
    services = compose()["services"]
    assert services["burstbot"]["env_file"] == ["burstbot.env"]
    assert services["postgres"]["env_file"] == ["postgres.env"]
    for service in services.values():
        assert not any("PASSWORD" in k or "TOKEN" in k for k in service.get("environment", {}))
    assert env_names("postgres.env.example") == {"POSTGRES_PASSWORD"}
    config = load_config(DEPLOY / "docker.toml")
    enabled_anyway = config.model_copy(
        update={
            "slack": config.slack.model_copy(update={"enabled": True}),
            "discord": config.discord.model_copy(update={"enabled": True}),
        }
    )
    assert set(enabled_anyway.secret_env_names()) | {"PGPASSWORD"} == env_names(
        "burstbot.env.example"
    )
    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").split()
    assert {"deploy/burstbot.env", "deploy/postgres.env"} <= set(ignored)  # never committed


def test_the_container_config_passes_check_config_with_its_secrets_set(
    monkeypatch: Any, capsys: Any
) -> None:
    for name in ("ANTHROPIC_API_KEY", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "PGPASSWORD"):
        monkeypatch.setenv(name, "x-test-value")
    assert main(["check-config", "--config", str(DEPLOY / "docker.toml")]) == 0
    assert ": OK" in capsys.readouterr().out


def test_the_build_context_sends_only_the_package() -> None:
    rules = [
        line
        for line in (DEPLOY / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    ]
    assert rules[0] == "*"
    kept = {rule[1:].rstrip("/") for rule in rules if rule.startswith("!")}
    copied = {
        shlex.split(rest)[0].rstrip("/") for kw, rest in dockerfile_instructions() if kw == "COPY"
    }
    assert copied <= kept
