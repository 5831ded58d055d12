"""The quintic regression task of Fig. 9: y = x⁵/32 − x³/2 + 2x − 1 on uniform points."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..validate import check_int
from .dataset import Dataset

__all__ = ["QUINTIC_HALF_WIDTH", "quintic", "quintic_fn"]


#: Half-width ``a`` of the quintic's input range ``[-a, a]``. The paper gives no range, only that
#: outputs lie in [-4, 4]. With ``f(x) = x⁵/32 − x³/2 + 2x`` odd, ``y = f − 1`` and
#: ``f' = 5x⁴/32 − 3x²/2 + 2 = 0`` at ``x² ∈ {1.6, 8}``, ``f`` rises to 1.62 at x = 1.26, falls to
#: 0 at x = 2√2 and then grows, reaching 3 (i.e. ``y(−a) = −4``) at a* = 3.62569. The widest
#: symmetric range inside the bound is therefore [−3.62569, 3.62569]; we use a = 3.625 = 29/8,
#: just inside it and exactly representable, so ``y ∈ [−3.995, 1.995]`` on [−a, a].
QUINTIC_HALF_WIDTH = 3.625


def quintic_fn(x):
    """The target of Fig. 9: ``y = x⁵/32 − x³/2 + 2x − 1`` (elementwise, NumPy or JAX)."""
    return x**5 / 32 - x**3 / 2 + 2 * x - 1


def quintic(
    n_train: int = 20,
    n_test: int = 1000,
    *,
    x_range: tuple[float, float] = (-QUINTIC_HALF_WIDTH, QUINTIC_HALF_WIDTH),
    dtype: Any = np.float32,
) -> Dataset:
    """The quintic regression task of Fig. 9: ``n_train`` and ``n_test`` uniformly spaced points.

    ``x = linspace(lo, hi, n)`` (endpoints included) for both splits, ``y = quintic_fn(x)``
    (computed in float64, then cast to ``dtype``). Returns ``Dataset`` with all four arrays of
    shape ``(n, 1)`` and dtype ``dtype``. Default range: :data:`QUINTIC_HALF_WIDTH`.
    """
    n_train = check_int(n_train, "n_train", minimum=1)
    n_test = check_int(n_test, "n_test", minimum=1)
    try:
        lo, hi = (float(v) for v in x_range)
    except (TypeError, ValueError):
        raise ValueError(
            f"x_range={x_range!r} is not allowed: x_range must be a pair (lo, hi) of numbers"
        ) from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"x_range={x_range!r} is not allowed: x_range must be finite with lo < hi")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt.kind != "f":
        raise TypeError(f"dtype={dtype!r} is not allowed: dtype must be a floating dtype")

    def split(n):
        x = np.linspace(lo, hi, n, dtype=np.float64)[:, None]
        return x.astype(dt), quintic_fn(x).astype(dt)

    x_train, y_train = split(n_train)
    x_test, y_test = split(n_test)
    return Dataset(x_train, y_train, x_test, y_test)
