"""Fixtures of the experiment-layer tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_cifar(cifar_subset_path):
    """16 training and 8 test images of the real CIFAR-10 subset (skipped without it)."""
    from iterlin.data import load_cifar10

    return load_cifar10(16, 8)
