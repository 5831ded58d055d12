"""The project skeleton: book configuration, table of contents, CI entry point."""

from __future__ import annotations

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


def test_ci_entry_point_runs_make_test():
    run = ROOT / ".ci" / "run"
    assert os.access(run, os.X_OK)
    text = run.read_text()
    assert "set -euo pipefail" in text
    assert re.search(r"^phase test make test$", text, flags=re.M)
    subprocess.run(["bash", "-n", str(run)], check=True)
