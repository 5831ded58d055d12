"""Code fingerprints: a hash of the code that computes one experiment's results, and only that code.

The result cache (:mod:`iterlin.cache`) keys results on a code fingerprint. Hashing the whole
package would recompute every figure after any edit (a plot, a claim's wording, another figure);
:func:`code_fingerprint` hashes instead what the experiment's entry points (e.g. ``compute`` and
``load``) can reach, found by reading the sources (``ast``), never by importing them:

1. **Name-level closure** in the experiment's module: the exact source text of each entry point's
   top-level statement (decorators included) and, transitively, of every top-level statement of that
   module that binds or mutates a name they reference. References are every ``Name`` node anywhere
   in the statement (bodies, default arguments, decorators, annotations) and the root of every
   attribute chain (``a.b.c`` → ``a``, with ``.b.c`` kept to reach submodules).
2. Names imported from another ``iterlin`` module (``from ..training import fit``,
   ``from . import _common``, ``from .. import models``, ``import iterlin.x``; also imports inside
   a referenced function):

   * from a **fine-grained** module (default: ``iterlin.experiments`` and everything in it, e.g.
     ``iterlin.experiments._common``): the same name-level closure there, starting from the names
     actually used (``_common.helper`` → ``helper`` only);
   * from a **core** module (any other, e.g. ``iterlin/training.py``, ``iterlin/sub/thing.py``):
     the whole file, and transitively the whole files of every ``iterlin`` module it imports (all
     its import statements, at module level or inside functions, relative or absolute). The same
     holds for a fine-grained module used as a value (``f(_common)``) or imported by a core module.

Which object each imported name in use is bound to (``fit = iterlin.training:fit``) is hashed
too, so that ``from .training import fit`` → ``... import train as fit`` is seen. Modules outside
``iterlin`` (jax, numpy, ...) are not hashed: record their versions elsewhere.

What is hashed is the **exact source text** (of a statement, or of a whole file), so a comment or
docstring change inside a referenced definition changes the fingerprint, while one outside every
referenced definition of a fine-grained module does not. The hash is deterministic (records sorted
by module, then file order), cycles are harmless (each definition and file is visited once), and
subpackages are seen like any other module.

Not seen: code reached only through strings (``getattr(m, "f")``, ``globals()[...]``,
``importlib.import_module``), and mutations of a module's globals done by *other* modules or from
inside functions. Keep an experiment's compute code to plain imports and calls; when in doubt, the
core-module rule (whole files) is the safe one.

Functions:
  code_fingerprint(module, entry_points, *, root=None, fine=("iterlin.experiments",)) -> str
  code_dependencies(module, entry_points, *, root=None, fine=...) -> list[str]   (what is hashed)
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Iterable, Iterator, NamedTuple, Sequence

__all__ = ["code_fingerprint", "code_dependencies", "FINE_GRAINED", "PACKAGE"]

PACKAGE_DIR = Path(__file__).resolve().parent
#: The top-level package whose modules are hashed; imports of anything else are ignored.
PACKAGE = PACKAGE_DIR.name
#: Packages whose modules get the name-level closure (the module itself and all modules in it).
FINE_GRAINED: tuple[str, ...] = (f"{PACKAGE}.experiments",)
_VERSION = b"iterlin.fingerprint/1"
_BUILTINS = frozenset(dir(builtins))
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class _Binding(NamedTuple):
    """What an imported name refers to: a module, or a member (non-module attribute) of a module."""

    module: str
    member: str | None = None


class _Module:
    """One parsed source file: its top-level statements and what each binds."""

    def __init__(self, name: str, path: Path | None, is_package: bool):
        self.name, self.path, self.is_package = name, path, is_package
        self.data = path.read_bytes() if path is not None else b""
        source = importlib.util.decode_source(self.data) if path is not None else ""
        self.tree = ast.parse(source, filename=str(path) if path else name)
        self.lines = source.splitlines(keepends=True)
        self.stmts = list(self.tree.body)
        self.defs: dict[str, list[int]] = {}  # name -> statements binding or mutating it
        for i, stmt in enumerate(self.stmts):
            for node in _scope_statements(stmt):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                for name in _bound_or_mutated(node):
                    self.defs.setdefault(name, []).append(i)
        self._refs: dict[int, list[tuple[str, tuple[str, ...]]]] = {}
        self.import_table: dict[str, list[_Binding]] | None = None  # filled by _Walker

    def text(self, i: int) -> str:
        """The exact source lines of top-level statement ``i`` (its decorators included)."""
        stmt = self.stmts[i]
        start = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
        return "".join(self.lines[start - 1 : stmt.end_lineno])

    def label(self, i: int) -> str:
        names = sorted(n for n, idx in self.defs.items() if i in idx)
        return ",".join(names) if names else f"<line {self.stmts[i].lineno}>"

    def references(self, i: int) -> list[tuple[str, tuple[str, ...]]]:
        """``(name, attribute chain)`` for every name statement ``i`` uses, sorted."""
        if i not in self._refs:
            collector = _References()
            collector.visit(self.stmts[i])
            self._refs[i] = sorted(collector.refs)
        return self._refs[i]


def _scope_statements(stmt: ast.stmt) -> Iterator[ast.stmt]:
    """``stmt`` and the statements nested in it that run in the same scope (if/try/for/with bodies)."""
    yield stmt
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return
    for field in ("body", "orelse", "finalbody", "handlers", "cases"):
        for child in getattr(stmt, field, None) or []:
            if isinstance(child, ast.stmt):
                yield from _scope_statements(child)
            else:  # except handlers, match cases
                for grandchild in getattr(child, "body", []):
                    yield from _scope_statements(grandchild)


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _store_names(node: ast.AST) -> Iterator[str]:
    """Names bound by an assignment target, or mutated (the root of ``x[i] = ...``, ``x.a = ...``)."""
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, (ast.Tuple, ast.List)):
        for elt in node.elts:
            yield from _store_names(elt)
    elif isinstance(node, ast.Starred):
        yield from _store_names(node.value)
    else:
        root = _root_name(node)
        if root is not None:
            yield root


def _bound_or_mutated(stmt: ast.stmt) -> Iterator[str]:
    """Names a scope-level statement binds or mutates (not descending into nested scopes)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield stmt.name
        return
    targets: list[ast.AST] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    elif isinstance(stmt, ast.Delete):
        targets = list(stmt.targets)
    elif isinstance(stmt, (ast.For, ast.AsyncFor)):
        targets = [stmt.target]
    elif isinstance(stmt, (ast.With, ast.AsyncWith)):
        targets = [item.optional_vars for item in stmt.items if item.optional_vars is not None]
    elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        # REGISTRY.update(...), jax.config.update(...): a call on a module-level object mutates it
        if isinstance(stmt.value.func, ast.Attribute):
            root = _root_name(stmt.value.func)
            if root is not None:
                yield root
    elif isinstance(stmt, ast.Try):
        for handler in stmt.handlers:
            if handler.name:
                yield handler.name
    for target in targets:
        yield from _store_names(target)
    # walrus operators at module level
    for node in _walk_same_scope(stmt):
        if isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            yield node.target.id


def _walk_same_scope(node: ast.AST) -> Iterator[ast.AST]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.stmt) or isinstance(child, _SCOPES):
            continue
        yield child
        yield from _walk_same_scope(child)


class _References(ast.NodeVisitor):
    """Every ``Name`` (any context) with the attribute chain that follows it (``a.b.c`` → ``(a, (b, c))``)."""

    def __init__(self):
        self.refs: set[tuple[str, tuple[str, ...]]] = set()

    def visit_Attribute(self, node: ast.Attribute):
        attrs = []
        inner: ast.AST = node
        while isinstance(inner, ast.Attribute):
            attrs.append(inner.attr)
            inner = inner.value
        if isinstance(inner, ast.Name):
            self.refs.add((inner.id, tuple(reversed(attrs))))
        else:
            self.visit(inner)

    def visit_Name(self, node: ast.Name):
        self.refs.add((node.id, ()))

    def visit_Global(self, node: ast.Global):
        self.refs.update((n, ()) for n in node.names)

    visit_Nonlocal = visit_Global


class _Walker:
    """Collects the records to hash: definitions (module, statement) and whole files."""

    def __init__(self, root: Path, fine: Sequence[str]):
        self.root, self.fine = root, tuple(fine)
        self.modules: dict[str, _Module | None] = {}
        self.defs: set[tuple[str, int]] = set()
        self.files: set[str] = set()
        self.missing: set[str] = set()
        self.binds: set[tuple[str, str, str]] = set()  # (module, name, what it was imported as)
        self._seen_names: set[tuple[str, str, tuple[str, ...]]] = set()
        self._todo_names: list[tuple[str, str, tuple[str, ...]]] = []
        self._todo_files: list[str] = []
        self._todo_defs: list[tuple[str, int]] = []

    # ---- modules ---------------------------------------------------------------------------
    def locate(self, name: str) -> tuple[Path | None, bool] | None:
        """``(file, is_package)`` of module ``name`` under root; ``(None, True)`` for a namespace
        package (a folder without ``__init__.py``); None if there is no such module."""
        base = self.root.joinpath(*name.split("."))
        if (base / "__init__.py").is_file():
            return base / "__init__.py", True
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py"), False
        if base.is_dir():
            return None, True
        return None

    def exists(self, name: str) -> bool:
        return self.locate(name) is not None

    def module(self, name: str) -> _Module | None:
        if name not in self.modules:
            where = self.locate(name)
            self.modules[name] = None if where is None else _Module(name, *where)
        return self.modules[name]

    def is_ours(self, name: str) -> bool:
        return name == PACKAGE or name.startswith(PACKAGE + ".")

    def is_fine(self, name: str) -> bool:
        return any(name == p or name.startswith(p + ".") for p in self.fine)

    def absolute(self, mod: _Module, node: ast.ImportFrom) -> str | None:
        """The absolute module of ``from <node.module> import ...`` written in ``mod``."""
        if not node.level:
            return node.module
        parts = mod.name.split(".") if mod.is_package else mod.name.split(".")[:-1]
        if node.level - 1 > len(parts) - 1:
            return None  # beyond the top-level package: an import error at run time
        parts = parts[: len(parts) - (node.level - 1)]
        return ".".join(parts + ([node.module] if node.module else []))

    def bindings(self, mod: _Module, node: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, _Binding]]:
        """``(bound name, binding)`` for each iterlin name an import statement binds; star imports
        bind ``"*"``."""
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not self.is_ours(alias.name):
                    continue
                if alias.asname:
                    yield alias.asname, _Binding(alias.name)
                else:  # `import iterlin.a.b` binds `iterlin`; `.a.b` is followed from the uses
                    yield alias.name.split(".")[0], _Binding(alias.name.split(".")[0])
            return
        base = self.absolute(mod, node)
        if base is None or not self.is_ours(base):
            return
        for alias in node.names:
            if alias.name == "*":
                yield "*", _Binding(base)
            elif self.exists(f"{base}.{alias.name}"):
                yield alias.asname or alias.name, _Binding(f"{base}.{alias.name}")
            else:
                yield alias.asname or alias.name, _Binding(base, alias.name)

    def top_level_imports(self, mod: _Module) -> dict[str, list[_Binding]]:
        if mod.import_table is None:
            table: dict[str, list[_Binding]] = {}
            for stmt in mod.stmts:
                for node in _scope_statements(stmt):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        for name, binding in self.bindings(mod, node):
                            table.setdefault(name, []).append(binding)
            mod.import_table = table
        return mod.import_table

    # ---- closure ---------------------------------------------------------------------------
    def want_name(self, module: str, name: str, attrs: tuple[str, ...] = ()) -> None:
        key = (module, name, attrs)
        if key not in self._seen_names:
            self._seen_names.add(key)
            self._todo_names.append(key)

    def want_file(self, module: str) -> None:
        if module not in self.files and module not in self.missing:
            if self.module(module) is None:
                self.missing.add(module)
                return
            self.files.add(module)
            self._todo_files.append(module)

    def follow(self, binding: _Binding, attrs: tuple[str, ...]) -> None:
        """A use of an imported name (``attrs``: the attribute chain after it)."""
        if binding.member is not None:
            if self.module(binding.module) is None:
                self.missing.add(binding.module)
            elif self.is_fine(binding.module):
                self.want_name(binding.module, binding.member, attrs)
            else:
                self.want_file(binding.module)
            return
        module = binding.module
        while attrs and self.exists(f"{module}.{attrs[0]}"):
            module, attrs = f"{module}.{attrs[0]}", attrs[1:]
        if attrs and self.is_fine(module) and self.module(module) is not None:
            self.want_name(module, attrs[0], attrs[1:])
        else:
            self.want_file(module)

    def resolve(self, mod: _Module, name: str, attrs: tuple[str, ...],
                local: dict[str, list[_Binding]] | None = None) -> bool:
        """Queue what ``name`` (used in ``mod``) refers to; False if it is not defined there."""
        found = False
        for i in mod.defs.get(name, []):
            if (mod.name, i) not in self.defs:
                self.defs.add((mod.name, i))
                self._todo_defs.append((mod.name, i))
            found = True
        imports = self.top_level_imports(mod)
        bindings = (local or {}).get(name, []) + imports.get(name, [])
        if not found and not bindings and name not in _BUILTINS:
            bindings = [_Binding(star.module, name) for star in imports.get("*", [])]
        found = found or bool(bindings)
        for binding in bindings:
            # which object a name is bound to matters even when the file it comes from is hashed
            # whole (`from .training import fit` vs `... import train as fit`)
            self.binds.add((mod.name, name, binding.module + (f":{binding.member}" if binding.member else "")))
            self.follow(binding, attrs)
        return found

    def add_def(self, mod: _Module, i: int) -> None:
        """Queue what top-level statement ``i`` of ``mod`` (already in ``self.defs``) references."""
        local: dict[str, list[_Binding]] = {}
        for node in ast.walk(mod.stmts[i]):  # imports inside the definition (e.g. in a function)
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for name, binding in self.bindings(mod, node):
                    local.setdefault(name, []).append(binding)
        for star in local.pop("*", []):
            self.want_file(star.module)
        for name, attrs in mod.references(i):
            self.resolve(mod, name, attrs, local)

    def run(self, module: str, entry_points: Iterable[str]) -> None:
        mod = self.module(module)
        if mod is None or mod.path is None:
            raise ValueError(f"module={module!r} is not allowed: no file for it under {self.root}")
        for name in entry_points:
            if not self.resolve(mod, name, ()):
                raise ValueError(
                    f"entry point {name!r} is not allowed: {module} ({mod.path}) neither defines nor imports it at top level"
                )
        while self._todo_defs or self._todo_names or self._todo_files:
            while self._todo_defs:
                m, i = self._todo_defs.pop()
                self.add_def(self.modules[m], i)
            while self._todo_names:
                m, name, attrs = self._todo_names.pop()
                self.resolve(self.module(m), name, attrs)
            while self._todo_files:
                self.whole_file(self._todo_files.pop())

    def whole_file(self, module: str) -> None:
        """Queue the iterlin modules a whole-file module imports (anywhere in it) as whole files."""
        mod = self.module(module)
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Import):  # `import iterlin.a.b` depends on iterlin.a.b itself
                for alias in node.names:
                    if self.is_ours(alias.name):
                        self.want_file(alias.name)
            elif isinstance(node, ast.ImportFrom):
                for _, binding in self.bindings(mod, node):
                    self.want_file(binding.module)

    # ---- output ----------------------------------------------------------------------------
    def records(self) -> list[tuple[tuple, bytes]]:
        out: list[tuple[tuple, bytes]] = []
        for m, i in self.defs:
            out.append(((0, m, i), b"def\0" + m.encode() + b"\0" + self.modules[m].text(i).encode()))
        for m in self.files:
            out.append(((1, m, 0), b"file\0" + m.encode() + b"\0" + self.modules[m].data))
        for m in self.missing:
            out.append(((2, m, 0), b"missing\0" + m.encode()))
        for m, name, target in self.binds:
            out.append(((3, m, f"{name} = {target}"), f"bind\0{m}\0{name}\0{target}".encode()))
        return sorted(out, key=lambda r: r[0])


def _walk(module, entry_points, root, fine) -> tuple[_Walker, str]:
    name = module.__name__ if isinstance(module, ModuleType) else module
    if not isinstance(name, str) or not (name == PACKAGE or name.startswith(PACKAGE + ".")):
        raise ValueError(f"module={module!r} is not allowed: it must be {PACKAGE!r} or one of its modules")
    if isinstance(entry_points, str) or not entry_points:
        raise ValueError(f"entry_points={entry_points!r} is not allowed: give a non-empty sequence of names")
    walker = _Walker(Path(root) if root is not None else PACKAGE_DIR.parent, fine)
    walker.run(name, sorted(set(entry_points)))
    return walker, name


def code_fingerprint(
    module: str | ModuleType,
    entry_points: Sequence[str],
    *,
    root: str | Path | None = None,
    fine: Sequence[str] = FINE_GRAINED,
) -> str:
    """sha256 (hex) of the code that ``module``'s ``entry_points`` can reach (see the module doc).

    Args:
      module: a module name (``"iterlin.experiments.fig3"``) or the module object (only its
        ``__name__`` is used: the source is read from the files under ``root``).
      entry_points: top-level names in that module, e.g. ``("compute", "load")`` (order-free).
      root: the folder holding the ``iterlin/`` package tree; default: the installed package's
        parent. Tests point it at an edited copy.
      fine: packages whose modules get the name-level closure (default ``iterlin.experiments``);
        other ``iterlin`` modules are hashed as whole files with the files they import.

    Raises:
      ValueError: ``module`` is not an iterlin module with a file under ``root``, or an entry point
        is not defined at its top level.
    """
    walker, name = _walk(module, entry_points, root, fine)
    h = hashlib.sha256(_VERSION)
    for part in [name.encode(), ",".join(sorted(set(entry_points))).encode()]:
        h.update(len(part).to_bytes(8, "little") + part)
    for _, record in walker.records():
        h.update(len(record).to_bytes(8, "little") + record)
    return h.hexdigest()


def code_dependencies(
    module: str | ModuleType,
    entry_points: Sequence[str],
    *,
    root: str | Path | None = None,
    fine: Sequence[str] = FINE_GRAINED,
) -> list[str]:
    """What :func:`code_fingerprint` hashes, sorted: ``"module:name"`` for a definition (the names
    its statement binds), ``"module"`` for a whole file, ``"module (missing)"`` for an import of an
    iterlin module that has no file, ``"module:name = target"`` for an imported name in use (target:
    ``"iterlin.x"`` for a module, ``"iterlin.x:f"`` for a member of one)."""
    walker, _ = _walk(module, entry_points, root, fine)
    out = []
    for (kind, m, i), _ in walker.records():
        if kind == 0:
            out.append(f"{m}:{walker.modules[m].label(i)}")
        else:
            out.append([m, f"{m} (missing)", f"{m}:{i}"][kind - 1])
    return out
