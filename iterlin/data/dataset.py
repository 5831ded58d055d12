"""The train/test split every loader returns (:class:`Dataset`)."""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import numpy as np

__all__ = ["Dataset"]


class Dataset(NamedTuple):
    """A train/test split as NumPy arrays (also a JAX pytree).

    CIFAR-10 (:func:`load_cifar10`): ``x`` is ``(N, 32, 32, 3)`` float32 NHWC standardised per
    channel, ``y`` is ``(N,)`` int32 class indices. :func:`read_cifar10` gives the same with
    ``x`` as raw ``uint8``. Quintic (:func:`quintic`): ``x`` and ``y`` are ``(N, 1)``.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    @property
    def fingerprint(self) -> str:
        """sha256 (hex) of the four arrays (field name, dtype, shape and C-order bytes of each).

        Equal fingerprints mean bit-identical data; use it as a cache key.
        """
        h = hashlib.sha256()
        for name, value in zip(self._fields, self, strict=True):
            a = np.ascontiguousarray(np.asarray(value))
            h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
            h.update(a.reshape(-1).view(np.uint8))
        return h.hexdigest()
