"""pglock's shape: wings in one order, imports pointing down it, no circles (docs/development.md).

The graph is read from the source with `ast`: every import counts, those inside
functions and under TYPE_CHECKING too, since a lazy import is a dependency all the same.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pglock"

# Top first: a wing may import its own modules and those of the wings below it. `serve`
# (the dashboard) sits above `cli`: its JSON is the command line's (cli/screens.py), and
# nothing but `pglock serve` pays for its web stack.
LAYERS = ("serve", "cli", "operate", "reports", "run", "lock", "db", "settings")
# Importable from everywhere, importing nothing of pglock: the version, the exit statuses
# and exceptions.
BASE = {"pglock", "pglock.errors"}
# The entry point of `python -m pglock`, above everything.
TOP = {"pglock.__main__"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, known: set[str]) -> set[str]:
    """The pglock modules `tree` imports (`from pglock.x import y`: pglock.x.y when that
    is a module, else pglock.x)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "pglock")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == "pglock":
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in known else node.module)
    # `import pglock.a.b` also runs the packages above it, which hold only docstrings.
    return {name for name in found if name in known}


def graph() -> dict[str, set[str]]:
    files = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    known = set(files)
    return {name: imported(ast.parse(path.read_text()), known) - {name}
            for name, path in files.items()}


def wing(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in LAYERS else None


def against_the_order(edges: Mapping[str, Iterable[str]]) -> list[str]:
    """Imports that point up the order, or that leave the base importing anything."""
    wrong = []
    for module, targets in edges.items():
        for target in targets:
            if wing(target) is None and target not in BASE | TOP and target.count(".") == 1:
                continue  # a wing's package itself (its docstring)
            if target in BASE:
                if module in BASE and target != "pglock":
                    wrong.append(f"{module} -> {target} (the base imports nothing)")
                continue
            if target in TOP:
                wrong.append(f"{module} -> {target}")
                continue
            if module in TOP:
                continue
            mine, theirs = wing(module), wing(target)
            if mine is None or theirs is None:
                wrong.append(f"{module} -> {target} (outside every wing)")
            elif LAYERS.index(theirs) < LAYERS.index(mine):
                wrong.append(f"{module} -> {target} ({mine} is below {theirs})")
    return sorted(wrong)


def circles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    return found


def test_every_module_sits_in_a_wing() -> None:
    loose = [name for name in graph() if name not in BASE | TOP and wing(name) is None
             and name.count(".") != 1]
    loose += [name for name in graph() if name.count(".") == 1 and name not in BASE | TOP
              and name.split(".")[1] not in LAYERS]
    assert loose == []


def test_imports_point_down_the_wings() -> None:
    assert against_the_order(graph()) == []


def test_no_import_circles() -> None:
    assert circles(graph()) == []


@pytest.mark.parametrize(("edges", "wrong"), [
    ({"pglock.lock.lease": {"pglock.run.slot"}},
     ["pglock.lock.lease -> pglock.run.slot (lock is below run)"]),
    ({"pglock.settings.config": {"pglock.db.embedded"}},
     ["pglock.settings.config -> pglock.db.embedded (settings is below db)"]),
    ({"pglock.errors": {"pglock.settings.config"}},
     ["pglock.errors -> pglock.settings.config (outside every wing)"]),
    ({"pglock.cli.app": {"pglock.__main__"}}, ["pglock.cli.app -> pglock.__main__"]),
    ({"pglock.cli.app": {"pglock.run.slot", "pglock.errors", "pglock"}}, []),
])
def test_the_order_check_finds_an_upward_import(edges: dict[str, set[str]],
                                                wrong: list[str]) -> None:
    assert against_the_order(edges) == wrong


def test_the_circle_check_finds_a_circle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(edges) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


# The run path: what a slot's attempts share lives on one object (run/slot.py's Slot), so
# no step takes a clump of parameters.
RUN_PATH = ("run", "lock")
MOST_PARAMETERS = 5


def parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = function.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return len([name for name in names if name not in ("self", "cls")])


def test_no_function_of_the_run_path_takes_more_than_five_parameters() -> None:
    crowded = []
    for wing_name in RUN_PATH:
        for path in sorted((PACKAGE / wing_name).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) \
                        and parameters(node) > MOST_PARAMETERS:
                    crowded.append(f"{module_name(path)}.{node.name}: {parameters(node)}")
    assert crowded == []


def test_parameters_are_counted_without_self() -> None:
    tree = ast.parse("class A:\n    def f(self, a, b=1, *c, d, **e): pass\n")
    function = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))
    assert parameters(function) == 5


def test_one_module_reads_cron_expressions() -> None:
    """Every surface (run, status, check, the calendar, systemd) reads a schedule through
    pglock.settings.schedule: croniter's own reading differs from cron's (`1-1` is `*` to
    it), and the calendar that used it apart showed a healthy job missing (sweep D5)."""
    readers = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(name.split(".")[0] == "croniter" for name in names):
                readers.add(module_name(path))
    assert readers == {"pglock.settings.schedule"}
