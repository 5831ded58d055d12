"""The project skeleton: book configuration, table of contents, CI entry point."""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


@pytest.fixture(scope="module")
def toc() -> dict:
    return yaml.safe_load((ROOT / "_toc.yml").read_text())


def _toc_files(entries) -> list[str]:
    files = []
    for entry in entries or []:
        if "file" in entry:
            files.append(entry["file"])
        for key in ("sections", "chapters", "parts"):
            files += _toc_files(entry.get(key))
    return files


def test_book_is_not_executed_by_jupyter_book(config):
    # papermill executes the notebooks before the build (Makefile `notebooks` target)
    assert config["execute"]["execute_notebooks"] == "off"
    assert config["only_build_toc_files"] is True


def test_book_excludes_non_book_paths(config):
    patterns = set(config["exclude_patterns"])
    for required in [".venv", "_build", ".ci", "benchmarks", "tests", "iterlin", "README.md", "notebooks/*.py"]:
        assert required in patterns, required


def test_book_has_no_buttons_or_remote_services(config):
    html = config["html"]
    assert html["use_repository_button"] is False
    assert html["use_issues_button"] is False
    assert html["use_edit_page_button"] is False
    launch = config["launch_buttons"]
    assert launch["thebe"] is False
    for key in ("binderhub_url", "jupyterhub_url", "colab_url", "deepnote_url"):
        assert launch[key] == "", key
    assert config["sphinx"]["config"]["intersphinx_mapping"] == {}


def test_book_math_extensions(config):
    assert {"dollarmath", "amsmath"} <= set(config["parse"]["myst_enable_extensions"])


def test_toc_files_exist(toc):
    files = [toc["root"], *_toc_files(toc.get("chapters")), *_toc_files(toc.get("parts"))]
    assert toc["root"] == "book/intro"
    assert "book/method" in files
    for name in files:
        if name.startswith("book/executed/"):
            # written by `make notebooks` from notebooks/<name>.ipynb
            source = ROOT / "notebooks" / (Path(name).stem + ".ipynb")
            assert source.is_file(), f"{name} in _toc.yml has no source {source}"
        else:
            assert (ROOT / name).with_suffix(".md").is_file() or (ROOT / name).with_suffix(".ipynb").is_file(), name


def test_method_numbers_the_papers_equations():
    # Sphinx numbers labelled display equations per page in order: Eq. 1-6 must be the paper's.
    text = (ROOT / "book" / "method.md").read_text()
    labels = re.findall(r"^\$\$ \((eq-[a-z0-9-]+)\)$", text, flags=re.M)
    assert labels == [
        "eq-gradient-flow",  # (1)
        "eq-ntk",  # (2)
        "eq-linear-step",  # (3)
        "eq-relinearise",  # (4)
        "eq-gauss-newton",  # (5)
        "eq-damped-gauss-newton",  # (6)
    ]
    for label in labels[2:]:
        assert f"{{eq}}`{label}`" in text, label


def test_ci_entry_point_runs_book_browser_and_tests_in_order():
    run = ROOT / ".ci" / "run"
    assert os.access(run, os.X_OK)
    text = run.read_text()
    assert "set -euo pipefail" in text
    phases = re.findall(r"^phase (\S+) (.*)$", text, flags=re.M)
    assert [name for name, _ in phases] == ["system", "env", "book", "browser", "test"], phases
    commands = dict(phases)
    assert re.fullmatch(r"make (-j\d+ )?book", commands["book"]), commands["book"]
    assert commands["browser"] == "make check-site"
    assert re.fullmatch(r"make test( .*)?", commands["test"]), commands["test"]
    subprocess.run(["bash", "-n", str(run)], check=True)


def test_browser_check_cannot_be_skipped_in_ci():
    # `make check-site` sets ITERLIN_REQUIRE_SITE=1, which turns test_site.py's skips into failures
    makefile = (ROOT / "Makefile").read_text()
    rule = re.search(r"^check-site:.*\n((?:\t.*\n)+)", makefile, flags=re.M)
    assert rule, "Makefile has no check-site target"
    assert "ITERLIN_REQUIRE_SITE=1" in rule.group(1) and "tests/test_site.py" in rule.group(1)
    site_test = (ROOT / "tests" / "test_site.py").read_text()
    assert 'os.environ.get("ITERLIN_REQUIRE_SITE"' in site_test and "pytest.fail(" in site_test


def _make_dry_run(*args: str) -> str:
    """The commands `make -n` would run (nothing is executed)."""
    env = {k: v for k, v in os.environ.items() if k not in ("SCALE", "NAMES", "RESULTS_OPTS", "MAKEFLAGS")}
    return subprocess.run(["make", "-n", "--no-print-directory", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=True).stdout


def test_make_results_runs_the_reference_module_with_scale_and_names():
    default = _make_dry_run("results")
    assert re.search(r"-m iterlin\.experiments\.reference --scale cpu\s*$", default, flags=re.M), default
    some = _make_dry_run("results", "SCALE=gpu", "NAMES=fig3 fig2", "RESULTS_OPTS=--skip-existing")
    assert re.search(r"-m iterlin\.experiments\.reference --scale gpu --skip-existing fig3 fig2$", some, flags=re.M), some
    refresh = _make_dry_run("claims-refresh", "NAMES=fig4")
    assert re.search(r"-m iterlin\.experiments\.reference --claims-only fig4$", refresh, flags=re.M), refresh
    # documented in the help header (`make help` prints the lines that start with "#   ")
    header = "\n".join(re.findall(r"^#   (.*)$", (ROOT / "Makefile").read_text(), flags=re.M))
    for text in ("make results", "SCALE=cpu", "SCALE=gpu", 'NAMES="fig3 fig2"', "make claims-refresh", "CI"):
        assert text in header, text


def test_reference_runs_are_not_part_of_the_build_or_ci():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("book", "pages", "notebooks", "test"):
        rule = re.search(rf"^{target}:(.*)$", makefile, flags=re.M)
        assert rule and "results" not in rule.group(1).split(), target
    assert "iterlin.experiments.reference" not in _make_dry_run("-B", "pages")
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make results" not in ci and "iterlin.experiments.reference" not in ci


def test_reference_runs_are_committed_not_ignored():
    try:
        done = subprocess.run(["git", "check-ignore", "results/fig3/results.npz", "results/fig3/provenance.json"],
                              cwd=ROOT, capture_output=True)
    except OSError:
        pytest.skip("git is not installed")
    if done.returncode == 128:
        pytest.skip("not a git checkout")
    assert done.returncode == 1, "results/<name>/ is git-ignored: the reference runs must be committed"


def test_papermill_call_draws_no_progress_bar():
    makefile = (ROOT / "Makefile").read_text()
    call = re.search(r"^\t.*-m papermill (.*)$", makefile, flags=re.M)
    assert call and "--no-progress-bar" in call.group(1) and "--log-output" not in call.group(1)
    assert re.search(r"^PAPERMILL_OPTS \?=\s*$", makefile, flags=re.M)


# ------------------------------------------------------------------------------------------------
# The notebooks in the book
# ------------------------------------------------------------------------------------------------

#: The paper's figures, the kernel notebook and the experiments beyond the paper, each a page of the book.
BOOK_NOTEBOOKS = ["fig1", "fig2", "fig3", "fig3_confirm", "fig4", "fig5", "fig6", "fig7", "fig8", "fig9", "ntk", "ksweep", "lr", "adaptive", "gn", "limit", "ceflow", "ceflow_confirm"]


def test_toc_lists_every_figure_notebook_once(toc):
    files = _toc_files(toc.get("parts")) + _toc_files(toc.get("chapters"))
    executed = [f for f in files if f.startswith("book/executed/")]
    assert sorted(executed) == sorted(f"book/executed/{n}" for n in BOOK_NOTEBOOKS)
    assert len(files) == len(set(files)), "a file is listed twice in _toc.yml"


def test_every_notebook_is_in_the_toc(toc):
    # `make notebooks` executes every notebooks/*.ipynb; one missing from the toc would be
    # executed for nothing and never shown (only_build_toc_files).
    listed = {Path(f).name for f in _toc_files(toc.get("parts")) + _toc_files(toc.get("chapters"))}
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert nb.stem in listed, f"notebooks/{nb.name} is not in _toc.yml"


def test_chapters_follow_the_papers_sections(toc):
    chapters = {c["file"]: [s["file"] for s in c.get("sections", [])] for part in toc["parts"] for c in part["chapters"]}
    assert chapters["book/method"] == ["book/executed/fig1"]
    assert chapters["book/sparse-updates"] == ["book/executed/fig2", "book/executed/fig3", "book/executed/fig3_confirm",
                                               "book/executed/fig4"]
    assert chapters["book/features"] == ["book/executed/fig6", "book/executed/fig7", "book/executed/ntk"]
    assert chapters["book/no-feature-learning"] == ["book/executed/fig5"]
    assert chapters["book/second-order"] == ["book/executed/fig8", "book/executed/fig9"]
    assert chapters["book/beyond"] == ["book/executed/ksweep", "book/executed/lr", "book/executed/gn",
                                        "book/executed/adaptive"]
    for page in ("book/claims", "book/reproducibility", "book/limitations"):
        assert page in chapters, page
    # each chapter page links its notebooks
    for chapter, sections in chapters.items():
        text = (ROOT / chapter).with_suffix(".md").read_text()
        for section in sections:
            assert f"{{doc}}`{section.removeprefix('book/')}`" in text, (chapter, section)


def _api_page() -> tuple[set[str], set[tuple[str, str]]]:
    """book/api.md's automodule'd modules, and its autosummary entries as (current module, name)."""
    documented, listed, module, in_summary = set(), set(), None, False
    for line in (ROOT / "book" / "api.md").read_text().splitlines():
        if m := re.match(r"\.\. automodule:: (\S+)$", line):
            documented.add(m.group(1))
        if m := re.match(r"\.\. currentmodule:: (\S+)$", line):
            module = m.group(1)
        if line.startswith(".. "):
            in_summary = line.startswith(".. autosummary::")
        elif in_summary and (m := re.fullmatch(r"   ([A-Za-z_]\w*)", line)):
            listed.add((module, m.group(1)))
        elif in_summary and line and not line.startswith("   "):
            in_summary = False
    return documented, listed


def test_api_page_documents_every_public_name(config, toc):
    # book/api.md is generated from the docstrings (autodoc, autosummary, napoleon), in "About this
    # edition" and linked from the method page; every name `import iterlin` exposes is listed in its
    # summary tables under its defining module, which the page documents.
    about = next(part for part in toc["parts"] if part["caption"] == "About this edition")
    assert "book/api" in [chapter["file"] for chapter in about["chapters"]]
    extensions = set(config["sphinx"]["extra_extensions"])
    assert {"sphinx.ext.autodoc", "sphinx.ext.autosummary", "sphinx.ext.napoleon"} <= extensions
    assert "{doc}`api`" in (ROOT / "book" / "method.md").read_text()
    iterlin = importlib.import_module("iterlin")
    documented, listed = _api_page()
    for name in iterlin.__all__:
        obj = getattr(iterlin, name)
        if inspect.ismodule(obj):
            assert obj.__name__ in documented, f"book/api.md does not document the module {obj.__name__}"
            continue
        # documented under its defining module, or under a package that re-exports it in __all__
        # (iterlin.training defines its names in private submodules; autodoc documents them there)
        homes = [m for m in sorted(documented) if _exports(m, name, obj)]
        assert homes, f"book/api.md does not document {obj.__module__} ({name}), nor a package exporting it"
        assert any((m, name) in listed for m in homes), f"iterlin.{name} is not in book/api.md's summary tables"


def _exports(module: str, name: str, obj) -> bool:
    """Whether ``module`` defines ``obj`` as ``name``, or lists ``name`` in its ``__all__`` as ``obj``."""
    mod = importlib.import_module(module)
    return getattr(mod, name, None) is obj and (obj.__module__ == module or name in getattr(mod, "__all__", ()))


def test_make_test_runs_the_docstring_examples():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test: .*\btest-doctest\b", makefile, flags=re.M)
    assert re.search(r"-m pytest -q --doctest-modules iterlin$", _make_dry_run("test-doctest"), flags=re.M)


def test_generated_pages_are_included_from_the_ignored_build_folder():
    # book/generate.py writes them into book/executed/ (git-ignored) at build time
    assert "```{include} executed/claims.md" in (ROOT / "book" / "claims.md").read_text()
    reproducibility = (ROOT / "book" / "reproducibility.md").read_text()
    for page in ("runtimes", "references", "scales"):
        assert f"```{{include}} executed/{page}.md" in reproducibility, page
    assert "```{include} executed/findings.md" in (ROOT / "book" / "intro.md").read_text()  # the front page
    ignored = (ROOT / ".gitignore").read_text().split()
    assert "/book/executed/" in ignored


# ------------------------------------------------------------------------------------------------
# Maths: offline MathJax and the paper's equation numbers
# ------------------------------------------------------------------------------------------------


def test_mathjax_is_served_with_the_site(config):
    sphinx = config["sphinx"]["config"]
    path = sphinx["mathjax_path"]
    assert "://" not in path and not path.startswith("//"), f"mathjax_path {path!r} is not local"
    assert "_build/vendor" in sphinx["html_static_path"]
    # A root _static/ folder would make jupyter-book add every .js under it (all of MathJax) to
    # every page.
    assert not (ROOT / "_static").exists()
    makefile = (ROOT / "Makefile").read_text()
    assert f"MATHJAX := _build/vendor/{path}" in makefile
    assert re.search(r"^book: .*\bmathjax\b", makefile, flags=re.M)


def test_mathjax_is_pinned_with_its_checksum():
    package = json.loads((ROOT / "package.json").read_text())
    assert package["private"] is True
    assert re.fullmatch(r"3\.\d+\.\d+", package["dependencies"]["mathjax"])
    lock = json.loads((ROOT / "package-lock.json").read_text())
    entry = lock["packages"]["node_modules/mathjax"]
    assert entry["version"] == package["dependencies"]["mathjax"]
    assert entry["integrity"].startswith("sha512-")
    assert set(lock["packages"]) == {"", "node_modules/mathjax"}, "MathJax has no dependencies"


def _display_maths(text: str) -> list[str]:
    return re.findall(r"^\$\$(?: \(\S+\))?\n(.*?)\n\$\$", text, flags=re.M | re.S)


def test_method_tags_appendix_b_equations_with_the_papers_numbers():
    text = (ROOT / "book" / "method.md").read_text()
    tagged = {}
    for block in _display_maths(text):
        m = re.search(r"\\tag\{(\d+)\}", block)
        if m:
            # Sphinx wraps a block containing \\ in a split environment, where \tag is an error
            assert "\\\\" not in block, block
            tagged[int(m.group(1))] = block
    assert sorted(tagged) == [14, 18, 19]
    assert "e^{-\\eta\\, \\phi\\phi^\\top t}" in tagged[14]
    assert "I - (I - \\eta\\Theta)^K" in text  # the K-step closed form
    assert "\\frac{1}{K\\eta}" in text  # the damping bridge


# ------------------------------------------------------------------------------------------------
# book/generate.py (claims and runtime pages) and the local Sphinx extension
# ------------------------------------------------------------------------------------------------


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generate():
    return _load(ROOT / "book" / "generate.py", "book_generate")


def _fake_book(root: Path, names, *, claims=True, duration=12.3, output="fig3: computed and cached fig3-ab.npz\n",
               rows=None):
    (root / "book" / "executed" / "claims").mkdir(parents=True)
    toc = {"format": "jb-book", "root": "book/intro",
           "parts": [{"caption": "x", "chapters": [{"file": "book/a", "sections": [{"file": f"book/executed/{n}"} for n in names]}]}]}
    (root / "_toc.yml").write_text(yaml.safe_dump(toc))
    for n in names:
        nb = {"cells": [{"cell_type": "markdown", "source": [f"# Figure {n}: a title\n", "text"]},
                        {"cell_type": "code", "outputs": [{"output_type": "stream", "name": "stdout", "text": [output]}]}],
              "metadata": {"papermill": {"duration": duration, "parameters": {"K": 5e6}}}}
        (root / "book" / "executed" / f"{n}.ipynb").write_text(json.dumps(nb))
        if claims:
            doc = {"name": n, "scale": "smoke", "rows": rows if rows is not None else [
                {"claim": "large K | on par", "paper": "82.3 % vs 81.4 %", "measured": "$5 *x*", "holds": "yes", "rule": "|Δ| < 1"},
                {"claim": "c2", "paper": "p", "measured": "m", "holds": "n/a at this scale", "rule": ""}]}
            (root / "book" / "executed" / "claims" / f"{n}.json").write_text(json.dumps(doc))


#: Rows of every verdict and kind, as iterlin.repro.claims.Claim writes them.
MIXED_ROWS = [
    {"claim": "K = 1 ≈ large K", "paper": "82.3 % vs 81.4 %", "measured": "Δ +0.4 pts", "holds": "yes", "rule": "r1", "kind": "claim"},
    {"claim": "better", "paper": "p", "measured": "m", "holds": "undecided", "rule": "r2", "kind": "claim"},
    {"claim": "worse", "paper": "p", "measured": "m", "holds": "no", "rule": "r3", "kind": "claim"},
    {"claim": "abs", "paper": "p", "measured": "m", "holds": "undecided", "rule": "r4", "kind": "claim"},
    {"claim": "two routes agree", "paper": "(none)", "measured": "1e-7", "holds": "yes", "rule": "r5", "kind": "check"},
    {"claim": "two other routes", "paper": "(none)", "measured": "2", "holds": "no", "rule": "r6", "kind": "check"},
]


#: A commit of this checkout (a reference run's ``iterlin_commit`` must be one).
HEAD = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def _fake_reference(results: Path, name: str, rows, *, current_code: bool, seeds=(0, 1), monkeypatch):
    """results/<name>/ as iterlin.experiments.reference.write leaves it; its code fingerprint is
    today's (current_code) or another one (the library has changed since). The experiment's claims
    code is made to derive ``rows`` from the stored results (the book checks claims.json against it)."""
    from iterlin.repro.cache import save_results
    from iterlin.repro.claims import Claim
    from iterlin.experiments import registry
    from iterlin.repro.fingerprint import code_fingerprint

    d = results / name
    d.mkdir(parents=True)
    config = registry.resolve(name, "cpu", seed=seeds[0], n_seeds=len(seeds)).to_dict()
    exp = registry.get(name)
    monkeypatch.setitem(registry.EXPERIMENTS, name, exp._replace(claims=lambda results: [Claim(**r) for r in rows]))
    code = code_fingerprint(exp.module, ("load", "compute")) if current_code else "0" * 64
    arrays = {f: np.arange(4.0) for f in exp.results._fields if f != "config"}  # the fields of its Results
    save_results(d / "results.npz", arrays, key=f"reference:{name}:cpu:{code}", config=config)
    (d / "claims.json").write_text(json.dumps({"name": name, "scale": "cpu", "rows": rows}))
    prov = {"name": name, "scale": "cpu", "device": "cpu: 2 cores (x86_64)", "seeds": list(seeds),
            "iterlin_commit": HEAD + "+dirty", "jax_version": "0.4.0", "python": "3.11.0",
            "date": "2026-01-02T03:04:05Z", "wall_seconds": 1234.5, "resumed": False, "config": config,
            "data_fingerprint": "d" * 64, "code_fingerprint": code}
    (d / "provenance.json").write_text(json.dumps(prov))
    return prov


@pytest.fixture
def no_results_env(monkeypatch):
    monkeypatch.delenv("ITERLIN_RESULTS", raising=False)


def test_generate_writes_claims_and_runtimes(tmp_path, generate, no_results_env):
    _fake_book(tmp_path, ["fig2", "ntk"])
    assert generate.main(["--root", str(tmp_path)]) == 0
    claims = (tmp_path / "book" / "executed" / "claims.md").read_text()
    # toc order, titles as headings, links to the notebook pages, every cell escaped
    assert claims.index("## Figure fig2: a title") < claims.index("## Figure ntk: a title")
    assert "{doc}`executed/fig2`" in claims and "{doc}`ntk <executed/ntk>`" in claims
    assert "| large K \\| on par | 82.3 % vs 81.4 % | \\$5 \\*x\\* | yes | \\|Δ\\| \\< 1 |" in claims
    # claims, yes, no, undecided, n/a; no consistency checks
    assert "| {doc}`fig2 <executed/fig2>` | smoke | 2 | 1 | 0 | 0 | 0 | 1 | none |" in claims
    assert "| **all** | | **4** | **2** | **0** | **0** | **0** | **2** | |" in claims
    # no reference run committed: said so, in the tally and in each notebook's section
    assert "| {doc}`fig2 <executed/fig2>` | no reference run yet |" in claims
    assert "None yet: `make results NAMES=ntk` computes one." in claims
    references = (tmp_path / "book" / "executed" / "references.md").read_text()
    assert "| {doc}`ntk <executed/ntk>` | no reference run yet |" in references
    runtimes = (tmp_path / "book" / "executed" / "runtimes.md").read_text()
    assert "| {doc}`fig2 <executed/fig2>` | smoke | K=5000000.0 | 12 | computed |" in runtimes
    assert "| **all** | | | **24** | |" in runtimes


def test_generate_shows_reference_runs_first_with_their_provenance(tmp_path, generate, no_results_env, monkeypatch):
    from collections import Counter

    from iterlin.repro.claims import CHECKS_HEADING, HOLDS
    from iterlin.experiments.reference import provenance_line

    from iterlin.experiments.findings import Evidence, Finding

    _fake_book(tmp_path, ["fig2", "ntk"], rows=MIXED_ROWS)
    fig2 = _fake_reference(tmp_path / "results", "fig2", MIXED_ROWS, current_code=True, monkeypatch=monkeypatch)
    ntk = _fake_reference(tmp_path / "results", "ntk", MIXED_ROWS[:1], current_code=False, seeds=(3,),
                          monkeypatch=monkeypatch)
    monkeypatch.setattr(generate, "FINDINGS", (Finding("Fig. 2", "on par", "p", Evidence("fig2", "K = 1"),
                                                       (Evidence("ntk", "K = 1"), Evidence("fig5", "x"),
                                                        Evidence("limit", "x"))),))
    assert generate.main(["--root", str(tmp_path)]) == 0
    # the front page's table reads the decisive row's verdict and measurement from the reference run
    front = (tmp_path / "book" / "executed" / "findings.md").read_text()
    assert ("| Fig. 2: on par | p | {doc}`fig2 <executed/fig2>` (cpu) | **yes** | Δ +0.4 pts | stability not recorded | "
            "{doc}`ntk <executed/ntk>` (K = 1 ≈ large K): **yes** (stability not recorded); {doc}`fig5 <executed/fig5>` "
            "(x): no reference run; {doc}`limit <executed/limit>` (x): no reference run |") in front
    monkeypatch.setattr(generate, "FINDINGS", (Finding("Fig. 2", "on par", "p", Evidence("fig2", "no such row")),))
    assert generate.main(["--root", str(tmp_path)]) == 1  # a row the table names must exist
    monkeypatch.setattr(generate, "FINDINGS", ())
    assert generate.main(["--root", str(tmp_path)]) == 0
    page = (tmp_path / "book" / "executed" / "claims.md").read_text()
    # the reference runs' tally, then this build's, then per notebook: reference first
    assert page.index("**Reference runs**") < page.index("**This build's runs**") < page.index("## Figure fig2")
    section = page[page.index("## Figure fig2"):page.index("## Figure ntk")]
    assert section.index("**Reference run** (`results/fig2/`)") < section.index("**This build's run**")
    # the provenance line as iterlin.experiments.reference writes it; "changed since" only where it is
    for prov, changed in ((fig2, False), (ntk, True)):
        line = provenance_line(prov, changed=changed).removeprefix("Reference run: ")
        assert generate.escape(line) in page
    assert "seeds 0–1 (2)" in section and "The library has changed since" not in section
    assert "The library has changed since" in page[page.index("## Figure ntk"):]
    # the tally counts the claims per verdict; the checks are counted apart, never with them
    claims = [r for r in MIXED_ROWS if r["kind"] == "claim"]
    verdicts = Counter(r["holds"] for r in claims)
    counts = " | ".join(str(verdicts[h]) for h in HOLDS)
    checks = Counter(r["holds"] for r in MIXED_ROWS if r["kind"] == "check")
    cell = f"{sum(checks.values())}: {checks['yes']} yes, {checks['no']} no"
    assert f"| {{doc}}`fig2 <executed/fig2>` | cpu | {len(claims)} | {counts} | {cell} |" in page
    assert "| {doc}`ntk <executed/ntk>` | cpu | 1 | 1 | 0 | 0 | 0 | 0 | none |" in page
    # each table: the claims, then the checks under their heading; in both runs of fig2
    heading = f"*{generate.escape(CHECKS_HEADING)}*"
    assert section.count(heading) == 2
    for part in section.split("**This build's run**"):
        assert part.index("| K = 1 ≈ large K |") < part.index("| worse |") < part.index(heading) \
            < part.index("| two routes agree |")
    references = (tmp_path / "book" / "executed" / "references.md").read_text()
    assert ("| {doc}`fig2 <executed/fig2>` | cpu | cpu: 2 cores (x86\\_64) | 0–1 (2) | 2026-01-02T03:04:05Z | "
            f"{HEAD[:10]}+dirty | 0.4.0 | 1234 | no |") in references
    assert "| {doc}`ntk <executed/ntk>` | cpu |" in references and references.rstrip().count("| yes |") == 1


def test_generate_reads_the_results_folder_it_is_given(tmp_path, generate, monkeypatch):
    _fake_book(tmp_path, ["fig2"])
    _fake_reference(tmp_path / "elsewhere", "fig2", MIXED_ROWS[:1], current_code=True, monkeypatch=monkeypatch)
    monkeypatch.setenv("ITERLIN_RESULTS", str(tmp_path / "elsewhere"))
    monkeypatch.setattr(generate, "FINDINGS", ())
    assert generate.main(["--root", str(tmp_path)]) == 0
    assert "**Reference run** (`results/fig2/`)" in (tmp_path / "book" / "executed" / "claims.md").read_text()
    assert generate.main(["--root", str(tmp_path), "--results", str(tmp_path / "none")]) == 0
    assert "None yet" in (tmp_path / "book" / "executed" / "claims.md").read_text()


def test_generate_fails_naming_an_unreadable_reference_run(tmp_path, generate, capsys, no_results_env, monkeypatch):
    _fake_book(tmp_path, ["fig2"])
    _fake_reference(tmp_path / "results", "fig2", MIXED_ROWS, current_code=True, monkeypatch=monkeypatch)
    npz = tmp_path / "results" / "fig2" / "results.npz"
    npz.write_bytes(npz.read_bytes()[:50])  # truncated
    assert generate.main(["--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "results/fig2: unreadable reference run" in err and "make results NAMES=fig2" in err
    assert not (tmp_path / "book" / "executed" / "claims.md").exists()


def _forge(d: Path, how: str) -> str:
    """Alter results/<name>/ in ``d`` as a careless or hostile collaborator might; return the file to name."""
    prov_path, claims_path = d / "provenance.json", d / "claims.json"
    prov, doc = json.loads(prov_path.read_text()), json.loads(claims_path.read_text())
    if how == "paper scale and 100 seeds":
        prov["scale"], prov["seeds"] = "paper", list(range(100))
        prov["config"] = {**prov["config"], "scale": "paper", "n_seeds": 100, "steps": 10**6}
    elif how == "100 seeds":
        prov["seeds"] = list(range(100))
    elif how == "a nonexistent commit":
        prov["iterlin_commit"] = "f" * 40
    elif how == "a flipped verdict":
        doc["rows"][2].update(holds="yes", measured="Δ +9.9 pts")
        claims_path.write_text(json.dumps(doc))
        return "claims.json"
    elif how == "another experiment's results":
        from iterlin.repro.cache import save_results

        save_results(d / "results.npz", {"x": np.zeros(2)}, key="reference:ntk:cpu:" + prov["code_fingerprint"],
                     config={**prov["config"], "experiment": "ntk"})
        return "results.npz"
    elif how == "an 8 TiB header":
        import io
        import zipfile

        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": (2**40,)})
        with zipfile.ZipFile(d / "results.npz", "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("x.npy", buf.getvalue() + b"\0" * 8)
        return "results.npz"
    prov_path.write_text(json.dumps(prov))
    return "provenance.json" if how != "paper scale and 100 seeds" else "results.npz"


@pytest.mark.parametrize("how", ["paper scale and 100 seeds", "100 seeds", "a nonexistent commit", "a flipped verdict",
                                 "another experiment's results", "an 8 TiB header"])
def test_generate_fails_naming_a_reference_run_that_is_not_what_was_computed(tmp_path, generate, capsys,
                                                                            no_results_env, monkeypatch, how):
    _fake_book(tmp_path, ["fig2"])
    _fake_reference(tmp_path / "results", "fig2", MIXED_ROWS, current_code=True, monkeypatch=monkeypatch)
    name = _forge(tmp_path / "results" / "fig2", how)
    assert generate.main(["--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"results/fig2/{name}" in err, err
    assert not (tmp_path / "book" / "executed" / "claims.md").exists()


def test_generate_fails_naming_a_notebook_without_claims(tmp_path, generate, capsys, no_results_env):
    _fake_book(tmp_path, ["fig2"], claims=False)
    assert generate.main(["--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "claims/fig2.json is missing" in err and "published no claims under the name 'fig2'" in err
    assert not (tmp_path / "book" / "executed" / "claims.md").exists()


def test_generate_fails_naming_a_notebook_not_executed(tmp_path, generate, capsys, no_results_env):
    _fake_book(tmp_path, ["fig2"])
    (tmp_path / "book" / "executed" / "fig2.ipynb").unlink()
    assert generate.main(["--root", str(tmp_path)]) == 1
    assert "fig2.ipynb is missing: run `make notebooks`" in capsys.readouterr().err


def test_generate_rejects_claims_of_another_notebook_or_bad_verdicts(tmp_path, generate, no_results_env):
    _fake_book(tmp_path, ["fig2"])
    path = tmp_path / "book" / "executed" / "claims" / "fig2.json"
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "name": "fig3"}))
    with pytest.raises(generate.GenerateError, match="expected 'fig2'"):
        generate.load(tmp_path)
    doc["rows"][0]["holds"] = "maybe"
    path.write_text(json.dumps(doc))
    with pytest.raises(generate.GenerateError, match="holds='maybe'"):
        generate.load(tmp_path)
    doc["rows"][0].update(holds="undecided", kind="evidence")
    path.write_text(json.dumps(doc))
    with pytest.raises(generate.GenerateError, match="kind='evidence'"):
        generate.load(tmp_path)
    doc["rows"][0]["kind"] = "check"
    path.write_text(json.dumps(doc))
    assert generate.load(tmp_path)[0]["claims"]["rows"][0]["kind"] == "check"


def _stream(name: str, text: str) -> dict:
    return {"output_type": "stream", "name": name, "text": [text]}


def test_generate_fails_when_a_page_would_show_a_progress_bar_or_a_local_path(tmp_path, generate, capsys,
                                                                             no_results_env):
    _fake_book(tmp_path, ["fig2", "fig3"])
    site = "/opt/env/lib/python3.11/site-packages/tqdm/auto.py:21: TqdmWarning: IProgress not found.\n"
    bar = " 50%|█████     | 12/24 [00:27<00:23,  2.00s/step]\r"
    leaky = {
        "fig2": [_stream("stderr", site), _stream("stderr", bar), _stream("stderr", bar)],
        "fig3": [_stream("stderr", f"{tmp_path}/iterlin/cache.py:412: CacheWarning: x\n")],
    }
    for name, outputs in leaky.items():
        path = tmp_path / "book" / "executed" / f"{name}.ipynb"
        nb = json.loads(path.read_text())
        nb["cells"][1]["outputs"] += outputs
        path.write_text(json.dumps(nb))
    assert generate.main(["--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    fig2, fig3 = err[err.index("fig2.ipynb: its page"):err.index("fig3.ipynb: its page")], err[err.index("fig3.ipynb: its page"):]
    assert "tqdm's warning and a path of an installed package in cell 1 (1 output" in fig2
    assert "a progress bar in cell 1 (2 outputs" in fig2 and "local path" not in fig2
    assert "a local path of the build machine in cell 1 (1 output" in fig3 and "progress bar" not in fig3
    assert not (tmp_path / "book" / "executed" / "claims.md").exists()


def test_leaks_reads_only_text_and_progress_bars_only_on_stderr(generate):
    # a fixed-width claims table may hold "81.4 %|"; an image's base64 may hold any string
    nb = {"cells": [{"outputs": [
        _stream("stdout", "acc 81.4 %|  [00:01<00:02]\n"),
        {"output_type": "display_data", "data": {"image/png": "L3dvcmsvbWFpbi9zaXRlLXBhY2thZ2Vz/work/main site-packages",
                                                 "text/plain": "<Figure size 640x480 with 1 Axes>"}},
    ]}]}
    assert generate.leaks(nb, ("/work/main",)) == []
    nb["cells"][0]["outputs"][1]["data"]["text/html"] = "<p>/work/main/results</p>"
    assert generate.leaks(nb, ("/work/main",)) == ["a local path of the build machine in cell 0 (1 output; "
                                                    "e.g. '<p>/work/main/results</p>')"]


def test_generate_reports_cached_results(tmp_path, generate, no_results_env):
    _fake_book(tmp_path, ["fig5"], output="fig5: loaded cached results fig5-ab.npz\n", duration=None)
    assert generate.main(["--root", str(tmp_path)]) == 0
    runtimes = (tmp_path / "book" / "executed" / "runtimes.md").read_text()
    assert "| not recorded | read from the result cache |" in runtimes


def test_the_real_toc_is_what_generate_reads(generate, toc):
    assert generate.toc_notebooks(ROOT / "_toc.yml") == [
        f.removeprefix("book/executed/") for f in _toc_files(toc["parts"]) if f.startswith("book/executed/")
    ]


def test_local_extension_removes_duplicate_scripts(config):
    assert config["sphinx"]["local_extensions"] == {"iterlin_book": "book/_ext"}
    ext = _load(ROOT / "book" / "_ext" / "iterlin_book.py", "iterlin_book")
    from sphinx.builders.html._assets import _JavaScript

    body = "const THEBE_JS_URL = 1"
    a, b = _JavaScript(None, body=body), _JavaScript("", body=body)
    other = _JavaScript("_static/x.js", priority=500)
    context = {"script_files": [a, other, b]}
    ext._dedupe_scripts(None, "page", "page.html", context, None)
    assert context["script_files"] == [a, other]
