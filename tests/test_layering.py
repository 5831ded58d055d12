"""The package's import graph: its layers, private names and cycles.

The layers (the command line over the figures over the reproduction machinery over the solvers over
the analysis over the core) are import-linter's contract in ``pyproject.toml`` (``[tool.importlinter]``),
which ``make test`` checks with ``lint-imports``; here it is shown to fail on a planted violation. The
two rules import-linter does not state are checked with ``ast``: no module imports another's private
names, and there is no import cycle, on the real package and, to show that they fail, on small
synthetic packages.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

import pytest

import iterlin

PACKAGE_DIR = Path(iterlin.__file__).resolve().parent

class Import(NamedTuple):
    """``importer`` imports ``name`` from module ``target`` (``name`` None: the module itself)."""

    importer: str
    target: str
    name: str | None
    line: int
    top_level: bool  # False: inside a function (runs when called, not when imported)


def modules(root: Path) -> dict[str, Path]:
    """Every module of the package under ``root`` (``root`` is the package folder), by dotted name."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(root: Path) -> list[Import]:
    """Every import of a module of the package by a module of the package (absolute or relative,
    at module level or inside a function), and every ``module._private`` attribute read through an
    imported module."""
    mods = modules(root)
    package = root.name
    out = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                       for n in ast.walk(f) if n is not f}
        aliases: dict[str, str] = {}  # a name bound to a module of the package -> that module
        for node in ast.walk(tree):
            top = id(node) not in in_function
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == package:
                        out.append(Import(name, a.name, None, node.lineno, top))
                        aliases[a.asname or a.name] = a.name
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.split(".")[0] != package:
                    continue
                for a in node.names:
                    if f"{target}.{a.name}" in mods:
                        out.append(Import(name, f"{target}.{a.name}", None, node.lineno, top))
                        aliases[a.asname or a.name] = f"{target}.{a.name}"
                    else:
                        out.append(Import(name, target, a.name, node.lineno, top))
        for node in ast.walk(tree):  # `training._memoise` after `from . import training`
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and f"{aliases[node.value.id]}.{node.attr}" not in mods):
                out.append(Import(name, aliases[node.value.id], node.attr, node.lineno, id(node) not in in_function))
    return out


def _private(name: str | None) -> bool:
    return name is not None and name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(root: Path) -> list[str]:
    """Imports of a private name of another module; a private module (``experiments._common``) is
    private to its package: its siblings may import it, and it may import its package's names."""
    out = set()
    for i in imports(root):
        if i.importer == i.target:
            continue
        if i.name is None and "." not in i.target:  # a top-level package (the probe's `import iterlin`)
            continue
        if i.name is None:  # a module: private if any part below the importer's package is
            parent = i.target.rsplit(".", 1)[0]
            if _private(i.target.rsplit(".", 1)[1]) and not (i.importer == parent or i.importer.startswith(parent + ".")):
                out.add(f"{i.importer} imports {i.target} (line {i.line})")
        elif _private(i.name):
            out.add(f"{i.importer} imports {i.target}.{i.name} (line {i.line})")
    return sorted(out)


def cycles(root: Path, *, top_level_only: bool = False) -> list[list[str]]:
    """Strongly connected components (more than one module, or a module importing itself) of the
    module graph; a package's ``__init__`` re-exporting its own submodules is not an edge back."""
    graph: dict[str, set[str]] = {m: set() for m in modules(root)}
    for i in imports(root):
        if top_level_only and not i.top_level:
            continue
        if i.importer in graph and i.target in graph and not i.target.startswith(i.importer + "."):
            graph[i.importer].add(i.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm (the graph is a few dozen modules)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


# ----------------------------------------------------------------------------------------------
# The package
# ----------------------------------------------------------------------------------------------


def test_no_module_imports_another_modules_private_names():
    found = [f.rsplit(" (line", 1)[0] for f in private_imports(PACKAGE_DIR)]
    assert found == []


def test_no_import_cycles():
    assert cycles(PACKAGE_DIR) == []


def _lint_imports(package_parent: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` with the repository's contracts, on the ``iterlin`` under ``package_parent``."""
    exe = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    return subprocess.run([str(exe), "--config", str(PACKAGE_DIR.parent / "pyproject.toml"), "--no-cache"],
                          cwd=package_parent, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("rel, statement, broken", [
    ("models.py", "from .experiments import fig3\n", "- iterlin.models -> iterlin.experiments.fig3"),
    ("analysis/ntk.py", "def f():\n    from ..solvers import gauss_newton\n    return gauss_newton\n",
     "- iterlin.analysis.ntk -> iterlin.solvers.gauss_newton"),  # inside a function too
    ("repro/stats.py", "import iterlin.cli\n", "- iterlin.repro.stats -> iterlin.cli"),
    ("newmodule.py", "", "iterlin.newmodule"),  # exhaustive: every module is placed in a layer
])
def test_the_layers_contract_fails_on_a_planted_violation(tmp_path, rel, statement, broken):
    assert PACKAGE_DIR.parent.joinpath("pyproject.toml").is_file()
    shutil.copytree(PACKAGE_DIR, tmp_path / "iterlin", ignore=shutil.ignore_patterns("__pycache__"))
    assert _lint_imports(tmp_path).returncode == 0  # the copy keeps the contract, as the package does
    with open(tmp_path / "iterlin" / rel, "a") as f:
        f.write(statement)
    out = _lint_imports(tmp_path)
    assert out.returncode != 0 and broken in out.stdout, out.stdout[-2000:]


# ----------------------------------------------------------------------------------------------
# The rules fail where they should
# ----------------------------------------------------------------------------------------------

TREE = {
    "__init__.py": "from . import training\nfrom .training import fit\n",
    "tree.py": "def tree_map(f, x):\n    return [f(v) for v in x]\n",
    "training.py": "from .tree import tree_map\n\n\ndef _memo(f):\n    return f\n\n\ndef fit(x):\n    return tree_map(abs, x)\n",
    "cache.py": "def user_cache_dir():\n    return '~/.cache'\n",
    "experiments/__init__.py": "from . import fig1\n",
    "experiments/_common.py": "from ..training import fit\n",
    "experiments/fig1.py": "from . import _common\nfrom ._common import fit\nfrom ..cache import user_cache_dir\n",
}


@pytest.fixture
def pkg(tmp_path):
    root = tmp_path / "pkg"
    for rel, text in TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


def _append(root: Path, rel: str, text: str) -> None:
    with open(root / rel, "a") as f:
        f.write(text)


def test_a_clean_package_passes(pkg):
    assert private_imports(pkg) == [] and cycles(pkg) == []


@pytest.mark.parametrize("rel, statement", [
    ("tree.py", "from .training import _memo\n"),
    ("tree.py", "from . import training\n\n\ndef g():\n    return training._memo\n"),
    ("cache.py", "from .experiments import _common\n"),  # a package's private module, from outside it
    ("experiments/fig1.py", "from ..training import _memo as memo\n"),
])
def test_importing_another_modules_private_name_fails(pkg, rel, statement):
    _append(pkg, rel, statement)
    assert len(private_imports(pkg)) == 1


@pytest.mark.parametrize("statement, top_level", [
    ("from .training import fit\n", True),
    ("def g():\n    from . import training\n    return training\n", False),
])
def test_an_import_cycle_fails(pkg, statement, top_level):
    _append(pkg, "tree.py", statement)  # training imports tree
    assert cycles(pkg) == [["pkg.training", "pkg.tree"]]
    assert cycles(pkg, top_level_only=True) == ([["pkg.training", "pkg.tree"]] if top_level else [])
