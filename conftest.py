"""What every pytest run in this repository shares, ``pytest tests/`` and ``pytest --nbval notebooks/`` alike.

``ITERLIN_CIFAR10``: when it is unset and ``shared/data/cifar10-subset`` exists in a folder above
the checkout (``../shared`` beside it, as on this project's machines and in CI), the run points it
there, as the Makefile does, and puts it back at the end. It is set in ``pytest_configure``, before
anything is collected, so that the notebooks' kernels (started by nbval, each inheriting this
process's environment) read the same data as the tests. Without either, a notebook downloads the
official archive (online) or says where it looked (offline).

``cifar_subset_path``: the path of that subset (the test is skipped, and reported so, without it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _find_cifar10_subset() -> Path:
    """``shared/data/cifar10-subset`` in the nearest folder above this checkout that holds one
    (``../shared/...`` beside the repository root for the main checkout; searching upwards also
    serves clones at other depths)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "shared" / "data" / "cifar10-subset"
        if candidate.is_dir():
            return candidate
    return here.parents[1] / "shared" / "data" / "cifar10-subset"


#: The real CIFAR-10 subset (official python layout, 932 images per batch file).
CIFAR10_SUBSET = _find_cifar10_subset()
_SET_HERE = "_iterlin_cifar10_set_by_conftest"


def pytest_configure(config):
    if "ITERLIN_CIFAR10" not in os.environ and CIFAR10_SUBSET.is_dir():
        os.environ["ITERLIN_CIFAR10"] = str(CIFAR10_SUBSET)
        setattr(config, _SET_HERE, True)


def pytest_unconfigure(config):
    if getattr(config, _SET_HERE, False):
        os.environ.pop("ITERLIN_CIFAR10", None)


@pytest.fixture(scope="session")
def cifar_subset_path() -> Path:
    """The real CIFAR-10 subset directory (holds ``cifar-10-batches-py/``)."""
    if not (CIFAR10_SUBSET / "cifar-10-batches-py").is_dir():
        pytest.skip(f"the real CIFAR-10 subset is not at {CIFAR10_SUBSET}")
    return CIFAR10_SUBSET
