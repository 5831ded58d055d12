"""The notebooks' parameters: what papermill sees, and what each experiment takes.

Papermill infers a notebook's parameters from its cell tagged ``parameters`` and skips a line it
cannot parse (e.g. one whose comment contains a second ``=``): such a parameter is missing from
``papermill --help-notebook`` and ``-p NAME VALUE`` warns "unknown parameter" although the value is
applied, which teaches users to ignore the warning that catches misspelt names. So papermill must
list every assignment of every parameters cell, and each must be a parameter of its experiment.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import papermill
import pytest

from iterlin.experiments import names, notebook_parameters

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
PAIRS = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))


def _parameters_cell(stem: str) -> str:
    nb = json.loads((NOTEBOOKS / f"{stem}.ipynb").read_text(encoding="utf-8"))
    cells = [c for c in nb["cells"] if "parameters" in (c.get("metadata", {}).get("tags") or [])]
    assert len(cells) == 1, f"{stem}.ipynb must have exactly one cell tagged 'parameters'"
    src = cells[0]["source"]
    return "".join(src) if isinstance(src, list) else src


def _assigned(source: str) -> list[str]:
    return [t.id for node in ast.parse(source).body if isinstance(node, ast.Assign) for t in node.targets
            if isinstance(t, ast.Name)]


def test_every_notebook_is_an_experiment():
    assert PAIRS and set(PAIRS) == set(names())


@pytest.mark.parametrize("stem", PAIRS)
def test_papermill_lists_every_parameter(stem):
    assigned = _assigned(_parameters_cell(stem))
    listed = papermill.inspect_notebook(str(NOTEBOOKS / f"{stem}.ipynb"))
    assert list(listed) == assigned, f"papermill --help-notebook {stem}.ipynb lists {list(listed)}"
    for name, info in listed.items():
        assert info["help"], f"{stem}: parameter {name} has no help text (its comment)"


@pytest.mark.parametrize("stem", PAIRS)
def test_parameters_cell_names_are_the_experiments(stem):
    assigned = _assigned(_parameters_cell(stem))
    assert "scale" in assigned
    unknown = set(assigned) - set(notebook_parameters(stem))
    assert not unknown, f"{stem}: parameters cell sets {sorted(unknown)}, which the experiment does not take"


@pytest.mark.parametrize("stem", PAIRS)
def test_py_and_ipynb_parameters_cells_agree(stem):
    py = (NOTEBOOKS / f"{stem}.py").read_text(encoding="utf-8")
    start = py.index('# %% tags=["parameters"]\n') + len('# %% tags=["parameters"]\n')
    end = py.index("# %%", start)
    assert _assigned(py[start:end]) == _assigned(_parameters_cell(stem))


def test_papermill_refuses_a_misspelt_parameter_in_the_config_cell(tmp_path):
    """``-p step 50`` (for steps) used to run the defaults with exit 0: papermill only logs it."""
    with pytest.raises(papermill.PapermillExecutionError) as info:
        papermill.execute_notebook(str(NOTEBOOKS / "fig3.ipynb"), str(tmp_path / "out.ipynb"),
                                   parameters={"step": 50}, progress_bar=False, log_output=False,
                                   kernel_name="python3")
    assert "step=50 is not allowed: notebook fig3 has no parameter 'step'" in str(info.value)
    out = json.loads((tmp_path / "out.ipynb").read_text(encoding="utf-8"))
    failed = [c for c in out["cells"] if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    assert len(failed) == 1 and "resolve_notebook" in "".join(failed[0]["source"])  # the config cell, nothing run


def _code_cells(stem: str) -> list[str]:
    nb = json.loads((NOTEBOOKS / f"{stem}.ipynb").read_text(encoding="utf-8"))
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("stem", PAIRS)
def test_reference_cells_are_not_compared_by_nbval(stem):
    """The reference-run cell prints whether the library changed since that run, which changes apart
    from the notebook: nbval must skip its output. nbval only honours a comment that is exactly its
    marker (``# NBVAL_IGNORE_OUTPUT (why)`` is silently compared), so ask nbval itself."""
    from nbval.plugin import find_comment_markers

    cells = [src for src in _code_cells(stem) if "reference.show(" in src]
    assert cells, f"{stem}.ipynb has no reference-run cell"
    for src in cells:
        assert ("check", False) in list(find_comment_markers(src)), f"{stem}: nbval compares\n{src}"


def test_nbval_sanitizer_hides_digits_not_verdicts():
    """notebooks/nbval_sanitize.cfg (passed by the Makefile): outputs that differ only in their numbers
    and padding (smoke numbers depend on the CPU) compare equal; a changed verdict or word does not."""
    import re

    from nbval.plugin import get_sanitize_patterns

    patterns = get_sanitize_patterns((NOTEBOOKS / "nbval_sanitize.cfg").read_text(encoding="utf-8"))
    assert patterns, "no sanitize patterns read"

    def sanitize(s):
        for regex, replace in patterns:
            s = re.sub(regex, replace, s)
        return s

    amd = ("claim      this run                                     holds\n-------    ----------------------------  ---------\n"
           "on par     K=1: 20.0 %; Δ -2.5 pts [-9.5, +4.5]         undecided\n")
    intel = ("claim      this run                                      holds\n-------    -----------------------------  ---------\n"
             "on par     K=1: 25.5 %; Δ -8.0 pts [-15.6, -0.4]         undecided\n")
    assert sanitize(amd) == sanitize(intel)
    assert sanitize(amd) != sanitize(amd.replace("undecided", "no       "))
    assert sanitize(amd) != sanitize(amd.replace("on par", "better"))
