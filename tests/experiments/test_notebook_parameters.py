"""iterlin.experiments.resolve_notebook: a notebook's config cell takes its parameters from its
globals, refuses every name it does not take (papermill only logs "Passed unknown parameter"), and
every count of every experiment has an upper bound stated in the message (issue 10, items 1 and 4).

Plain dicts stand in for a notebook's ``globals()``: no kernel, no papermill."""

from __future__ import annotations

import math

import numpy as np
import pytest

import iterlin.experiments as ex
from iterlin.experiments import notebook_parameters, resolve_notebook

NAMES = ex.names()


class _Autocall:
    """Like IPython's ``exit``/``quit``: a callable instance."""

    def __call__(self):
        pass


def _injected_cell(params) -> str:
    """The cell papermill injects for ``-p NAME VALUE`` (its Python translator's format)."""
    return "# Parameters\n" + "".join(f"{k} = {v!r}\n" for k, v in params.items())


def _kernel_globals(**params):
    """A notebook's globals in a kernel after papermill injected ``params``: the parameters, imports,
    IPython's names, ``_`` ones, and IPython's ``In`` history holding the injected cell."""
    return {
        "__name__": "__main__", "__builtins__": {}, "_": None, "__": None, "_i1": "import numpy as np", "_oh": {},
        "In": ["", "scale = 'smoke'\nK = None", _injected_cell(params), "import numpy as np"], "Out": {},
        "get_ipython": lambda: None, "exit": _Autocall(), "quit": _Autocall(),
        "np": np, "math": math, "ex": ex, "resolve_notebook": resolve_notebook, "Mapping": dict,
        **params,
    }


@pytest.mark.parametrize("name", NAMES)
def test_notebook_parameters_are_scale_and_the_experiments_knobs(name):
    keys = set(ex.get(name).scales["smoke"])
    assert notebook_parameters(name) == tuple(sorted(keys | {"scale"}))


@pytest.mark.parametrize("name", NAMES)
def test_a_notebooks_globals_resolve_like_resolve(name):
    params = {k: None for k in notebook_parameters(name) if k != "scale"}
    ns = _kernel_globals(scale="smoke", **params)
    assert resolve_notebook(name, ns) == ex.resolve(name, "smoke")
    assert resolve_notebook(name, _kernel_globals(scale="gpu")) == ex.resolve(name, "gpu")  # only scale set


def test_values_are_applied_and_checked():
    c = resolve_notebook("fig3", _kernel_globals(scale="smoke", K=5e6, steps=12.0, seed=3))
    assert c.K == (1, 5_000_000) and c.steps == 12 and c.seed == 3
    with pytest.raises(ValueError, match="steps=1e\\+20 is not allowed: steps must be an integer >= 1 and <= 2147483647"):
        resolve_notebook("fig3", _kernel_globals(scale="smoke", steps=1e20))


@pytest.mark.parametrize("name", NAMES)
def test_misspelt_and_unknown_names_are_refused_naming_each_and_listing_the_parameters(name):
    # `papermill ... -p step 50 -p foo 1` ran the defaults with exit 0
    ns = _kernel_globals(scale="smoke", step=50, foo=1)
    with pytest.raises(ValueError) as info:
        resolve_notebook(name, ns)
    msg = str(info.value)
    assert msg.startswith("foo=1, step=50 are not allowed:"), msg
    assert f"notebook {name} has no parameters 'foo', 'step'" in msg
    assert msg.endswith("its parameters are: " + ", ".join(notebook_parameters(name)))
    with pytest.raises(ValueError, match=r"^stepz=3 is not allowed: notebook .* has no parameter 'stepz'; its"):
        resolve_notebook(name, _kernel_globals(scale="smoke", stepz=3))


def test_unknown_names_are_refused_before_any_value_is_checked():
    with pytest.raises(ValueError, match="^foo=1 is not allowed"):
        resolve_notebook("fig3", _kernel_globals(scale="nope", steps=-1, foo=1))


def test_scale_is_required_and_checked():
    with pytest.raises(ValueError, match=r"scale is missing: notebook fig3's parameters cell must set scale"):
        resolve_notebook("fig3", _kernel_globals(K=3))
    with pytest.raises(ValueError, match=r"scale='huge' is not allowed"):
        resolve_notebook("fig3", _kernel_globals(scale="huge"))


def test_in_a_kernel_only_the_injected_names_count():
    # re-running the config cell after later cells bound config, results, a scalar f: not parameters
    ns = _kernel_globals(scale="smoke", K=5e6)
    ns.update(config={"K": 1}, results={"runs": 1}, f=2, i1=0)
    assert resolve_notebook("fig3", ns) == ex.resolve("fig3", K=5e6)
    # no papermill run at all (nbval, an interactive kernel): nothing was injected, nothing unknown
    ns["In"] = ["", "scale = 'smoke'", "import numpy as np"]
    assert resolve_notebook("fig3", ns) == ex.resolve("fig3", K=5e6)
    # the latest injected cell is the one that counts
    ns["In"] = ["", _injected_cell({"stepz": 1}), _injected_cell({"steps": 3})]
    ns["steps"] = 3
    assert resolve_notebook("fig3", ns).steps == 3


def test_a_plain_namespace_counts_every_parameter_like_global():
    ns = {"scale": "smoke", "config": {"K": 1}, "WIDTH": 3, "np": np, "_x": 1, "f": len}
    with pytest.raises(ValueError, match=r"^WIDTH=3, config=\{'K': 1\} are not allowed"):
        resolve_notebook("fig3", ns)
    assert resolve_notebook("fig3", {"scale": "smoke", "np": np, "_x": 1, "f": len}) == ex.resolve("fig3")


def test_unknown_experiment_and_a_namespace_that_is_not_a_mapping():
    with pytest.raises(ValueError, match="experiment='fig42' is not allowed"):
        resolve_notebook("fig42", {"scale": "smoke"})
    with pytest.raises(TypeError, match="globals"):
        resolve_notebook("fig3", [("scale", "smoke")])


# ----------------------------------------------------------------------------------------------
# Every count parameter of every notebook: bound, type
# ----------------------------------------------------------------------------------------------

COUNTS = ("steps", "epochs", "seed", "n_train", "n_test", "batch_size", "factor", "n_evals", "n_seeds",
          "n_functions", "n_relin", "max_relin", "gn_steps", "n_probe")
CASES = [(name, key) for name in NAMES for key in notebook_parameters(name) if key in COUNTS]


@pytest.mark.parametrize("name, key", CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_every_count_of_every_notebook_is_bounded_and_typed(name, key):
    huge = [(1e20, "1e+20"), (2**32, str(2**32)), (1e10, "10000000000.0") if key == "seed" else (3e9, "3000000000.0")]
    for bad, shown in huge:
        with pytest.raises(ValueError) as info:
            resolve_notebook(name, _kernel_globals(scale="smoke", **{key: bad}))
        msg = str(info.value)
        assert msg.startswith(f"{key}={shown}"), msg
        assert "is not allowed" in msg and "<= " in msg, msg
    for bad in ("abc", 2.5, True, -1):
        with pytest.raises(ValueError, match=f"^{key}=.* is not allowed: {key} must be"):
            resolve_notebook(name, _kernel_globals(scale="smoke", **{key: bad}))


ALL = [(name, key) for name in NAMES for key in notebook_parameters(name)]


@pytest.mark.parametrize("name, key", ALL, ids=[f"{n}-{k}" for n, k in ALL])
def test_every_parameter_of_every_notebook_refuses_a_wrong_type_naming_itself(name, key):
    for bad in ("abc", {"a": 1}, float("nan")):
        if key == "scale" and isinstance(bad, float):
            continue
        with pytest.raises((ValueError, TypeError)) as info:
            resolve_notebook(name, _kernel_globals(**{"scale": "smoke", key: bad}))
        assert str(info.value).startswith(f"{key}="), str(info.value)


def _parameters_cell(name: str) -> set[str]:
    """The names the parameters cell of ``notebooks/<name>.py`` (the cell tagged ``parameters``) assigns."""
    import ast
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "notebooks" / f"{name}.py").read_text(encoding="utf-8")
    cells = re.split(r"(?m)^# %%", text)
    cell = [c for c in cells if re.match(r'[^\n]*tags=\[[^\]]*"parameters"', c)]
    assert len(cell) == 1, f"notebooks/{name}.py has {len(cell)} cells tagged parameters"
    return {t.id for n in ast.parse(cell[0].split("\n", 1)[1]).body if isinstance(n, ast.Assign) for t in n.targets}


@pytest.mark.parametrize("name", NAMES)
def test_the_notebooks_parameters_cell_lists_every_knob(name):
    """A reader sees every knob of the experiment in its notebook's parameters cell (papermill's
    ``-p`` takes each of them), and the cell sets nothing else."""
    assert _parameters_cell(name) == set(notebook_parameters(name))
