"""The notebooks' parameters: what papermill sees, and what each experiment takes.

Papermill infers a notebook's parameters from its cell tagged ``parameters`` and skips a line it
cannot parse (e.g. one whose comment contains a second ``=``): such a parameter is missing from
``papermill --help-notebook`` and ``-p NAME VALUE`` warns "unknown parameter" although the value is
applied, which teaches users to ignore the warning that catches misspelt names. So papermill must
list every assignment of every parameters cell, and each must be a parameter of its experiment.

And nbval's comparison of the stored outputs (``notebooks/conftest.py``, ``nbval_sanitize.cfg``):
the plain ``pytest --nbval`` passes on outputs another machine stored and fails on a regression.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import papermill
import pytest

from iterlin.experiments import names, notebook_parameters

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
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
    import re

    py = (NOTEBOOKS / f"{stem}.py").read_text(encoding="utf-8")
    start = re.search(r'^# %% tags=\[[^\]]*"parameters"[^\]]*\]\n', py, flags=re.M).end()
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

    cells = [src for src in _code_cells(stem) if "reference.show" in src]
    assert cells, f"{stem}.ipynb has no reference-run cell"
    for src in cells:
        assert ("check", False) in list(find_comment_markers(src)), f"{stem}: nbval compares\n{src}"


@pytest.mark.parametrize("stem", PAIRS)
def test_a_figure_page_opens_with_its_reference_figure_and_verdict(stem):
    """The page shows the title, then the reference run's plot and verdict (its code removed), then
    the explanation with each scale's settings folded; the parameters and imports are collapsed
    (jupyter-book's hide-cell), still run by papermill and nbval (the ``parameters`` tag kept)."""
    nb = json.loads((NOTEBOOKS / f"{stem}.ipynb").read_text(encoding="utf-8"))
    cells = nb["cells"]

    def src(c):
        return "".join(c["source"]) if isinstance(c["source"], list) else c["source"]

    def tags(c):
        return c.get("metadata", {}).get("tags") or []

    title = src(cells[0]).strip()
    assert cells[0]["cell_type"] == "markdown" and title.startswith("# ") and "\n" not in title
    first = next(i for i, c in enumerate(cells) if "remove-input" in tags(c) or c["cell_type"] == "markdown" and i)
    shown_before = cells[1:first]
    assert all(c["cell_type"] == "code" and "hide-cell" in tags(c) for c in shown_before), stem
    assert "parameters" in tags(shown_before[0])
    ref = cells[first]
    assert "remove-input" in tags(ref) and "reference.show(" in src(ref) and "table=False" in src(ref)
    outputs = ref.get("outputs", [])
    if not (REPO / "results" / stem).is_dir():  # no committed run yet: the page says so, in its place
        assert ["".join(o.get("text", "")) for o in outputs] == ["No reference run is committed yet: make results "
                                                                 "SCALE=cpu\n"], (stem, outputs)
        return
    kinds = [("image" if any(k.startswith("image/") for k in o.get("data", {})) else
              "verdict" if "Verdict of the reference run" in "".join(o.get("data", {}).get("text/plain", "")) else
              o.get("output_type")) for o in outputs]
    # the plot (its figures, and what it prints beside them), then the verdict, then the provenance
    k = kinds.index("verdict") if "verdict" in kinds else 0
    assert k > 0 and kinds[0] == "image" and "verdict" not in kinds[k + 1:], (stem, kinds)
    assert "".join(outputs[k + 1].get("text", "")).startswith("Reference run: "), stem
    explanation = src(cells[first + 1])
    assert cells[first + 1]["cell_type"] == "markdown"
    assert "<details>" in explanation and "<summary>What each scale runs" in explanation


# --- nbval's comparison (notebooks/conftest.py, notebooks/nbval_sanitize.cfg) -------------------
#
# The plain `pytest --nbval notebooks/` must pass on any machine and fail when behaviour changes.
# A synthetic notebook shows a claims table (rendered by iterlin.repro.claims, text and HTML, as the
# figure notebooks' last cells do) and writes to standard error; its stored outputs are made by
# running it with other values (another machine's numbers, a planted regression), then nbval runs
# it, collected from a folder holding copies of notebooks/conftest.py and nbval_sanitize.cfg, with
# no option: what the plain command does.


def _table(K1="25.5 %", delta="-8.0", interval="[-15.6, -0.4]", verdict="undecided", claim="large K on par with K = 1",
           check="yes", distance="0", tol="0.05"):
    from iterlin.repro.claims import Claim, ClaimsTable

    rows = [
        Claim(claim, "82.3 % vs 81.4 %", f"K=1: {K1}; K=3: 17.5 %; Δ {delta} pts, 2 s.e. interval {interval}",
              verdict, "on par: the 2 s.e. interval of Δ inside ±1 pts; 'no' when wholly outside; else undecided"),
        Claim("every run stays finite (no NaN or exploding loss)", "no divergence reported", "none diverged", "yes",
              "a diverged run is frozen at its last finite state"),
        Claim("between re-linearisations the linear model's kernel is fixed", "constant for K steps (Eq. 4)",
              f"K=3: max d = {distance} over 6 intervals", check, f"< {tol} at every such interval", kind="check"),
    ]
    t = ClaimsTable("toy", "smoke", rows)
    return {"text/plain": str(t), "text/html": t._repr_html_()}


CONFIG = "experiment=toy, scale=smoke, K=[1, 3], lr=0.05, steps=24"


def _synthetic(table: dict, *, config=CONFIG, stderr="step 12/24 (50 %), 3.1 steps/s", fail=False,
               panels=2, curves=2, y=0.5) -> "nbformat.NotebookNode":
    """A small notebook as the real ones print: the config line, progress on stderr, a figure
    (``panels`` panels of ``curves`` curves, through iterlin.repro.plotting's summary), a claims table."""
    import nbformat

    cells = [
        f"print({config!r})",
        f"import sys\nprint({stderr!r}, file=sys.stderr)",
        "import matplotlib.pyplot as plt\nimport iterlin.repro.plotting\n"
        f"fig, axes = plt.subplots(1, {panels}, figsize=(6, 2), squeeze=False)\n"
        f"for ax in axes[0]:\n    for c in range({curves}):\n        ax.plot([0, 1, 2], [{y}, c, float('nan')])\n"
        "plt.show()",
        f"from IPython.display import display\ndisplay({table!r}, raw=True)" + ("\n1 / 0" if fail else ""),
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def _stored(nb, executed) -> "nbformat.NotebookNode":
    """``nb``'s cells with the outputs ``executed`` produced (as a run of ``executed`` stores them)."""
    for cell, out in zip(nb.cells, executed.cells):
        cell.outputs, cell.execution_count = out.outputs, out.execution_count
    return nb


def _nbval(folder: Path) -> tuple[dict[str, bool], str]:
    """Run the plain ``pytest --nbval <folder>`` in a fresh process: notebook name → all cells passed,
    and what pytest printed."""
    import re
    import subprocess
    import sys
    import xml.etree.ElementTree as ET

    report = folder.parent / "report.xml"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "--nbval", "-p", "no:cacheprovider",
                           f"--junitxml={report}", str(folder)], cwd=folder, capture_output=True, text=True,
                          timeout=600)
    assert report.exists(), proc.stdout + proc.stderr
    passed: dict[str, bool] = {}
    for case in ET.parse(report).iter("testcase"):
        name = re.search(r"(\w+)\.ipynb", case.get("classname", "") + case.get("file", "")).group(1)
        ok = not any(child.tag in ("failure", "error") for child in case)
        passed[name] = passed.get(name, True) and ok
    return passed, proc.stdout


def test_plain_nbval_passes_on_another_machine_and_fails_on_a_regression(tmp_path):
    """Stored outputs from 'another machine' (other digits, wider columns, a flipped smoke verdict of
    a claim, other stderr) pass; a changed check verdict, a changed claim's wording, a changed printed
    word and a cell that raises each fail."""
    import shutil

    import nbformat
    from nbclient import NotebookClient

    folder = tmp_path / "notebooks"
    folder.mkdir()
    for f in ("conftest.py", "nbval_sanitize.cfg"):
        shutil.copy(NOTEBOOKS / f, folder / f)

    this_machine = _table()
    variants = {  # name: (stored outputs made from, notebook run by nbval, expected to pass)
        "same": (_synthetic(this_machine), _synthetic(this_machine), True),
        "other_machine": (_synthetic(_table(K1="20.0 %", delta="-12.25", interval="[-19.5, +4.5]", verdict="no",
                                            distance="3e-08"), stderr="other progress\nand a platform warning",
                                     y=0.75),
                          _synthetic(this_machine), True),
        # what code and config alone set, compared with its digits (issue 63 item 7):
        "config_digits": (_synthetic(this_machine),
                          _synthetic(this_machine, config=CONFIG.replace("steps=24", "steps=2")), False),
        "one_panel": (_synthetic(this_machine), _synthetic(this_machine, panels=1), False),
        "lost_curve": (_synthetic(this_machine), _synthetic(this_machine, curves=1), False),
        "check_tolerance": (_synthetic(this_machine), _synthetic(_table(tol="0.1")), False),
        "check_verdict": (_synthetic(_table(check="no")), _synthetic(this_machine), False),
        "claim_wording": (_synthetic(_table(claim="large K ends under 1 point from K = 1")), _synthetic(this_machine),
                          False),
        "printed_word": (_synthetic(this_machine, config=CONFIG.replace("steps", "epochs")), _synthetic(this_machine),
                         False),
        "cell_raises": (_synthetic(this_machine), _synthetic(this_machine, fail=True), False),
    }
    runs = {}  # the notebooks that stored outputs are made from, each executed once (most variants share one)
    for name, (made_from, source, _) in variants.items():
        text = nbformat.writes(made_from)
        if text not in runs:
            runs[text] = NotebookClient(made_from, timeout=120, kernel_name="python3").execute()
        nbformat.write(_stored(source, runs[text]), folder / f"{name}.ipynb")

    passed, printed = _nbval(folder)
    want = {name: ok for name, (_, _, ok) in variants.items()}
    assert passed == want, f"{ {k: v for k, v in passed.items() if want.get(k) != v} } differ\n{printed[-3000:]}"


def test_sanitizer_masks_a_real_notebooks_machine_dependence_not_its_words():
    """On fig3's stored claims (text and HTML): other digits, padding and a claim's verdict compare
    equal; a check's verdict, a claim's wording and a row removed do not. ntk's checks table is kept."""
    import re

    from nbval.plugin import get_sanitize_patterns

    patterns = get_sanitize_patterns((NOTEBOOKS / "nbval_sanitize.cfg").read_text(encoding="utf-8"))

    def sanitize(s):
        for regex, replace in patterns:
            s = re.sub(regex, replace, s)
        return s

    def last_outputs(stem):
        nb = json.loads((NOTEBOOKS / f"{stem}.ipynb").read_text(encoding="utf-8"))
        cell = [c for c in nb["cells"] if c["cell_type"] == "code"][-1]
        return ["".join(o["data"][k]) for o in cell["outputs"] for k in ("text/plain", "text/html")
                if k in o.get("data", {}) and "Claims of" in "".join(o["data"][k])]

    fig3 = last_outputs("fig3")
    assert len(fig3) == 2
    for out in fig3:
        # a verdict, not the rule's word
        flipped, n = re.subn(r"(?<=  |'>)(?:undecided|no \(unstable\))(?=  |</td>)", "yes", out, count=1)
        assert n == 1 and sanitize(out) == sanitize(flipped)
        assert sanitize(out) == sanitize(re.sub(r"\d", "7", out).replace("  ", "   "))
        assert sanitize(out) != sanitize(out.replace("SGD + augmentation", "SGD with augmentation"))
        assert sanitize(out) != sanitize(out.replace("every run stays finite", "no run diverged"))
        # a row removed: the second claim's row (an HTML <tr>, or a line of the text table)
        if "<tr>" in out:
            rows = re.findall(r"<tr>.*?</tr>", out, flags=re.S)
            removed = out.replace(rows[2], "", 1)  # rows[0] is the header
        else:
            lines = out.splitlines(keepends=True)
            removed = "".join(lines[:4] + lines[5:])  # title, header, rule, first row kept
        assert removed != out and sanitize(out) != sanitize(removed)
    ntk = last_outputs("ntk")
    for out in ntk:
        assert "Consistency checks" in out
        checks = out.index("Consistency checks")
        flipped = out[:checks] + out[checks:].replace("yes", "no")
        assert sanitize(out) != sanitize(flipped)
