"""Code fingerprints: a hash of what an experiment's computation runs, normalised, and only that.

The result cache (:mod:`iterlin.repro.cache`) keys results on a code fingerprint, and a reference run
records one (``iterlin.experiments.reference``). Hashing whole files would recompute every figure
after any edit (a docstring, a plot, a claim's wording, another figure); :func:`code_fingerprint`
hashes instead the **definitions** that the experiment's entry points (``compute`` and ``load``) can
reach, found by reading the sources (``ast``), never by importing them.

**What is reached.** Starting from the entry points, every name a reached definition uses is
resolved, in any ``iterlin`` module, to the top-level statements that bind or mutate it there
(``def``, ``class``, ``X = ...``, ``X[k] = ...``, ``X.update(...)``), transitively. Imports are
followed, not hashed: ``from .training import fit``, ``from .. import models`` then
``models.make_model``, ``import iterlin.sub.kernels`` then ``iterlin.sub.kernels.kernel``,
re-exports through a package's ``__init__``, imports inside a function, star imports. A class is one
definition (all its methods and fields: a Flax module's fields and body). A module used as a value
(``f(_common)``) reaches all its statements. Modules outside ``iterlin`` (jax, numpy, ...) are not
hashed: record their versions elsewhere.

**What is hashed.** Each reached definition's **normal form**: its syntax tree with docstrings and
other bare string statements removed (comments are not in the tree), imports inside it removed,
the arguments of a raised exception removed (what an error says is not what a run computes; which
error is raised, and when, stays),
function parameter and return annotations removed (class-level annotations stay: they are a
dataclass's or a Flax module's fields), and every local name of a function, lambda or comprehension
(its parameters where the body uses them, assigned names, loop and ``with`` targets, nested
definitions) renamed canonically in order of appearance; a parameter's own name stays in the
signature (callers may pass it by keyword). Source positions are not part of it. Then every global
name in it is replaced by what it refers to: a name from outside the package by its identity
(``ext jax.numpy``, ``ext functools:partial``, ``builtin len``), a definition of the package by a
numbered slot, and its own name by ``<self>``. A definition's label hashes that text and, refined
until stable (colour refinement over the graph of slots, so recursion and cycles are fine), the
labels of what its slots refer to. The fingerprint is the sha256 of the sorted labels (and of what
the entry points refer to).

So neither the name nor the module of a definition of the package is hashed, only what it does and
what it uses: a docstring or comment edit, an error message's wording, a reformatting, a renamed local, a reordering of
definitions, a definition moved to another module, a module split into a package, a module-level
name renamed everywhere it is used, ``from m import f; f()`` for ``m.f()``, all leave it unchanged;
any change to the tree of a reached definition (an operator, a constant, a called function's body, a
class's fields or methods, a default argument, a decorator, a parameter's name) or to what one of
its names refers to (``from .training import train as fit``, ``import numpy as jnp``) changes it. The
serialisation of trees is our own (node type and non-empty fields by name, constants by ``repr``), so
the hash is the same on every machine and from Python 3.10 on (fields that newer Pythons add, e.g.
``type_params``, are left out when empty).

Not seen: code reached only through strings (``getattr(m, "f")``, ``globals()[...]``,
``importlib.import_module``), mutations of a module's globals done by other modules or from inside
functions, a name read as data (``f.__name__``: a rename is no change), and behaviour of code
outside ``iterlin``. Statements under
``if __name__ == "__main__":`` are never reached.

Functions:
  code_fingerprint(module, entry_points, *, root=None) -> str
  code_dependencies(module, entry_points, *, root=None) -> list[str]   (what is reached)
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Iterable, Iterator, NamedTuple, Sequence

__all__ = ["code_fingerprint", "code_dependencies", "PACKAGE", "PACKAGE_DIR"]

PACKAGE_DIR = Path(__file__).resolve().parent.parent
#: The top-level package whose modules are hashed; imports of anything else are recorded by name.
PACKAGE = PACKAGE_DIR.name
_VERSION = b"iterlin.fingerprint/4"
_BUILTINS = frozenset(dir(builtins))
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_SCOPES = _FUNCTIONS + _COMPREHENSIONS + (ast.ClassDef,)
#: Fields never serialised: comments in disguise (type comments), string-prefix flags, and fields
#: added by newer Pythons that are empty in code valid on 3.10.
_SKIPPED_FIELDS = frozenset({"type_comment", "kind", "type_params"})


# ------------------------------------------------------------------------------------------------
# Normalisation of one top-level statement
# ------------------------------------------------------------------------------------------------


def _is_bare_string(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


class _Strip(ast.NodeTransformer):
    """Remove docstrings and bare strings, function annotations, import statements (what an
    imported name refers to is recorded apart, so that a move is no change) and the arguments of a
    raised exception (its message: ``raise ValueError(f"...")`` is hashed as ``raise ValueError``),
    and merge f-string pieces."""

    def __init__(self):
        self.in_function = 0

    def generic_visit(self, node):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                setattr(node, field, [s for s in stmts if not _is_bare_string(s)])
        return super().generic_visit(node)

    def _function(self, node):
        for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs + [node.args.vararg, node.args.kwarg]:
            if a is not None:
                a.annotation = None
        if not isinstance(node, ast.Lambda):
            node.returns = None
        self.in_function += 1
        self.generic_visit(node)
        self.in_function -= 1
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_ClassDef(self, node):
        outer, self.in_function = self.in_function, 0  # a class body's annotations are its fields
        self.generic_visit(node)
        self.in_function = outer
        return node

    def visit_AnnAssign(self, node):
        if not self.in_function:
            return self.generic_visit(node)
        if node.value is None:  # `x: int` in a function only declares
            return None
        return self.generic_visit(ast.Assign(targets=[node.target], value=node.value))

    def visit_Import(self, node):  # what it binds is recorded as what each name resolves to
        return None

    visit_ImportFrom = visit_Import

    def visit_Raise(self, node):  # what an error says is no part of what a run computes
        if isinstance(node.exc, ast.Call):
            node.exc = node.exc.func
        return self.generic_visit(node)

    def visit_JoinedStr(self, node):
        self.generic_visit(node)
        values: list[ast.AST] = []
        for v in node.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                if not v.value:
                    continue
                if values and isinstance(values[-1], ast.Constant):
                    values[-1] = ast.Constant(values[-1].value + v.value)
                    continue
            values.append(v)
        node.values = values
        return node


def _bound_in_scope(node: ast.AST) -> tuple[list[str], set[str]]:
    """Names a function/lambda/comprehension binds locally, in order of appearance, and the names
    it must not rename (``global``/``nonlocal`` declarations and imports)."""
    order: list[str] = []
    keep: set[str] = set()

    def add(name):
        if name not in order:
            order.append(name)

    def walk(n, top):
        if not top:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                add(n.name)
                for d in n.decorator_list:
                    walk(d, False)
                if not isinstance(n, ast.ClassDef):
                    for d in n.args.defaults + [d for d in n.args.kw_defaults if d is not None]:
                        walk(d, False)
                else:
                    for b in n.bases + [k.value for k in n.keywords]:
                        walk(b, False)
                return
            if isinstance(n, (ast.Lambda,) + _COMPREHENSIONS):
                if isinstance(n, _COMPREHENSIONS):
                    walk(n.generators[0].iter, False)
                return
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            add(n.id)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            keep.update(n.names)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            for alias in n.names:
                keep.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(n, ast.ExceptHandler) and n.name:
            add(n.name)
        elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:
            add(n.name)
        elif isinstance(n, ast.MatchMapping) and n.rest:
            add(n.rest)
        for child in ast.iter_child_nodes(n):
            walk(child, False)

    if isinstance(node, _COMPREHENSIONS):
        for gen in node.generators:
            walk(gen.target, True)
    elif isinstance(node, ast.Lambda):
        walk(node.body, True)
    else:
        for stmt in node.body:
            walk(stmt, False)
    return order, keep


def _params(args: ast.arguments) -> list[str]:
    out = [a.arg for a in args.posonlyargs + args.args]
    if args.vararg:
        out.append(args.vararg.arg)
    out += [a.arg for a in args.kwonlyargs]
    if args.kwarg:
        out.append(args.kwarg.arg)
    return out


class _Rename(ast.NodeTransformer):
    """Rename every local of a function, lambda or comprehension to ``<depth.index>`` (not an
    identifier, so it never collides with a global); parameters keep their names in the signature."""

    def __init__(self):
        self.scopes: list[dict[str, str]] = []

    def lookup(self, name: str) -> str:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return name

    def push(self, names: Iterable[str], keep: set[str]) -> None:
        depth = len(self.scopes)
        scope: dict[str, str] = {}
        for name in names:
            if name not in keep and name not in scope:
                scope[name] = f"<{depth}.{len(scope)}>"
        self.scopes.append(scope)

    def _function(self, node):
        for d in getattr(node, "decorator_list", []):
            self.visit(d)
        for d in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.visit(d)
        if not isinstance(node, ast.Lambda):
            node.name = self.lookup(node.name)
        local, keep = _bound_in_scope(node)
        self.push(_params(node.args) + local, keep)
        if isinstance(node, ast.Lambda):
            node.body = self.visit(node.body)
        else:
            node.body = [self.visit(s) for s in node.body]
        self.scopes.pop()
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_ClassDef(self, node):
        node.name = self.lookup(node.name)
        self.generic_visit(node)
        return node

    def _comprehension(self, node):
        first = node.generators[0]
        first.iter = self.visit(first.iter)
        local, keep = _bound_in_scope(node)
        self.push(local, keep)
        for i, gen in enumerate(node.generators):
            gen.target = self.visit(gen.target)
            if i:
                gen.iter = self.visit(gen.iter)
            gen.ifs = [self.visit(c) for c in gen.ifs]
        for field in ("elt", "key", "value"):
            if hasattr(node, field):
                setattr(node, field, self.visit(getattr(node, field)))
        self.scopes.pop()
        return node

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_Name(self, node):
        node.id = self.lookup(node.id)
        return node

    def visit_Nonlocal(self, node):
        node.names = [self.lookup(n) for n in node.names]
        return node

    def _named(self, node):
        if getattr(node, "name", None):
            node.name = self.lookup(node.name)
        self.generic_visit(node)
        return node

    visit_ExceptHandler = visit_MatchAs = visit_MatchStar = _named

    def visit_MatchMapping(self, node):
        if node.rest:
            node.rest = self.lookup(node.rest)
        self.generic_visit(node)
        return node


def _dump(node, ref=None) -> str:
    """A serialisation of a syntax tree that is the same on every Python from 3.10 on: node type and
    non-empty fields by name (positions are not fields), constants by ``repr``.

    ``ref(name, attrs) -> (token, consumed)``, if given, replaces each global name (with the first
    ``consumed`` attributes of the chain after it, ``a.b.c``) by ``token`` (None: kept as written)."""
    if ref is not None and isinstance(node, (ast.Name, ast.Attribute)):
        chain = []
        inner = node
        while isinstance(inner, ast.Attribute):
            chain.append(inner)
            inner = inner.value
        if isinstance(inner, ast.Name):
            chain.reverse()  # innermost attribute first
            token, consumed = ref(inner.id, tuple(a.attr for a in chain))
            if token is not None:
                last = chain[consumed - 1] if consumed else inner
                out = f"(Ref ctx={_dump(last.ctx)} token={token!r})"
                for a in chain[consumed:]:
                    out = f"(Attribute attr={a.attr!r} ctx={_dump(a.ctx)} value={out})"
                return out
    if isinstance(node, ast.AST):
        parts = [type(node).__name__]
        for field in sorted(node._fields):
            if field in _SKIPPED_FIELDS:
                continue
            value = getattr(node, field, None)
            if value is None or (isinstance(value, list) and not value):
                continue
            parts.append(f"{field}={_dump(value, ref)}")
        return "(" + " ".join(parts) + ")"
    if isinstance(node, list):
        return "[" + ",".join(_dump(v, ref) for v in node) + "]"
    return repr(node)


def normalise(stmt: ast.stmt) -> ast.stmt:
    """``stmt`` (changed in place) without docstrings and function annotations, its locals renamed."""
    return _Rename().visit(_Strip().visit(stmt) or ast.Pass())


def normalised_source(source: str) -> str:
    """The serialisation of every normalised top-level statement of ``source`` (tests and debugging)."""
    return "\n".join(_dump(normalise(s)) for s in ast.parse(source).body)


# ------------------------------------------------------------------------------------------------
# Modules and what their top-level statements bind
# ------------------------------------------------------------------------------------------------


class _Binding(NamedTuple):
    """What an imported name refers to: a module, or a member (non-module attribute) of a module;
    ``external`` for a module outside the package."""

    module: str
    member: str | None = None
    external: bool = False


class _Module:
    """One parsed source file: its top-level statements, what each binds, their normal forms."""

    def __init__(self, name: str, path: Path | None, is_package: bool):
        self.name, self.path, self.is_package = name, path, is_package
        source = importlib.util.decode_source(path.read_bytes()) if path is not None else ""
        self.source, self.filename = source, str(path) if path else name
        self.stmts = self._parse()
        self.defs: dict[str, list[int]] = {}  # name -> statements binding or mutating it
        for i, stmt in enumerate(self.stmts):
            for node in _scope_statements(stmt):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                for name in _bound_or_mutated(node):
                    self.defs.setdefault(name, []).append(i)
        self._normal: dict[int, tuple[ast.stmt, list[tuple[str, tuple[str, ...]]]]] = {}
        self.import_table: dict[str, list[_Binding]] | None = None  # filled by _Walker
        self._to_normalise: list[ast.stmt] | None = None  # a second parse, normalised in place

    def _parse(self) -> list[ast.stmt]:
        return [s for s in ast.parse(self.source, filename=self.filename).body if not _is_main_guard(s)]

    def label(self, i: int) -> str:
        names = sorted(n for n, idx in self.defs.items() if i in idx)
        return ",".join(names) if names else f"<statement {i}>"

    def normal(self, i: int) -> tuple[ast.stmt, list[tuple[str, tuple[str, ...]]]]:
        """``(normalised tree, references)`` of top-level statement ``i``; references: ``(global
        name, attribute chain)`` for every non-local name it uses, sorted."""
        if i not in self._normal:
            if self._to_normalise is None:
                self._to_normalise = self._parse()
            tree = normalise(self._to_normalise[i])
            collector = _References()
            collector.visit(tree)
            self._normal[i] = (tree, sorted(r for r in collector.refs if not r[0].startswith("<")))
        return self._normal[i]


def _is_main_guard(stmt: ast.stmt) -> bool:
    """``if __name__ == "__main__":``: what runs a module as a script never runs in a computation."""
    test = stmt.test if isinstance(stmt, ast.If) else None
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators))


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
    for node in _walk_same_scope(stmt):  # walrus operators at module level
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


# ------------------------------------------------------------------------------------------------
# The walk
# ------------------------------------------------------------------------------------------------


class _Walker:
    """Collects the reached definitions (module, statement) and what each name they use resolves to."""

    def __init__(self, root: Path):
        self.root = root
        self.modules: dict[str, _Module | None] = {}
        self.defs: set[tuple[str, int]] = set()
        self.whole: set[str] = set()  # modules used as values
        self.resolved: dict[tuple[str, int], tuple[dict, tuple]] = {}  # def -> (its names' targets, stars)
        self._todo: list[tuple[str, int]] = []

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

    @staticmethod
    def is_ours(name: str) -> bool:
        return name == PACKAGE or name.startswith(PACKAGE + ".")

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
        """``(bound name, binding)`` for each name an import statement binds; star imports bind ``"*"``."""
        if isinstance(node, ast.Import):
            for alias in node.names:
                ours = self.is_ours(alias.name)
                if alias.asname:
                    yield alias.asname, _Binding(alias.name, external=not ours)
                else:  # `import a.b` binds `a`; `.b` is followed from the uses
                    yield alias.name.split(".")[0], _Binding(alias.name.split(".")[0], external=not ours)
            return
        base = self.absolute(mod, node)
        if base is None:
            return
        ours = self.is_ours(base)
        for alias in node.names:
            if alias.name == "*":
                if ours:
                    yield "*", _Binding(base)
            elif ours and self.exists(f"{base}.{alias.name}"):
                yield alias.asname or alias.name, _Binding(f"{base}.{alias.name}")
            else:
                yield alias.asname or alias.name, _Binding(base, alias.name, external=not ours)

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

    # ---- resolution ------------------------------------------------------------------------
    def reach(self, mod: _Module, i: int) -> tuple[str, int]:
        """Queue statement ``i`` of ``mod`` (once); return its key."""
        if (mod.name, i) not in self.defs:
            self.defs.add((mod.name, i))
            self._todo.append((mod.name, i))
        return (mod.name, i)

    def targets(self, mod: _Module, name: str, attrs: tuple[str, ...],
                local: dict[str, list[_Binding]] | None = None, chain: frozenset = frozenset()) -> _Targets:
        """What ``name`` (followed by ``.attrs``) used in ``mod`` refers to, each reached definition queued."""
        if (mod.name, name) in chain:  # a cycle of re-exports: an import error at run time
            return _Targets((f"cycle {name}",), 0)
        chain = chain | {(mod.name, name)}
        found: list = [self.reach(mod, i) for i in mod.defs.get(name, [])]
        consumed = 0
        imports = self.top_level_imports(mod)
        bindings = (local or {}).get(name, []) + imports.get(name, [])
        if not found and not bindings:
            if name in _BUILTINS:
                return _Targets((f"builtin {name}",), 0)
            bindings = [_Binding(star.module, name) for star in imports.get("*", [])]
        for binding in bindings:
            more = self.follow(binding, attrs, chain)
            found += more.keys
            consumed = max(consumed, more.consumed)
        keys = sorted(set(found), key=repr)
        return _Targets(tuple(keys), consumed) if keys else _Targets((f"unresolved {name}",), 0)

    def follow(self, binding: _Binding, attrs: tuple[str, ...], chain: frozenset) -> _Targets:
        """What a use of an imported name refers to (``attrs``: the attribute chain after it);
        ``consumed``: how many of ``attrs`` name modules or the member reached."""
        if binding.external:
            return _Targets((f"ext {binding.module}" + (f":{binding.member}" if binding.member else ""),), 0)
        if binding.member is not None:
            mod = self.module(binding.module)
            if mod is None:
                return _Targets((f"missing {binding.module}",), 0)
            return self.targets(mod, binding.member, attrs, None, chain)
        module, steps = binding.module, 0
        while steps < len(attrs) and self.exists(f"{module}.{attrs[steps]}"):
            module, steps = f"{module}.{attrs[steps]}", steps + 1
        mod = self.module(module)
        if mod is None:
            return _Targets((f"missing {module}",), steps)
        if steps < len(attrs):
            inner = self.targets(mod, attrs[steps], attrs[steps + 1:], None, chain)
            return inner._replace(consumed=steps + 1 + inner.consumed)
        if module not in self.whole:  # a module used as a value: all of it
            self.whole.add(module)
            for i, stmt in enumerate(mod.stmts):
                if not (isinstance(stmt, (ast.Import, ast.ImportFrom)) or _is_bare_string(stmt)):
                    self.reach(mod, i)
        return _Targets((f"module {module}",), steps)

    def process(self, mod: _Module, i: int) -> None:
        """Resolve every global name statement ``i`` of ``mod`` uses (queueing what it reaches)."""
        local: dict[str, list[_Binding]] = {}
        for node in ast.walk(mod.stmts[i]):  # imports inside the definition (e.g. in a function)
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for name, binding in self.bindings(mod, node):
                    local.setdefault(name, []).append(binding)
        resolved = {}
        stars = [self.follow(star, (), frozenset()) for star in local.pop("*", [])]
        for name, attrs in mod.normal(i)[1]:
            resolved[(name, attrs)] = self.targets(mod, name, attrs, local)
        self.resolved[(mod.name, i)] = (resolved, tuple(k for t in stars for k in t.keys))

    def run(self, module: str, entry_points: Iterable[str]) -> dict[str, _Targets]:
        mod = self.module(module)
        if mod is None or mod.path is None:
            raise ValueError(f"module={module!r} is not allowed: no file for it under {self.root}")
        entries = {}
        for name in entry_points:
            found = self.targets(mod, name, ())
            if all(isinstance(k, str) and k.startswith(("unresolved", "builtin")) for k in found.keys):
                raise ValueError(
                    f"entry point {name!r} is not allowed: {module} ({mod.path}) neither defines nor imports it at top level"
                )
            entries[name] = found
        while self._todo:
            m, i = self._todo.pop()
            self.process(self.modules[m], i)
        return entries

    # ---- output ----------------------------------------------------------------------------
    def form(self, m: str, i: int) -> tuple[str, list[tuple]]:
        """The normal form of a reached definition with every global name replaced by what it
        refers to: an outside module, a builtin, ... as such; a definition of the package by a
        numbered slot (first use first). Its own name is ``<self>``. Returns the text and, per slot,
        the keys it refers to. No name of the package's own is left: renames and moves are no change."""
        tree, _ = self.modules[m].normal(i)
        resolved, stars = self.resolved[(m, i)]
        slots: list[tuple] = []
        index: dict[tuple, int] = {}

        def ref(name: str, attrs: tuple[str, ...]):
            if name.startswith("<") or (name, attrs) not in resolved:
                return None, 0
            keys, consumed = resolved[(name, attrs)]
            if all(isinstance(k, str) for k in keys):  # outside the package: its identity as such
                return " ".join(keys), consumed
            if keys not in index:
                index[keys] = len(slots)
                slots.append(keys)
            return f"<slot {index[keys]}>", consumed

        own = isinstance(tree, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        name = tree.name if own else None
        if own:
            tree.name = "<self>"
        try:
            text = _dump(tree, ref)
        finally:
            if own:
                tree.name = name
        if stars:
            slots.append(stars)
        return text, slots

    def labels(self) -> dict[tuple[str, int], str]:
        """A label per reached definition that hashes its form and, refined until stable (colour
        refinement over the graph of slots), the labels of what its slots refer to."""
        nodes = sorted(self.defs)
        forms = {v: self.form(*v) for v in nodes}

        def h(text: str) -> str:
            return hashlib.sha256(text.encode()).hexdigest()

        label = {v: h(forms[v][0]) for v in nodes}
        for _ in range(len(nodes) + 1):
            new = {}
            for v in nodes:
                slots = [",".join(sorted(h(k) if isinstance(k, str) else label[k] for k in keys))
                         for keys in forms[v][1]]
                new[v] = h(label[v] + "|" + ";".join(slots))
            stable = len(set(new.values())) == len(set(label.values()))
            label = new
            if stable:
                break
        return label


class _Targets(NamedTuple):
    """What a name refers to: reached definitions ``(module, statement)`` and identities outside the
    package (strings); ``consumed``: how many attributes after the name the reference covers."""

    keys: tuple
    consumed: int


def _walk(module, entry_points, root) -> tuple[_Walker, dict[str, _Targets]]:
    name = module.__name__ if isinstance(module, ModuleType) else module
    if not isinstance(name, str) or not _Walker.is_ours(name):
        raise ValueError(f"module={module!r} is not allowed: it must be {PACKAGE!r} or one of its modules")
    if isinstance(entry_points, str) or not entry_points:
        raise ValueError(f"entry_points={entry_points!r} is not allowed: give a non-empty sequence of names")
    walker = _Walker(Path(root) if root is not None else PACKAGE_DIR.parent)
    entries = walker.run(name, sorted(set(entry_points)))
    return walker, entries


def code_fingerprint(module: str | ModuleType, entry_points: Sequence[str], *, root: str | Path | None = None) -> str:
    """sha256 (hex) of the normalised code that ``module``'s ``entry_points`` can reach (module doc).

    Args:
      module: a module name (``"iterlin.experiments.fig3"``) or the module object (only its
        ``__name__`` is used: the source is read from the files under ``root``).
      entry_points: top-level names in that module, e.g. ``("compute", "load")`` (order-free).
      root: the folder holding the ``iterlin/`` package tree; default: the installed package's
        parent. Tests point it at an edited copy; ``iterlin.experiments.reference`` at the tree
        of a past commit.

    Raises:
      ValueError: ``module`` is not an iterlin module with a file under ``root``, or an entry point
        is neither defined nor imported at its top level.
    """
    walker, entries = _walk(module, entry_points, root)
    label = walker.labels()
    records = [f"{name} -> " + ",".join(sorted(k if isinstance(k, str) else label[k] for k in found.keys))
               for name, found in sorted(entries.items())]
    records += sorted(label.values())
    h = hashlib.sha256(_VERSION)
    for record in records:
        data = record.encode()
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def code_dependencies(module: str | ModuleType, entry_points: Sequence[str], *,
                      root: str | Path | None = None) -> list[str]:
    """What :func:`code_fingerprint` reaches, sorted: ``"module:name"`` for a definition (the names
    its statement binds), ``"module"`` for a module used as a value (all of it is reached)."""
    walker, _ = _walk(module, entry_points, root)
    return sorted({f"{m}:{walker.modules[m].label(i)}" for m, i in walker.defs} | walker.whole)
