"""nbval's comparison of these notebooks, the same wherever pytest collects them.

``pytest --nbval notebooks/`` (from the repository or from ``notebooks/``, one notebook or all,
and ``make test``) compares each cell's outputs with the stored ones after two steps that this
file applies, so that the plain command passes on any CPU or GPU and fails when a notebook's
behaviour changes:

- the outputs are sanitized with ``nbval_sanitize.cfg`` (beside this file) unless
  ``--nbval-sanitize-with`` names another file: numbers and padding are masked, and so are the
  verdicts of the paper's claims, which rest on a smoke run's noise (see that file); the words,
  the rows and the verdicts of the consistency checks are compared;
- standard error is not compared: it carries the training's progress lines and the warnings of a
  platform (a GPU's, a JAX version's), which differ from machine to machine. A cell that raises
  still fails, whatever it printed.

The data the notebooks read: the repository's ``conftest.py`` points ``ITERLIN_CIFAR10`` at the
real CIFAR-10 subset in ``../shared`` when the variable is unset and that folder exists (as the
Makefile does), so that the plain command needs no setting on this project's machines either.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SANITIZE = Path(__file__).resolve().with_name("nbval_sanitize.cfg")


def pytest_configure(config):
    if getattr(config.option, "nbval_sanitize_with", "absent") is None:  # nbval loaded, no file given
        config.option.nbval_sanitize_with = str(SANITIZE)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    try:
        from nbval.plugin import IPyNbFile
    except ImportError:  # nbval not installed: nothing is collected as a notebook
        return

    here = SANITIZE.parent
    for item in items:
        nb = item.parent
        if not isinstance(nb, IPyNbFile) or Path(str(nb.fspath)).resolve().parent != here:
            continue
        if "stderr" not in nb.skip_compare:
            nb.skip_compare = (*nb.skip_compare, "stderr")
