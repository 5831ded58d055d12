"""The project skeleton: book configuration, table of contents, CI entry point."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

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
    assert commands["book"] == "make book"
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


# ------------------------------------------------------------------------------------------------
# The notebooks in the book
# ------------------------------------------------------------------------------------------------

#: The paper's figures and the kernel notebook, each a page of the book.
BOOK_NOTEBOOKS = ["fig1", "fig2", "fig3", "fig4", "fig5", "fig6", "fig7", "fig8", "fig9", "ntk"]


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
    assert chapters["book/sparse-updates"] == ["book/executed/fig2", "book/executed/fig3", "book/executed/fig4"]
    assert chapters["book/features"] == ["book/executed/fig6", "book/executed/fig7", "book/executed/ntk"]
    assert chapters["book/no-feature-learning"] == ["book/executed/fig5"]
    assert chapters["book/second-order"] == ["book/executed/fig8", "book/executed/fig9"]
    for page in ("book/claims", "book/reproducibility", "book/limitations"):
        assert page in chapters, page
    # each chapter page links its notebooks
    for chapter, sections in chapters.items():
        text = (ROOT / chapter).with_suffix(".md").read_text()
        for section in sections:
            assert f"{{doc}}`{section.removeprefix('book/')}`" in text, (chapter, section)


def test_generated_pages_are_included_from_the_ignored_build_folder():
    # book/generate.py writes them into book/executed/ (git-ignored) at build time
    assert "```{include} executed/claims.md" in (ROOT / "book" / "claims.md").read_text()
    assert "```{include} executed/runtimes.md" in (ROOT / "book" / "reproducibility.md").read_text()
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


def _fake_book(root: Path, names, *, claims=True, duration=12.3, output="fig3: computed and cached fig3-ab.npz\n"):
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
            doc = {"name": n, "scale": "smoke", "rows": [
                {"claim": "large K | on par", "paper": "82.3 % vs 81.4 %", "measured": "$5 *x*", "holds": "yes", "rule": "|Δ| < 1"},
                {"claim": "c2", "paper": "p", "measured": "m", "holds": "n/a at this scale", "rule": ""}]}
            (root / "book" / "executed" / "claims" / f"{n}.json").write_text(json.dumps(doc))


def test_generate_writes_claims_and_runtimes(tmp_path, generate):
    _fake_book(tmp_path, ["fig2", "ntk"])
    assert generate.main(["--root", str(tmp_path)]) == 0
    claims = (tmp_path / "book" / "executed" / "claims.md").read_text()
    # toc order, titles as headings, links to the notebook pages, every cell escaped
    assert claims.index("## Figure fig2: a title") < claims.index("## Figure ntk: a title")
    assert "{doc}`executed/fig2`" in claims and "{doc}`ntk <executed/ntk>`" in claims
    assert "| large K \\| on par | 82.3 % vs 81.4 % | \\$5 \\*x\\* | yes | \\|Δ\\| \\< 1 |" in claims
    assert "| **all** | | **4** | **2** | **0** | **2** |" in claims
    runtimes = (tmp_path / "book" / "executed" / "runtimes.md").read_text()
    assert "| {doc}`fig2 <executed/fig2>` | smoke | K=5000000.0 | 12 | computed |" in runtimes
    assert "| **all** | | | **24** | |" in runtimes


def test_generate_fails_naming_a_notebook_without_claims(tmp_path, generate, capsys):
    _fake_book(tmp_path, ["fig2"], claims=False)
    assert generate.main(["--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "claims/fig2.json is missing" in err and "publish_claims('fig2'" in err
    assert not (tmp_path / "book" / "executed" / "claims.md").exists()


def test_generate_fails_naming_a_notebook_not_executed(tmp_path, generate, capsys):
    _fake_book(tmp_path, ["fig2"])
    (tmp_path / "book" / "executed" / "fig2.ipynb").unlink()
    assert generate.main(["--root", str(tmp_path)]) == 1
    assert "fig2.ipynb is missing: run `make notebooks`" in capsys.readouterr().err


def test_generate_rejects_claims_of_another_notebook_or_bad_verdicts(tmp_path, generate):
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


def test_generate_reports_cached_results(tmp_path, generate):
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
