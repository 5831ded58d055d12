"""Per-experiment code fingerprints: they follow the code a figure's compute reaches, and only that.

Most tests build a small synthetic package tree in ``tmp_path`` (the layout of ``iterlin``: core
modules, a subpackage, ``experiments/`` with ``_common`` and two figures), edit one file and compare
fingerprints; the last ones do the same on a copy of the real package.
"""

from __future__ import annotations

import ast
import shutil
import textwrap
import types
from pathlib import Path

import pytest

from iterlin.fingerprint import PACKAGE_DIR, code_dependencies, code_fingerprint

ENTRY = ("compute", "load")

TREE = {
    "__init__.py": """
        from . import training
        from .training import fit
    """,
    "tree.py": """
        def tree_map(f, x):
            return [f(v) for v in x]


        def cycle():  # an import inside a function, and a cycle tree -> training -> tree
            from . import training
            return training
    """,
    "validate.py": """
        def check(x):
            return x
    """,
    "training.py": """
        from .tree import tree_map


        def fit(x, lr=0.1):
            from .validate import check
            return tree_map(lambda v: check(v) - lr, x)


        def unused():
            return 0
    """,
    "claims.py": """
        def pct(x):
            return f"{100 * x:.1f} %"
    """,
    "plotting.py": """
        def plot(results):
            return results
    """,
    "models.py": """
        def make():
            return "model"
    """,
    "ntk.py": """
        def kernel_distance(a, b):
            return a - b
    """,
    "sub/__init__.py": "",
    "sub/kernels.py": """
        from ..tree import tree_map


        def kernel(x):
            return tree_map(abs, x)
    """,
    "experiments/__init__.py": """
        from . import figa, figb

        EXPERIMENTS = {"figa": figa, "figb": figb}


        def run(name, config):
            exp = EXPERIMENTS[name]
            return exp.compute(config, exp.load(config))
    """,
    "experiments/_common.py": """
        from ..sub import kernels
        from ..training import fit


        def train_runs(config, data):
            return fit(kernels.kernel(data), lr=config["lr"])


        def describe(results):
            return "results: " + str(results)
    """,
    "experiments/figa.py": """
        \"\"\"Figure A.\"\"\"

        from ..claims import pct
        from ..plotting import plot
        from . import _common
        from ._common import describe

        STEPS = 3  # used by compute (a default argument)
        PAPER_ACC = 0.823  # used by claims only


        def _traced(f):
            return f


        def _scale(x, factor=STEPS):
            return [v * factor for v in x]


        def load(config):
            return [1.0, 2.0]


        @_traced
        def compute(config, data):
            return {"runs": _common.train_runs(config, _scale(data))}


        def claims(results):
            return ["accuracy " + pct(PAPER_ACC), describe(results)]


        def figure(results):
            return plot(results)
    """,
    "experiments/figb.py": """
        import iterlin.sub.kernels

        from .. import models
        from ..training import fit
        from .figa import load


        def compute(config, data):
            from ..ntk import kernel_distance
            x = fit(iterlin.sub.kernels.kernel(data))
            return {"model": models.make(), "d": kernel_distance(x[0], x[1])}
    """,
}


def write_tree(root: Path) -> Path:
    for rel, text in TREE.items():
        path = root / "iterlin" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return root


def edit(root: Path, rel: str, old: str, new: str) -> None:
    path = root / "iterlin" / rel
    text = path.read_text()
    assert text.count(old) == 1, (rel, old)
    path.write_text(text.replace(old, new))


@pytest.fixture
def tree(tmp_path):
    return write_tree(tmp_path / "pkg")


def fp(root, module="iterlin.experiments.figa", entry=ENTRY):
    return code_fingerprint(module, entry, root=root)


# ----------------------------------------------------------------------------------------------
# What is reached
# ----------------------------------------------------------------------------------------------


def test_dependencies_of_a_figure(tree):
    assert code_dependencies("iterlin.experiments.figa", ENTRY, root=tree) == [
        "iterlin.experiments._common:train_runs",
        "iterlin.experiments.figa:STEPS",
        "iterlin.experiments.figa:_traced",
        "iterlin.experiments.figa:_scale",
        "iterlin.experiments.figa:load",
        "iterlin.experiments.figa:compute",
        "iterlin.sub.kernels",
        "iterlin.training",
        "iterlin.tree",
        "iterlin.validate",
        "iterlin.experiments._common:fit = iterlin.training:fit",
        "iterlin.experiments._common:kernels = iterlin.sub.kernels",
        "iterlin.experiments.figa:_common = iterlin.experiments._common",
    ]
    deps = code_dependencies("iterlin.experiments.figb", ("compute", "load"), root=tree)
    assert deps == [
        "iterlin.experiments.figa:load",
        "iterlin.experiments.figb:compute",
        "iterlin.models",
        "iterlin.ntk",
        "iterlin.sub.kernels",
        "iterlin.training",
        "iterlin.tree",
        "iterlin.validate",
        "iterlin.experiments.figb:fit = iterlin.training:fit",
        "iterlin.experiments.figb:iterlin = iterlin",  # used as iterlin.sub.kernels.kernel
        "iterlin.experiments.figb:kernel_distance = iterlin.ntk:kernel_distance",
        "iterlin.experiments.figb:load = iterlin.experiments.figa:load",
        "iterlin.experiments.figb:models = iterlin.models",
    ]


def test_deterministic_and_independent_of_where_the_tree_lies(tree, tmp_path):
    h = fp(tree)
    assert fp(tree) == h and len(h) == 64
    other = write_tree(tmp_path / "elsewhere" / "deeper")
    assert fp(other) == h
    # entry points are a set; a module object stands for its name (the source is read under root)
    assert code_fingerprint("iterlin.experiments.figa", ("load", "compute", "load"), root=tree) == h
    assert code_fingerprint(types.ModuleType("iterlin.experiments.figa"), ENTRY, root=tree) == h
    assert fp(tree, entry=("compute",)) != h
    assert fp(tree, "iterlin.experiments.figb") != h


# ----------------------------------------------------------------------------------------------
# Edits that must not change figure A's fingerprint
# ----------------------------------------------------------------------------------------------

UNRELATED = {
    "a plot module": ("plotting.py", "return results", "return dict(results)"),
    "a claim's wording": ("experiments/figa.py", '"accuracy "', '"test accuracy "'),
    "a constant used only by claims": ("experiments/figa.py", "PAPER_ACC = 0.823", "PAPER_ACC = 0.9"),
    "the claims helpers": ("claims.py", ' %"', '%"'),
    "another figure": ("experiments/figb.py", "kernel_distance(x[0], x[1])", "kernel_distance(x[1], x[0])"),
    "another figure's core module": ("ntk.py", "return a - b", "return b - a"),
    "an unused helper in _common": ("experiments/_common.py", '"results: "', '"Results: "'),
    "the experiments registry": ("experiments/__init__.py", "return exp.compute", "return exp.compute"
                                 "  # run"),
    "an unused function in the figure": ("experiments/figa.py", "return plot(results)", "return plot(results or {})"),
    "a comment outside the definitions": ("experiments/figa.py", "def load(config):",
                                          "# loading\n# -------\n\n\ndef load(config):"),
    "a comment in _common outside the definitions": ("experiments/_common.py", "def describe",
                                                     "# describing\ndef describe"),
    "the module docstring": ("experiments/figa.py", '"""Figure A."""', '"""Figure A, reworded."""'),
    "an unused import": ("experiments/figa.py", "from ..plotting import plot", "from ..plotting import plot\n"
                         "from .. import models"),
    "the package __init__": ("__init__.py", "from .training import fit", "from .training import fit, unused"),
}


@pytest.mark.parametrize("what", sorted(UNRELATED))
def test_unrelated_edit_keeps_the_fingerprint(tree, what):
    h = fp(tree)
    edit(tree, *UNRELATED[what])
    assert fp(tree) == h, what


def test_added_files_elsewhere_keep_the_fingerprint(tree):
    h = fp(tree)
    (tree / "iterlin" / "experiments" / "figc.py").write_text("def compute(config, data):\n    return {}\n")
    (tree / "iterlin" / "newsub").mkdir()
    (tree / "iterlin" / "newsub" / "__init__.py").write_text("X = 1\n")
    assert fp(tree) == h


# ----------------------------------------------------------------------------------------------
# Edits that must change it
# ----------------------------------------------------------------------------------------------

RELATED = {
    "compute itself": ("experiments/figa.py", "_scale(data)", "_scale(data[::-1])"),
    "load": ("experiments/figa.py", "return [1.0, 2.0]", "return [1.0, 3.0]"),
    "a comment inside compute": ("experiments/figa.py", "def compute(config, data):",
                                 "def compute(config, data):  # the training"),
    "a referenced helper": ("experiments/figa.py", "v * factor", "v * factor + 0"),
    "a constant in a default argument": ("experiments/figa.py", "STEPS = 3", "STEPS = 4"),
    "a decorator": ("experiments/figa.py", "def _traced(f):\n    return f", "def _traced(f):\n    return f  # x"),
    "the helper in _common that compute uses": ("experiments/_common.py", 'lr=config["lr"]', "lr=config['lr']"),
    "a core module it imports": ("training.py", "- lr", "- 2 * lr"),
    "an unused function of that core module": ("training.py", "return 0", "return 1"),
    "a core module imported transitively": ("tree.py", "for v in x", "for v in list(x)"),
    "a core module imported inside a function": ("validate.py", "return x", "return +x"),
    "a core module in a subpackage": ("sub/kernels.py", "tree_map(abs, x)", "tree_map(float, x)"),
    "_common's imports": ("experiments/_common.py", "from ..training import fit", "from ..training import unused as fit"),
    "what a name is imported as": ("experiments/figa.py", "from . import _common", "from . import figb as _common"),
}


@pytest.mark.parametrize("what", sorted(RELATED))
def test_related_edit_changes_the_fingerprint(tree, what):
    h = fp(tree)
    edit(tree, *RELATED[what])
    assert fp(tree) != h, what


def test_other_figure_follows_its_own_code(tree):
    ha, hb = fp(tree), fp(tree, "iterlin.experiments.figb")
    edit(tree, "ntk.py", "return a - b", "return b - a")  # imported inside figb.compute
    assert fp(tree) == ha and fp(tree, "iterlin.experiments.figb") != hb
    hb = fp(tree, "iterlin.experiments.figb")
    edit(tree, "models.py", '"model"', '"net"')  # `from .. import models`; models.make()
    assert fp(tree) == ha and fp(tree, "iterlin.experiments.figb") != hb
    hb = fp(tree, "iterlin.experiments.figb")
    edit(tree, "experiments/figa.py", "return [1.0, 2.0]", "return [1.0, 5.0]")  # figb's load is figa's
    assert fp(tree) != ha and fp(tree, "iterlin.experiments.figb") != hb
    hb = fp(tree, "iterlin.experiments.figb")
    edit(tree, "sub/kernels.py", "tree_map(abs, x)", "tree_map(float, x)")  # `import iterlin.sub.kernels`
    assert fp(tree, "iterlin.experiments.figb") != hb


def test_moving_a_module_into_a_subpackage_is_seen(tree):
    h = fp(tree)
    (tree / "iterlin" / "ops").mkdir()
    (tree / "iterlin" / "ops" / "__init__.py").write_text("")
    shutil.move(tree / "iterlin" / "tree.py", tree / "iterlin" / "ops" / "tree.py")
    edit(tree, "training.py", "from .tree import", "from .ops.tree import")
    edit(tree, "sub/kernels.py", "from ..tree import", "from ..ops.tree import")
    h2 = fp(tree)
    assert h2 != h and "iterlin.ops.tree" in code_dependencies("iterlin.experiments.figa", ENTRY, root=tree)
    edit(tree, "ops/tree.py", "for v in x", "for v in tuple(x)")
    assert fp(tree) != h2


def test_module_used_as_a_value_is_hashed_whole(tree):
    edit(tree, "experiments/figa.py", '{"runs": _common.train_runs(config, _scale(data))}',
         '{"runs": _common.train_runs(config, _scale(data)), "m": str(_common)}')
    h = fp(tree)
    edit(tree, "experiments/_common.py", '"results: "', '"Results: "')
    assert fp(tree) != h


def test_star_import_and_module_level_mutation(tree):
    (tree / "iterlin" / "experiments" / "figs.py").write_text(textwrap.dedent("""
        from ._common import *

        REGISTRY = {}
        REGISTRY["lr"] = 0.1
        REGISTRY.update(steps=3)
        OTHER = {}
        OTHER["x"] = 1


        def compute(config, data):
            return train_runs({**config, **REGISTRY}, data)
    """))
    h = fp(tree, "iterlin.experiments.figs", ("compute",))
    edit(tree, "experiments/figs.py", 'REGISTRY["lr"] = 0.1', 'REGISTRY["lr"] = 0.2')
    h2 = fp(tree, "iterlin.experiments.figs", ("compute",))
    assert h2 != h
    edit(tree, "experiments/figs.py", "steps=3", "steps=4")
    h3 = fp(tree, "iterlin.experiments.figs", ("compute",))
    assert h3 != h2
    edit(tree, "experiments/figs.py", 'OTHER["x"] = 1', 'OTHER["x"] = 2')
    assert fp(tree, "iterlin.experiments.figs", ("compute",)) == h3
    edit(tree, "experiments/_common.py", 'lr=config["lr"]', "lr=config['lr']")  # train_runs via *
    assert fp(tree, "iterlin.experiments.figs", ("compute",)) != h3


def test_cycles_and_long_chains(tree):
    chain = "".join(f"def f{i}():\n    return f{i + 1}() + g()\n\n\n" for i in range(1200))
    (tree / "iterlin" / "experiments" / "figc.py").write_text(
        "from .figd import g\n\n\n" + chain + "def f1200():\n    return f0\n\n\ndef compute():\n    return f0()\n"
    )
    (tree / "iterlin" / "experiments" / "figd.py").write_text(
        "from .figc import compute\n\n\ndef g():\n    return compute\n"
    )
    h = fp(tree, "iterlin.experiments.figc", ("compute",))
    assert len(code_dependencies("iterlin.experiments.figc", ("compute",), root=tree)) == 1201 + 1 + 1 + 2
    edit(tree, "experiments/figd.py", "return compute", "return compute  # edited")
    assert fp(tree, "iterlin.experiments.figc", ("compute",)) != h


def test_bad_arguments(tree):
    with pytest.raises(ValueError, match="'claim'"):
        code_fingerprint("iterlin.experiments.figa", ("compute", "claim"), root=tree)
    with pytest.raises(ValueError, match="numpy"):
        code_fingerprint("numpy", ("sum",), root=tree)
    with pytest.raises(ValueError, match="figz"):
        code_fingerprint("iterlin.experiments.figz", ENTRY, root=tree)
    with pytest.raises(ValueError, match="entry_points"):
        code_fingerprint("iterlin.experiments.figa", "compute", root=tree)


# ----------------------------------------------------------------------------------------------
# The real package
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def real(tmp_path):
    root = tmp_path / "real"
    shutil.copytree(PACKAGE_DIR, root / "iterlin", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root


def _insert_in_function(path: Path, name: str, line: str) -> None:
    """Insert ``line`` as the first statement of top-level function ``name`` in ``path``."""
    text = path.read_text()
    fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)
    lines = text.splitlines(keepends=True)
    first = fn.body[0]
    lines.insert(first.lineno - 1, " " * first.col_offset + line + "\n")
    path.write_text("".join(lines))


def test_real_tree_training_fit(real):
    h = code_fingerprint("iterlin.training", ("fit",), root=real)
    assert h == code_fingerprint("iterlin.training", ("fit",))  # default root: the installed package
    pkg = real / "iterlin"
    for unrelated in ("plotting.py", "claims.py", "cache.py"):
        if (pkg / unrelated).exists():
            with open(pkg / unrelated, "a") as f:
                f.write("\nEDITED = True\n")
    with open(pkg / "training.py", "a") as f:  # a new function fit does not use
        f.write("\n\ndef _not_used_by_fit():\n    return 1\n")
    assert code_fingerprint("iterlin.training", ("fit",), root=real) == h
    _insert_in_function(pkg / "training.py", "fit", "_edited = True")
    h2 = code_fingerprint("iterlin.training", ("fit",), root=real)
    assert h2 != h
    assert "iterlin.tree" in code_dependencies("iterlin.training", ("fit",), root=real)
    with open(pkg / "tree.py", "a") as f:  # imported by training.py
        f.write("\n# edited\n")
    assert code_fingerprint("iterlin.training", ("fit",), root=real) != h2


def test_real_tree_experiment(real):
    pkg = real / "iterlin"
    if not (pkg / "experiments" / "fig3.py").is_file():
        pytest.skip("iterlin/experiments/fig3.py does not exist (yet)")
    module = "iterlin.experiments.fig3"
    h = code_fingerprint(module, ENTRY, root=real)
    deps = code_dependencies(module, ENTRY, root=real)
    assert f"{module}:compute" in deps
    # plots, claims and other figures are not part of it
    for unrelated in ("plotting.py", "experiments/fig2.py"):
        if (pkg / unrelated).exists() and unrelated.removesuffix(".py").replace("/", ".") not in str(deps):
            with open(pkg / unrelated, "a") as f:
                f.write("\nEDITED = True\n")
    if "def claims(" in (pkg / "experiments" / "fig3.py").read_text():
        _insert_in_function(pkg / "experiments" / "fig3.py", "claims", "_reworded = True")
    assert code_fingerprint(module, ENTRY, root=real) == h
    # the training loop is
    assert "iterlin.training" in deps
    with open(pkg / "training.py", "a") as f:
        f.write("\n# edited\n")
    h2 = code_fingerprint(module, ENTRY, root=real)
    assert h2 != h
    _insert_in_function(pkg / "experiments" / "fig3.py", "compute", "_edited = True")
    assert code_fingerprint(module, ENTRY, root=real) != h2
