"""Fixtures of the experiment-layer tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_cifar(cifar_subset_path):
    """16 training and 8 test images of the real CIFAR-10 subset (skipped without it)."""
    from iterlin.data import load_cifar10

    return load_cifar10(16, 8)


@pytest.fixture
def figures():
    """pyplot on the Agg backend, for a figure's plotting code; every figure opened is closed after."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    yield plt
    plt.close("all")


@pytest.fixture
def ax(figures):
    """The Axes of a new figure (:func:`figures`)."""
    return figures.subplots()[1]
