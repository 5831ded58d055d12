"""iterlin installed from its wheel, outside the checkout: the README's example and the command line
run from a temporary folder, and results and caches go to the user's folders, never into the package.

The wheel is built from this checkout and installed, with ``--no-deps``, into a new virtual
environment whose only other path is the test environment's site-packages (a ``.pth`` line), so its
dependencies are the versions pip resolved for this checkout without downloading them again; the
test environment's editable install of iterlin is not active there (``.pth`` files of a path added
that way are not processed), which the test checks.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _readme_example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## The library at a glance"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    # built from a copy of what the wheel holds: setuptools writes build/ into the source folder, which
    # two test processes (pytest-xdist) building from the checkout at once would share
    src = tmp / "src"
    shutil.copytree(ROOT / "iterlin", src / "iterlin", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
                    str(src)], check=True, capture_output=True, timeout=600)
    (wheel,) = dist.glob("iterlin-*.whl")
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "_iterlin_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], check=True,
                   capture_output=True, timeout=600)
    work = tmp / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ITERLIN_") or k == "ITERLIN_CIFAR10"}
    env.update(XDG_CACHE_HOME=str(tmp / "xdg"), HOME=str(tmp / "home"), JAX_PLATFORMS="cpu")
    return {"wheel": wheel, "python": python, "bin": env_dir / "bin", "site": Path(site), "cwd": work, "env": env}


def _run(installed, *args, timeout=600):
    proc = subprocess.run([*map(str, args)], cwd=installed["cwd"], env=installed["env"], capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout


def test_the_wheel_holds_the_package_and_the_script(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    for module in ("iterlin/cli.py", "iterlin/__main__.py", "iterlin/experiments/fig3.py", "iterlin/analysis/stability.py"):
        assert module in names
    assert not [n for n in names if n.startswith(("tests/", "notebooks/", "results/"))]
    (entry,) = [n for n in names if n.endswith("entry_points.txt")]
    assert "iterlin = iterlin.cli:main" in zipfile.ZipFile(installed["wheel"]).read(entry).decode()


def test_readme_example_runs_from_the_installed_wheel(installed):
    code = "import iterlin, sys; print('FROM', iterlin.__file__)\n" + _readme_example()
    out = _run(installed, installed["python"], "-c", code)
    assert f"FROM {installed['site'] / 'iterlin' / '__init__.py'}" in out


def test_cli_runs_anywhere_and_writes_to_the_user_folders(installed):
    package = installed["site"] / "iterlin"
    before = sorted(p for p in package.rglob("*") if "__pycache__" not in p.parts)
    assert _run(installed, installed["bin"] / "iterlin", "list").split()[0] == "fig1"
    out = _run(installed, installed["python"], "-m", "iterlin", "run", "fig9", "-p", "steps=3", "-p", "n_seeds=2",
               "-p", "damping=0,1", "-p", "n_evals=1")
    xdg = Path(installed["env"]["XDG_CACHE_HOME"])
    assert f"cache: {xdg / 'iterlin' / 'results'}" in out
    assert (installed["cwd"] / "iterlin-runs" / "fig9-smoke" / "results.npz").is_file()
    assert list((xdg / "iterlin").rglob("fig9-*.npz")), "the result cache is not in the user cache folder"
    after = sorted(p for p in package.rglob("*") if "__pycache__" not in p.parts)
    assert after == before, "something was written into site-packages"
