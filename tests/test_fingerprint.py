"""Per-experiment code fingerprints: they follow the normalised code a figure's compute reaches, and only that.

Most tests build a small synthetic package tree in ``tmp_path`` (the layout of ``iterlin``: core
modules, a subpackage, ``experiments/`` with ``_common`` and two figures), edit one file and compare
fingerprints both ways: an edit that cannot change what runs (a docstring, a comment, a renamed
local, a move, a plot, a claim) keeps it; one that can (an operator, a constant, a called function's
body, a model's fields, what a name is imported as) changes it. The last ones do the same on a copy
of the real package.
"""

from __future__ import annotations

import ast
import shutil
import textwrap
import types
from pathlib import Path

import pytest

from iterlin.repro.fingerprint import PACKAGE_DIR, code_dependencies, code_fingerprint, normalised_source

ENTRY = ("compute", "load")

TREE = {
    "__init__.py": """
        from . import training
        from .training import fit
    """,
    "tree.py": """
        def tree_map(f, x):
            \"\"\"Map ``f`` over ``x``.\"\"\"
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
        \"\"\"Training.\"\"\"

        import math

        from .tree import tree_map

        SCALE = 2.0


        def fit(x, lr=0.1):
            \"\"\"Fit: eq. (3).\"\"\"
            from .validate import check
            step = lr * SCALE  # the step
            return tree_map(lambda v: check(v) - step, x)


        def unused():
            return 0


        def _helper(values: list) -> float:
            total = 0.0
            for value in values:
                total += math.sqrt(value)
            return total
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
        import flax.linen as nn


        class Net(nn.Module):
            \"\"\"A model.\"\"\"

            features: int = 8
            depth: int = 2

            @nn.compact
            def __call__(self, x):
                for _ in range(self.depth):
                    x = nn.Dense(self.features)(x)
                return nn.relu(x)


        def make():
            return Net()
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
        from ..training import _helper, fit


        def train_runs(config, data):
            return fit(kernels.kernel(data), lr=config["lr"]) + [_helper(data)]


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
# Normal forms
# ----------------------------------------------------------------------------------------------

SAME = {
    "docstrings, comments and layout": (
        'def f(x, n=2):\n    """Doc."""\n    y = x ** n  # square\n    return y\n',
        "def f(x, n=2):\n    y = (x **\n         n)\n\n    return y\n",
    ),
    "renamed locals, loop and with targets, an except name": (
        "def f(xs):\n    acc = 0\n    for v in xs:\n        with open(v) as fh:\n            acc += len(fh.read())\n"
        "    try:\n        pass\n    except OSError as e:\n        raise ValueError(acc) from e\n    return acc\n",
        "def f(xs):\n    total = 0\n    for item in xs:\n        with open(item) as g:\n            total += len(g.read())\n"
        "    try:\n        pass\n    except OSError as err:\n        raise ValueError(total) from err\n    return total\n",
    ),
    "a closure's and a comprehension's locals": (
        "def f(a):\n    s = 2\n    def g(b):\n        return [s * b * i for i in range(a)]\n    return g\n",
        "def f(a):\n    k = 2\n    def inner(b):\n        return [k * b * j for j in range(a)]\n    return inner\n",
    ),
    "function annotations": (
        "def f(x: int, *rest: float) -> list:\n    y: int = x\n    return [y, *rest]\n",
        "def f(x: 'Array', *rest) -> 'list[Array]':\n    y = x\n    return [y, *rest]\n",
    ),
    "an f-string written in pieces": ("def f(x):\n    return f'a{x:.1f}b' 'c'\n", "def f(x):\n    return f'a{x:.1f}bc'\n"),
    "an error's message": (
        "def f(x):\n    if x < 0:\n        raise ValueError(f'x={x!r} is not allowed: see iterlin.repro.config')\n    return x\n",
        "def f(x):\n    if x < 0:\n        raise ValueError(f'{x} must be >= 0 (iterlin.repro.config)', x)\n    return x\n",
    ),
}

DIFFERENT = {
    "an operator": ("def f(x):\n    return x - 1\n", "def f(x):\n    return x + 1\n"),
    "a constant": ("def f(x):\n    return x * 0.5\n", "def f(x):\n    return x * 0.25\n"),
    "operands swapped": ("def f(a, b):\n    return a - b\n", "def f(a, b):\n    return b - a\n"),
    "a parameter's name (callers may pass it by keyword)": ("def f(x, lr):\n    return x - lr\n",
                                                            "def f(x, eta):\n    return x - eta\n"),
    "a local made a global": ("def f(x):\n    y = x\n    return y\n", "def f(x):\n    y = x\n    return Y\n"),
    "which global is declared": ("def f():\n    global A\n    A = 1\n", "def f():\n    global B\n    B = 1\n"),
    "the error raised": ("def f(x):\n    if x < 0:\n        raise ValueError('no')\n    return x\n",
                         "def f(x):\n    if x < 0:\n        raise TypeError('no')\n    return x\n"),
    "when an error is raised": ("def f(x):\n    if x < 0:\n        raise ValueError('no')\n    return x\n",
                                "def f(x):\n    if x <= 0:\n        raise ValueError('no')\n    return x\n"),
    "a class's field": ("class M:\n    features: int = 8\n", "class M:\n    features: int = 16\n"),
    "a class field's annotation": ("class M:\n    features: int = 8\n", "class M:\n    features: float = 8\n"),
    "a shadowing inner local made a closure": (
        "def f(a):\n    s = 1\n    def g():\n        s = 2\n        return s\n    return g() + s\n",
        "def f(a):\n    s = 1\n    def g():\n        t = 2\n        return s\n    return g() + s\n",
    ),
}


@pytest.mark.parametrize("what", sorted(SAME))
def test_normal_form_ignores_what_cannot_change_behaviour(what):
    a, b = SAME[what]
    assert normalised_source(a) == normalised_source(b), what


@pytest.mark.parametrize("what", sorted(DIFFERENT))
def test_normal_form_keeps_what_can_change_behaviour(what):
    a, b = DIFFERENT[what]
    assert normalised_source(a) != normalised_source(b), what


def test_normal_form_has_no_positions_and_renames_only_locals():
    text = normalised_source("import jax\n\n\ndef f(x, n=N):\n    y = jax.numpy.sum(x) * n\n    return y\n")
    assert "lineno" not in text and "col_offset" not in text
    assert "'jax'" in text and "'N'" in text and "'y'" not in text  # globals kept, the local renamed
    assert "arg='x'" in text and "arg='n'" in text  # the signature keeps its names


# ----------------------------------------------------------------------------------------------
# What is reached
# ----------------------------------------------------------------------------------------------


def test_dependencies_of_a_figure(tree):
    assert code_dependencies("iterlin.experiments.figa", ENTRY, root=tree) == [
        "iterlin.experiments._common:train_runs",
        "iterlin.experiments.figa:STEPS",
        "iterlin.experiments.figa:_scale",
        "iterlin.experiments.figa:_traced",
        "iterlin.experiments.figa:compute",
        "iterlin.experiments.figa:load",
        "iterlin.sub.kernels:kernel",
        "iterlin.training:SCALE",
        "iterlin.training:_helper",
        "iterlin.training:fit",
        "iterlin.tree:tree_map",
        "iterlin.validate:check",
    ]
    assert code_dependencies("iterlin.experiments.figb", ENTRY, root=tree) == [
        "iterlin.experiments.figa:load",
        "iterlin.experiments.figb:compute",
        "iterlin.models:Net",
        "iterlin.models:make",
        "iterlin.ntk:kernel_distance",  # flat-layout
        "iterlin.sub.kernels:kernel",
        "iterlin.training:SCALE",
        "iterlin.training:fit",
        "iterlin.tree:tree_map",
        "iterlin.validate:check",
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


def test_the_same_on_every_machine_and_python(tree):
    """Pinned: the serialisation is our own (no positions, no ``ast.dump``), so this value is the
    same on every machine and Python >= 3.10. A deliberate change of the normal form or of the
    records changes every key: bump ``_VERSION`` and update this value in the same commit."""
    assert fp(tree) == "69ed9f31146071001ca8ffba016f28ead35ac297aa7abef0f289c0303ffc825f"


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
    "another figure's model": ("models.py", "features: int = 8", "features: int = 16"),
    "an unused helper in _common": ("experiments/_common.py", '"results: "', '"Results: "'),
    "the experiments registry": ("experiments/__init__.py", "return exp.compute", "return exp.compute"
                                 "  # run"),
    "an unused function in the figure": ("experiments/figa.py", "return plot(results)", "return plot(results or {})"),
    "an unused function of a core module it uses": ("training.py", "return 0", "return 1"),
    "a comment outside the definitions": ("experiments/figa.py", "def load(config):",
                                          "# loading\n# -------\n\n\ndef load(config):"),
    "a comment inside compute": ("experiments/figa.py", "def compute(config, data):",
                                 "def compute(config, data):  # the training"),
    "a comment inside a core function": ("training.py", "# the step", "# the step, eq. (4)"),
    "the module docstring": ("experiments/figa.py", '"""Figure A."""', '"""Figure A, reworded."""'),
    "a core module's docstring": ("training.py", '"""Training."""', '"""Training loops."""'),
    "a reached function's docstring": ("training.py", '"""Fit: eq. (3)."""', '"""Fit, eq. (3) of the paper."""'),
    "a docstring added": ("validate.py", "def check(x):\n", 'def check(x):\n    """Check ``x``."""\n'),
    "an unused import": ("experiments/figa.py", "from ..plotting import plot", "from ..plotting import plot\n"
                         "from .. import models"),
    "the package __init__": ("__init__.py", "from .training import fit", "from .training import fit, unused"),
    "a renamed local": ("training.py", "step = lr * SCALE  # the step\n    return tree_map(lambda v: check(v) - step, x)",
                        "delta = lr * SCALE\n    return tree_map(lambda v: check(v) - delta, x)"),
    "a renamed loop variable": ("training.py", "for value in values:\n        total += math.sqrt(value)",
                                "for v in values:\n        total += math.sqrt(v)"),
    "a renamed comprehension variable": ("tree.py", "[f(v) for v in x]", "[f(item) for item in x]"),
    "reformatted code": ("training.py", "step = lr * SCALE", "step = (lr *\n            SCALE)"),
    "annotations": ("training.py", "def _helper(values: list) -> float:", 'def _helper(values: "Sequence[float]"):'),
    "definitions reordered": ("training.py", "def unused():\n    return 0\n", ""),  # completed in the test
}


@pytest.mark.parametrize("what", sorted(UNRELATED))
def test_unrelated_edit_keeps_the_fingerprint(tree, what):
    h = fp(tree)
    edit(tree, *UNRELATED[what])
    if what == "definitions reordered":
        edit(tree, "training.py", "SCALE = 2.0\n", "SCALE = 2.0\n\n\ndef unused():\n    return 0\n")
        edit(tree, "training.py", "import math\n\nfrom .tree import tree_map\n",
             "from .tree import tree_map\nimport math\n")
    assert fp(tree) == h, what


def test_a_definition_moved_to_another_module_keeps_the_fingerprint(tree):
    h = fp(tree)
    helper = "def _helper(values: list) -> float:\n    total = 0.0\n    for value in values:\n" \
             "        total += math.sqrt(value)\n    return total\n"
    edit(tree, "training.py", "\n\n" + helper, "\n")
    with open(tree / "iterlin" / "tree.py", "a") as f:
        f.write("\n\nimport math\n\n\n" + helper)
    edit(tree, "experiments/_common.py", "from ..training import _helper, fit",
         "from ..training import fit\nfrom ..tree import _helper")
    assert "iterlin.tree:_helper" in code_dependencies("iterlin.experiments.figa", ENTRY, root=tree)
    assert fp(tree) == h
    edit(tree, "tree.py", "math.sqrt(value)", "math.sqrt(value + 1)")  # and it is still followed there
    assert fp(tree) != h


def test_a_renamed_global_keeps_the_fingerprint(tree):
    """A module-level name renamed everywhere it is used (as a split into modules does, when a private
    helper becomes public) is no change: what a name refers to is hashed, not the name."""
    h = fp(tree)
    edit(tree, "training.py", "def _helper(values", "def sum_of_roots(values")
    edit(tree, "experiments/_common.py", "from ..training import _helper, fit", "from ..training import fit, sum_of_roots")
    edit(tree, "experiments/_common.py", "[_helper(data)]", "[sum_of_roots(data)]")
    assert fp(tree) == h
    edit(tree, "training.py", "SCALE = 2.0", "STEP_SCALE = 2.0")  # a constant, in its definition and its use
    edit(tree, "training.py", "lr * SCALE", "lr * STEP_SCALE")
    assert fp(tree) == h
    edit(tree, "training.py", "import math", "import math as m")  # an alias of an outside module
    edit(tree, "training.py", "math.sqrt", "m.sqrt")
    assert fp(tree) == h
    edit(tree, "experiments/figa.py", "_common.train_runs(", "train_runs(")  # a member, not through its module
    edit(tree, "experiments/figa.py", "from ._common import describe", "from ._common import describe, train_runs")
    assert fp(tree) == h
    edit(tree, "training.py", "STEP_SCALE = 2.0", "STEP_SCALE = 2.5")  # and the renamed code is followed
    assert fp(tree) != h


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
    "a referenced helper": ("experiments/figa.py", "v * factor", "v * factor + 0"),
    "a constant in a default argument": ("experiments/figa.py", "STEPS = 3", "STEPS = 4"),
    "a decorator": ("experiments/figa.py", "def _traced(f):\n    return f", "def _traced(f):\n    f.x = 1\n    return f"),
    "the helper in _common that compute uses": ("experiments/_common.py", 'lr=config["lr"]', 'lr=config["LR"]'),
    "an operator in a core function": ("training.py", "check(v) - step", "check(v) + step"),
    "a core module's constant": ("training.py", "SCALE = 2.0", "SCALE = 2.5"),
    "a default argument of a core function": ("training.py", "lr=0.1", "lr=0.2"),
    "a parameter's name": ("training.py", "def fit(x, lr=0.1):", "def fit(x, lr=0.1, *, extra=None):"),
    "a function reached transitively": ("tree.py", "for v in x]", "for v in x if v]"),
    "a function imported inside a function": ("validate.py", "return x", "return +x"),
    "a function in a subpackage": ("sub/kernels.py", "tree_map(abs, x)", "tree_map(float, x)"),
    "what _common imports as fit": ("experiments/_common.py", "from ..training import _helper, fit",
                                    "from ..training import _helper, unused as fit"),
    "what a module name is bound to": ("experiments/figa.py", "from . import _common", "from . import figb as _common"),
    "an outside module": ("training.py", "import math", "import cmath as math"),
    "a local made a global": ("training.py", "total += math.sqrt(value)", "total += math.sqrt(SCALE)"),
}


@pytest.mark.parametrize("what", sorted(RELATED))
def test_related_edit_changes_the_fingerprint(tree, what):
    h = fp(tree)
    edit(tree, *RELATED[what])
    assert fp(tree) != h, what


MODEL_EDITS = {
    "a field's default": ("features: int = 8", "features: int = 16"),
    "a new field": ("depth: int = 2", "depth: int = 2\n    use_bias: bool = True"),
    "the module's body": ("nn.relu(x)", "nn.gelu(x)"),
    "a decorator in it": ("@nn.compact\n    ", ""),
}


@pytest.mark.parametrize("what", sorted(MODEL_EDITS))
def test_a_flax_module_is_followed_whole(tree, what):
    h = fp(tree, "iterlin.experiments.figb")
    edit(tree, "models.py", *MODEL_EDITS[what])
    assert fp(tree, "iterlin.experiments.figb") != h, what


def test_other_figure_follows_its_own_code(tree):
    ha, hb = fp(tree), fp(tree, "iterlin.experiments.figb")
    edit(tree, "ntk.py", "return a - b", "return b - a")  # imported inside figb.compute
    assert fp(tree) == ha and fp(tree, "iterlin.experiments.figb") != hb
    hb = fp(tree, "iterlin.experiments.figb")
    edit(tree, "models.py", "return Net()", "return Net(features=4)")  # `from .. import models`; models.make()
    assert fp(tree) == ha and fp(tree, "iterlin.experiments.figb") != hb
    hb = fp(tree, "iterlin.experiments.figb")
    edit(tree, "experiments/figa.py", "return [1.0, 2.0]", "return [1.0, 5.0]")  # figb's load is figa's
    assert fp(tree) != ha and fp(tree, "iterlin.experiments.figb") != hb
    hb = fp(tree, "iterlin.experiments.figb")
    edit(tree, "sub/kernels.py", "tree_map(abs, x)", "tree_map(float, x)")  # `import iterlin.sub.kernels`
    assert fp(tree, "iterlin.experiments.figb") != hb


def test_a_module_split_into_a_package_with_reexports(tree):
    """training.py becomes training/ (a package re-exporting from its submodules): nothing moved
    changes, and the moved code is still followed."""
    h = fp(tree)
    text = (tree / "iterlin" / "training.py").read_text()
    (tree / "iterlin" / "training.py").unlink()
    pkg = tree / "iterlin" / "training"
    pkg.mkdir()
    (pkg / "loop.py").write_text(text.replace("from .tree", "from ..tree").replace("from .validate", "from ..validate"))
    (pkg / "__init__.py").write_text("from .loop import *\nfrom .loop import _helper\n")
    assert fp(tree) == h
    edit(tree, "training/loop.py", "SCALE = 2.0", "SCALE = 3.0")
    assert fp(tree) != h


def test_module_used_as_a_value_is_hashed_whole(tree):
    edit(tree, "experiments/figa.py", '{"runs": _common.train_runs(config, _scale(data))}',
         '{"runs": _common.train_runs(config, _scale(data)), "m": str(_common)}')
    h = fp(tree)
    assert "iterlin.experiments._common" in code_dependencies("iterlin.experiments.figa", ENTRY, root=tree)
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


        if __name__ == "__main__":
            REGISTRY.update(steps=5)
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
    edit(tree, "experiments/figs.py", "steps=5", "steps=6")  # only when run as a script
    assert fp(tree, "iterlin.experiments.figs", ("compute",)) == h3
    edit(tree, "experiments/_common.py", 'lr=config["lr"]', 'lr=config["LR"]')  # train_runs via *
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
    assert len(code_dependencies("iterlin.experiments.figc", ("compute",), root=tree)) == 1201 + 1 + 1
    edit(tree, "experiments/figd.py", "return compute", "return compute()")
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
    """Insert ``line`` as the first statement (after a docstring) of top-level function ``name``."""
    text = path.read_text()
    fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)
    lines = text.splitlines(keepends=True)
    first = fn.body[1] if ast.get_docstring(fn) is not None and len(fn.body) > 1 else fn.body[0]
    lines.insert(first.lineno - 1, " " * first.col_offset + line + "\n")
    path.write_text("".join(lines))


def _reword_docstrings(path: Path) -> int:
    """Prefix every docstring of ``path`` (module, classes, functions, methods) with "Edited. "."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    count = 0
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(node) is not None:
            doc = node.body[0].value
            line = lines[doc.lineno - 1]
            col = doc.col_offset
            while line[col] in "rRuU":
                col += 1
            col += 3 if line[col : col + 3] in ('"""', "'''") else 1
            lines[doc.lineno - 1] = line[:col] + "Edited. " + line[col:]
            count += 1
    path.write_text("".join(lines))
    return count


def _first_function(deps: list[str], module: str) -> str:
    return next(d.split(":")[1] for d in deps if d.startswith(module + ":") and d.split(":")[1][0].islower())


def test_real_tree_training_fit(real):
    h = code_fingerprint("iterlin.training", ("fit",), root=real)
    assert h == code_fingerprint("iterlin.training", ("fit",))  # default root: the installed package
    deps = code_dependencies("iterlin.training", ("fit",), root=real)
    pkg = real / "iterlin"
    for unrelated in ("repro/plotting.py", "repro/claims.py", "repro/cache.py"):
        assert (pkg / unrelated).is_file(), unrelated
        with open(pkg / unrelated, "a") as f:
            f.write("\n\ndef _edited():\n    return 1\n\nEDITED = True\n")
    with open(pkg / "training" / "_loop.py", "a") as f:  # a new function fit does not use
        f.write("\n\ndef _not_used_by_fit():\n    return 1\n")
    reworded = sum(_reword_docstrings(path) for path in (pkg / "training").glob("*.py"))
    assert reworded > 10 and _reword_docstrings(pkg / "tree.py") > 3
    assert code_fingerprint("iterlin.training", ("fit",), root=real) == h
    _insert_in_function(pkg / "training" / "_loop.py", "fit", "_edited = True")
    h2 = code_fingerprint("iterlin.training", ("fit",), root=real)
    assert h2 != h
    _insert_in_function(pkg / "tree.py", _first_function(deps, "iterlin.tree"), "_edited = True")
    assert code_fingerprint("iterlin.training", ("fit",), root=real) != h2


def test_real_tree_experiment(real):
    """fig3's key: its plot, the shared plotting helpers, claims, the result cache and other figures
    are not in it; the training loop is."""
    pkg = real / "iterlin"
    module = "iterlin.experiments.fig3"
    h = code_fingerprint(module, ENTRY, root=real)
    deps = code_dependencies(module, ENTRY, root=real)
    assert f"{module}:compute" in deps and "iterlin.training._loop:fit" in deps
    assert not [d for d in deps if d.startswith(("iterlin.repro.plotting", "iterlin.repro.claims", "iterlin.experiments.fig2"))]
    for rel, mod in [("repro/plotting.py", "iterlin.repro.plotting"), ("repro/claims.py", "iterlin.repro.claims"),
                     ("repro/cache.py", "iterlin.repro.cache"),
                     ("experiments/fig2.py", "iterlin.experiments.fig2")]:
        tree = ast.parse((pkg / rel).read_text())
        for fn in [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]:
            if f"{mod}:{fn}" not in deps:  # every function of it that fig3 does not reach
                _insert_in_function(pkg / rel, fn, "_edited = True")
    _insert_in_function(pkg / "experiments" / "fig3.py", "claims", "_reworded = True")
    _insert_in_function(pkg / "experiments" / "fig3.py", "plot", "_edited = True")  # a colour changed
    for rel in ("training/_loop.py", "training/_steps.py", "experiments/fig3.py", "experiments/_common.py",
                "models.py", "data/cifar10.py"):
        _reword_docstrings(pkg / rel)
    assert code_fingerprint(module, ENTRY, root=real) == h
    _insert_in_function(pkg / "training" / "_loop.py", "fit", "_edited = True")
    h2 = code_fingerprint(module, ENTRY, root=real)
    assert h2 != h
    _insert_in_function(pkg / "experiments" / "fig3.py", "compute", "_edited = True")
    assert code_fingerprint(module, ENTRY, root=real) != h2


def test_no_figure_key_follows_its_plot():
    """Compute and plotting stay apart in every figure: the code its key follows reaches neither its
    module's ``plot`` nor :mod:`iterlin.repro.plotting`, so a change to a plot recomputes nothing."""
    from iterlin.experiments import get, names

    for name in names():
        exp = get(name)
        module, home = exp.module, exp.compute.__module__  # (ceflow_confirm's compute is ceflow's)
        deps = code_dependencies(module, ENTRY)
        assert f"{home}:compute" in deps, name
        drawn = [d for d in deps if d in (f"{module}:plot", f"{home}:plot") or d.startswith("iterlin.repro.plotting:")]
        assert not drawn, f"{name}'s key follows {drawn}"

