"""The architecture's boundaries, read from the imports of every module (an AST walk).

- The core (`bot/core/`, `bot/llm/`) imports nothing from adapters, storage, operations, the
  command line or the composition root: it runs on any store and any platform.
- The core (`bot/core`, `bot/llm`) sees only its own settings (`bot/core/settings.py`, a
  client's constructor arguments), never the config model: the composition root builds them
  (`bot/wiring.py`).
- One way between the two core layers: `bot/llm` (the model clients) imports `bot/core` (the
  replier protocol it implements, prompts, errors), never the reverse.
- Adapters translate; they never reach into storage, operations, the CLI or the composition root.
- Storage implements the core's `Store` and imports nothing else of the bot; a backend module
  never imports another backend.
- Only `bot/cli/main.py` (the entry point) and the composition root itself import `bot.app`.
- The core and the stores load no platform or model SDK when they run (a type-only import is
  fine): the engine on SQLite with a test model starts in a fraction of the memory.
- The test kit stays outside the product: no product module imports `testkit` or `tests`, the
  wheel holds neither, and benchmarks (and the kit itself) never import `tests`.
- No import circle inside `bot/`, type-only imports included: shared contracts and values live in
  modules that import none of their users, so each module can be read (and loaded) after the ones
  it names.
"""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from setuptools import find_packages

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("storage.sqlite", "storage.postgres")


def imports_of(path: Path, package: str | None = None) -> set[str]:
    """Every module a file imports, absolute and relative, at any depth (lazy imports too)."""
    if package is None:
        package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base]) if base else ".".join(parent)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def modules(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def offenders(
    files: list[Path], forbidden: tuple[str, ...], package: str | None = None
) -> list[str]:
    return [
        f"{path.name} imports {name}"
        for path in files
        for name in sorted(imports_of(path, package))
        if any(name == f or name.startswith(f + ".") for f in forbidden)
    ]


def test_the_core_imports_no_outer_layer() -> None:
    forbidden = ("adapters", "storage", "bot.ops", "bot.cli", "bot.app")
    assert offenders(modules("bot/core", "bot/llm"), forbidden) == []


def test_the_core_reads_no_config_model() -> None:
    assert offenders(modules("bot/core", "bot/llm"), ("bot.config",)) == []


def test_the_core_does_not_import_the_model_clients() -> None:
    assert offenders(modules("bot/core"), ("bot.llm",)) == []


def test_adapters_only_translate() -> None:
    forbidden = ("storage", "bot.ops", "bot.cli", "bot.app")
    assert offenders(modules("adapters"), forbidden) == []


def test_storage_backends_stand_alone() -> None:
    assert offenders(modules("storage"), ("adapters", "bot.cli", "bot.app")) == []
    for backend in BACKENDS:
        path = ROOT / (backend.replace(".", "/") + ".py")
        others = tuple(b for b in BACKENDS if b != backend)
        assert offenders([path], others) == []


def test_storage_imports_only_the_core() -> None:
    """Of the bot, storage sees the core alone: the records it returns live in the core."""
    outside_core = [
        f"{path.name} imports {name}"
        for path in modules("storage")
        for name in sorted(imports_of(path))
        if name.split(".")[0] == "bot" and name.split(".")[:2] != ["bot", "core"]
    ]
    assert outside_core == []


SDKS = ("anthropic", "slack_sdk", "slack_bolt", "discord", "mcp", "aiohttp", "httpx")


def test_the_core_and_the_stores_load_no_sdk() -> None:
    core = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for p in modules("bot/core", "storage")
        if p.name != "__init__.py"
    )
    probe = (
        f"import importlib, sys\nfor m in {core!r}: importlib.import_module(m)\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({SDKS!r})))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]", loaded.stdout


def test_only_the_entry_point_wires_the_app() -> None:
    commands = [p for p in modules("bot/cli") if p.name != "main.py"]
    assert offenders(commands, ("bot.app",)) == []


def test_the_test_kit_stays_outside_the_product() -> None:
    assert offenders(modules("bot", "adapters", "storage"), ("testkit", "tests")) == []
    assert offenders(modules("benchmarks", "testkit"), ("tests",)) == []
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    shipped = find_packages(str(ROOT), **config["tool"]["setuptools"]["packages"]["find"])
    assert "bot" in shipped
    assert [p for p in shipped if p.split(".")[0] in ("testkit", "tests", "benchmarks")] == []


def module_graph(folder: str) -> dict[str, set[str]]:
    """Each module of `folder` (a package by its own name) → the modules of `folder` it imports."""
    paths = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in modules(folder)}  # fmt: skip
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        found = imports_of(path, name if path.name == "__init__.py" else None)
        graph[name] = {module for module in found if module in paths and module != name}
    return graph


def import_circle(graph: dict[str, set[str]]) -> list[str]:
    """One circle of imports (its modules in order, the first repeated last), or [] if none."""
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as circle:
        return list(circle.args[1])
    return []


def test_no_import_circle_in_the_bot() -> None:
    assert import_circle(module_graph("bot")) == []


def test_the_circle_check_sees_type_only_imports(tmp_path: Path) -> None:
    """The checker itself can fail: an import made only for the type checker closes a circle."""
    probe = tmp_path / "probe.py"
    probe.write_text("if TYPE_CHECKING:\n    from bot.core import engine\n", encoding="utf-8")
    graph = {"bot.core.engine": {"bot.core.replier"}, "bot.core.replier": set[str]()}
    assert import_circle(graph) == []
    graph["bot.core.replier"] = imports_of(probe, package="bot.core") & set(graph)
    assert import_circle(graph) in (
        ["bot.core.engine", "bot.core.replier", "bot.core.engine"],
        ["bot.core.replier", "bot.core.engine", "bot.core.replier"],
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "from storage.sqlite import SqliteStore",
            {"storage.sqlite", "storage.sqlite.SqliteStore"},
        ),
        ("def f():\n    import adapters.slack", {"adapters.slack"}),
        ("from ...storage import sqlite", {"storage", "storage.sqlite"}),
    ],
)
def test_the_walk_sees_imports(tmp_path: Path, source: str, expected: set[str]) -> None:
    """The checker itself can fail: lazy and relative imports are found too."""
    probe = tmp_path / "probe.py"
    probe.write_text(source, encoding="utf-8")
    assert expected <= imports_of(probe, package="bot.core")
    assert offenders([probe], ("storage", "adapters"), package="bot.core") != []
