"""The house rule of ARCHITECTURE.md, checked: which layer may import which, and no cycles.

Read from the source with `ast` (nothing is imported), so a violation names the file and the
import. Imports inside functions count too: a deferred import is still a dependency.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "img2tfrecord"

# layer -> the layers it may import (besides itself). Lower layers never import higher ones.
# conversion/ is cut by stage, in the order an image passes through them: plan -> encode -> write
# (engines, publish, resume) -> versions (update, compact); conversion.convert runs them all.
LAYERS = {
    "base": set(),
    "format": {"base"},
    "conversion": {"base", "format"},  # conversion/__init__ and events: what every stage reports with
    "plan": {"base", "format", "conversion"},
    "encode": {"base", "format", "conversion", "plan"},
    "write": {"base", "format", "conversion", "plan", "encode"},
    "versions": {"base", "format", "conversion", "plan", "encode", "write"},
    "run": {"base", "format", "conversion", "plan", "encode", "write", "versions"},  # conversion.convert
    "inspection": {"base", "format"},
    "loader": {"base", "format"},
    "api": {"base", "format", "conversion", "plan", "encode", "write", "versions", "run", "inspection", "loader"},
    "cli": {
        "base",
        "format",
        "conversion",
        "plan",
        "encode",
        "write",
        "versions",
        "run",
        "inspection",
        "loader",
        "api",
    },
}
BASE = {"errors", "fs", "stores", "tf_import", "cstderr", "_version"}
STAGES = ("plan", "encode", "write", "versions")


def layer(module: str) -> str:
    parts = module.split(".")[1:]  # drop "img2tfrecord"
    if not parts:
        return "api"
    if parts == ["__main__"]:
        return "cli"
    if parts == ["conversion", "convert"]:
        return "run"
    if parts[0] in BASE:
        return "base"
    if parts[0] == "conversion" and len(parts) > 1 and parts[1] in STAGES:
        return parts[1]
    if parts[0] == "conversion" and parts[1:] in ([], ["events"]):
        return "conversion"
    if parts[0] in ("format", "inspection", "cli"):
        return parts[0]
    if parts[0] == "loader":
        return "loader"
    raise AssertionError(f"{module}: not in any layer of ARCHITECTURE.md")


def modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        out[name] = path
    return out


def imports(name: str, path: Path) -> set[str]:
    """img2tfrecord modules `name` imports (an `from x import y` of a submodule counts as x.y)."""
    found = set()
    known = modules()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("img2tfrecord")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            if not base.startswith("img2tfrecord"):
                continue
            for a in node.names:
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
    return {m for m in found if m != name}


def test_every_import_goes_down_the_layers():
    bad = []
    for name, path in sorted(modules().items()):
        mine = layer(name)
        for dep in sorted(imports(name, path)):
            theirs = layer(dep)
            if theirs != mine and theirs not in LAYERS[mine]:
                bad.append(f"{name} ({mine}) imports {dep} ({theirs})")
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    graph = {name: imports(name, path) for name, path in modules().items()}
    state: dict[str, int] = {}

    def visit(n: str, trail: list[str]) -> None:
        state[n] = 1
        for d in graph.get(n, ()):
            if d not in graph:
                continue
            if state.get(d) == 1:
                pytest.fail("import cycle: " + " -> ".join(trail[trail.index(d) :] + [d]) if d in trail else d)
            if not state.get(d):
                visit(d, trail + [d])
        state[n] = 2

    for n in sorted(graph):
        if not state.get(n):
            visit(n, [n])


def test_every_module_imports_alone():
    """Each module imports on its own in a fresh interpreter (no hidden order dependency)."""
    names = sorted(n for n in modules() if not n.endswith("__main__"))
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\n    [sys.modules.pop(m) for m in list(sys.modules) if m.startswith('img2tfrecord')]\n"
    res = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]


def test_the_cli_and_help_import_no_tensorflow():
    res = subprocess.run(
        [sys.executable, "-c", "import img2tfrecord.cli, sys; print('tensorflow' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.stdout.strip() == "False", res.stderr


def test_every_module_is_at_most_600_lines():
    """ARCHITECTURE.md's house rule: a module that grows past it is cut by concern."""
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > 600}
    assert not long, long


FUNCTION_GUIDE = 80  # past this a function is reported: worth a look, not cut to a count
FUNCTION_LIMIT = 160  # past this it is refused: no one step of meaning takes two screens


def test_long_functions_are_reported_and_none_is_past_the_limit():
    """Functions are shaped by what they do: one past FUNCTION_GUIDE lines is listed as a warning
    (longest first, for a reviewer), one past FUNCTION_LIMIT fails."""
    lengths = []
    for name, path in sorted(modules().items()):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                lengths.append((n, f"{name}.{node.name}: {n} lines (line {node.lineno})"))
    lengths.sort(reverse=True)
    if long := [text for n, text in lengths if n > FUNCTION_GUIDE]:
        warnings.warn(f"functions past {FUNCTION_GUIDE} lines:\n" + "\n".join(long), stacklevel=1)
    assert not [text for n, text in lengths if n > FUNCTION_LIMIT]


POSITIONAL_LIMIT = 8  # past this a function's parameters are keyword-only (`*`): a call names what it passes
# Functions allowed past POSITIONAL_LIMIT, each with why (none today).
POSITIONAL_ALLOWED: dict[str, str] = {}


def test_no_function_takes_more_than_8_positional_parameters():
    """Past POSITIONAL_LIMIT positional parameters (self/cls aside) a call is a hunt for positions:
    the rest are keyword-only, or the parameters are named types shaped by what they mean."""
    many = []
    for name, path in sorted(modules().items()):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                params = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
                if params and params[0] in ("self", "cls"):
                    params = params[1:]
                where = f"{name}.{node.name}"
                if len(params) > POSITIONAL_LIMIT and where not in POSITIONAL_ALLOWED:
                    many.append(f"{where}: {len(params)} positional parameters (line {node.lineno})")
    assert not many, "\n".join(many)


def test_the_cli_takes_its_choice_lists_from_the_library():
    """A `click.Choice` of literal strings in cli/ would drift from what the library accepts (conversion.plan.options)."""
    literal = []
    for path in sorted((PKG / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "Choice" and node.args:
                if isinstance(node.args[0], (ast.List, ast.Tuple, ast.Set)):
                    literal.append(f"{path.name}:{node.lineno}")
    assert not literal, literal


# Functions whose fixed tuple another module unpacks, kept for now: the walk's (conversion.plan.walk_files,
# being reshaped into one walk and enrichers, issue 40 item 2).
TUPLE_ALLOWED = {
    "img2tfrecord.conversion.plan.walk_files.walk_class",
    "img2tfrecord.conversion.plan.walk_files.walk_class_remote",
}


def _fixed_tuple(annotation: ast.expr | None) -> bool:
    """A return annotation `tuple[A, B, ...]` (its first alternative): a fixed tuple, not `tuple[X, ...]`."""
    while isinstance(annotation, ast.BinOp):  # `tuple[A, B] | None`
        annotation = annotation.left
    if not (isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) == "tuple"):
        return False
    items = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
    return len(items) > 1 and not any(isinstance(i, ast.Constant) and i.value is Ellipsis for i in items)


def _called(value: ast.expr | None, imported: dict[str, str]) -> str | None:
    """The imported function `value` calls (`f(...)`, `f(...) if ... else ...`), by its full name."""
    while isinstance(value, ast.IfExp):
        value = value.body
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return imported.get(value.func.id)
    return None


def test_no_positional_tuple_crosses_a_module():
    """A public function returning a fixed tuple whose parts another module takes by position
    (`a, b = f(...)`, `f(...)[0]`, `g(*f(...))`) hands over values by position, not by name: a named type instead."""
    trees = {name: ast.parse(path.read_text(), str(path)) for name, path in modules().items()}
    tuples = {
        f"{name}.{node.name}"
        for name, tree in trees.items()
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_") and _fixed_tuple(node.returns)
    }
    found = []
    for name, tree in trees.items():
        here = {
            a.asname or a.name: f"{node.module}.{a.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
            for a in node.names
        }
        for node in ast.walk(tree):
            target = None
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple):
                target = _called(node.value, here)
            elif isinstance(node, (ast.Subscript, ast.Starred)):  # f(...)[0], g(*f(...))
                target = _called(node.value, here)
            if target in tuples and target not in TUPLE_ALLOWED:
                found.append(f"{name} line {node.lineno}: takes {target}'s tuple by position")
    assert not found, "\n".join(found)
