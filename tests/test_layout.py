"""The architecture's boundaries, read from the imports of every module (an AST walk).

- The core (`bot/core/`, `bot/llm/`) imports nothing from adapters, storage, operations, the
  command line or the composition root: it runs on any store and any platform.
- The core (`bot/core`, `bot/llm`) sees only its own settings (`bot/core/settings.py`, a
  client's constructor arguments), never the config model: the composition root builds them
  (`bot/wiring.py`).
- One way between the two core layers: `bot/llm` (the model clients) imports `bot/core` (the
  replier protocol it implements, prompts, errors), never the reverse.
- Adapters translate; they never reach into storage, operations, the CLI or the composition root.
- Storage implements the core's store protocols and imports nothing else of the bot; a backend
  module never imports another backend.
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


# the store, split by who uses it ------------------------------------------------------------
STORE_USERS = {  # (module of bot/core, class or function, parameter or field) → its protocol
    ("engine", "Engine", "store"): "BurstStore",
    ("scheduler", "Scheduler", "timers"): "BurstStore",
    ("supervisor", "Supervisor", "store"): "BurstStore",
    ("speculation", "Window", "store"): "BurstStore",
    ("typing_window", "author_typing", "store"): "BurstStore",
    ("attachments", "AttachmentLoader", "store"): "FileStore",
    ("outbox", "Outbox", "store"): "OutboxStore",
    ("outbox", "ClaimFence", "store"): "OutboxStore",
    ("indicator", "Indicator", "store"): "IndicatorMarks",
    ("streaming", "Drafts", "store"): "DraftStore",
    ("threads", "ThreadBook", "memory"): "FrontendMemory",
    ("catch_up", "CatchUp", "memory"): "FrontendMemory",
}
ENGINE_PARTS = ("outbox", "wakeup", "sleeping_until", "store", "indicator", "drafts")


def annotations_in(path: Path) -> dict[tuple[str, str], str]:
    """(class or function, parameter or field) → its annotation, for every class's fields and
    `__init__` parameters and every module-level function's parameters."""
    found: dict[tuple[str, str], str] = {}

    def parameters(owner: str, function: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for arg in [*function.args.args, *function.args.kwonlyargs]:
            if arg.annotation is not None:
                found[(owner, arg.arg)] = ast.unparse(arg.annotation)

    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    found[(node.name, item.target.id)] = ast.unparse(item.annotation)
                elif isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    parameters(node.name, item)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            parameters(node.name, node)
    return found


def store_protocols() -> dict[str, set[str]]:
    """Each protocol of bot/core/store.py → the methods it declares itself."""
    tree = ast.parse((ROOT / "bot/core/store.py").read_text(encoding="utf-8"))
    return {
        node.name: {
            item.name
            for item in node.body
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(base) == "Protocol" for base in node.bases)
    }


def called_methods(path: Path) -> set[str]:
    return {
        node.func.attr
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }


def test_each_part_of_the_core_takes_the_store_protocol_it_uses() -> None:
    wrong = []
    for (module, owner, name), protocol in STORE_USERS.items():
        annotated = annotations_in(ROOT / "bot/core" / f"{module}.py").get((owner, name))
        if annotated != protocol:
            wrong.append(f"{module}.{owner} {name}: {annotated}, not {protocol}")
    assert wrong == []


def test_a_store_protocol_is_as_wide_as_its_users_need() -> None:
    """Every protocol has its users listed above, and each of its methods is called by one of
    them: a method no part of the core calls belongs to the SQL store alone (operations, the
    command line), and one protocol of every method has no user that needs it all."""
    protocols = store_protocols()
    assert set(protocols) == set(STORE_USERS.values())
    unused = []
    for protocol, methods in sorted(protocols.items()):
        users = {m for (m, _, _), p in STORE_USERS.items() if p == protocol}
        called = set().union(*(called_methods(ROOT / "bot/core" / f"{m}.py") for m in users))
        unused += [f"{protocol}.{method}" for method in sorted(methods - called)]
    assert unused == []


def test_no_part_of_the_core_names_the_sql_store() -> None:
    """Operations and the command line work on the SQL store itself; the core, the model
    clients and the adapters only ever see a small protocol."""
    named = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in modules("bot/core", "bot/llm", "adapters")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if (isinstance(node, ast.Name) and node.id == "SqlStore")
        or (isinstance(node, ast.Attribute) and node.attr == "SqlStore")
    ]
    assert named == []


def reads_through_the_engine(source: str) -> list[tuple[int, str]]:
    """`engine.<part>` or `<anything>.engine.<part>` for the parts the composition root hands
    out itself (the outbox, the scheduler's alarm, the store, the indicator, the drafts)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in ENGINE_PARTS:
            base = node.value
            if (isinstance(base, ast.Name) and base.id == "engine") or (
                isinstance(base, ast.Attribute) and base.attr == "engine"
            ):
                found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_nothing_reaches_through_the_engine_for_its_parts() -> None:
    outside = [p for p in modules("bot", "adapters", "storage") if p != ROOT / "bot/core/engine.py"]
    reads = [
        f"{path.relative_to(ROOT)}:{line} {read}"
        for path in outside
        for line, read in reads_through_the_engine(path.read_text(encoding="utf-8"))
    ]
    assert reads == []


def test_the_engine_walk_sees_reads() -> None:
    """The checker itself can fail: direct and nested reads are found, a method call is not."""
    source = "engine.outbox.deliver_due()\nself.engine.wakeup.set()\nengine.flush(key)\n"
    assert reads_through_the_engine(source) == [(1, "engine.outbox"), (2, "self.engine.wakeup")]
