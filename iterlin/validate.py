"""Up-front validation of user-facing arguments.

Every public entry point (library functions and notebook parameters) checks its arguments here
before any compute, so that a bad value gives one clear message naming the parameter, the value
given and what is allowed, never a traceback from inside JAX.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any

__all__ = [
    "MAX_STEPS",
    "MAX_SEED",
    "check_K",
    "check_seed",
    "check_steps",
    "check_positive",
    "check_nonnegative",
    "check_int",
    "check_choice",
    "check_xy",
]


#: The most optimisation steps a run may take: step counters (``TrainState.step``, the period K,
#: the loop index t and t + 1) are int32 on the device, and the largest value they take is
#: ``steps`` itself, so ``steps <= 2**31 - 1``.
MAX_STEPS = 2**31 - 1

#: The largest seed: ``jax.random.PRNGKey(seed)`` with 32-bit keys (JAX's default) keeps only the
#: low 32 bits of the seed, so seeds 0 … 2**32 − 1 are exactly the ones that give distinct keys
#: (seed 2**32 would repeat seed 0's keys).
MAX_SEED = 2**32 - 1


def _fail(name: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"{name}={value!r} is not allowed: {name} must be {allowed}.")


def _as_real(name: str, value: Any, allowed: str) -> float:
    """A real number (Python, NumPy or 0-d JAX scalar), never a bool or a string."""
    if isinstance(value, bool) or isinstance(value, (str, bytes)):
        raise _fail(name, value, allowed)
    if not isinstance(value, numbers.Real):
        try:  # 0-d numpy / jax arrays
            if getattr(value, "shape", None) == ():
                return float(value)
        except (TypeError, ValueError):
            pass
        raise _fail(name, value, allowed)
    try:
        return float(value)
    except OverflowError:  # an int beyond the float range, e.g. 10**400: infinite for every check here
        return math.inf if value > 0 else -math.inf


def check_K(K: Any, name: str = "K") -> int | float:
    """Re-linearisation period K (Algorithm 1).

    Allowed: an integer ≥ 1, an integral float ≥ 1 (papermill passes ``-p K 5e6`` as ``5000000.0``),
    or ``math.inf`` (never re-linearise: training the fixed linearisation). Returns an ``int`` or
    ``math.inf``; a period above :data:`MAX_STEPS` (the most steps a run may take, so it can never
    re-linearise) is returned as ``math.inf``, so every finite period fits the int32 counter.
    Rejected: 0, negatives, 2.5, "abc", nan, bools.
    """
    allowed = "an integer >= 1 (an integral float such as 5e6 is accepted) or math.inf"
    value = _as_real(name, K, allowed)
    if math.isnan(value):
        raise _fail(name, K, allowed)
    if math.isinf(value):
        if value > 0:
            return math.inf
        raise _fail(name, K, allowed)
    if value < 1 or value != int(value):
        raise _fail(name, K, allowed)
    if value > MAX_STEPS:
        return math.inf  # beyond any trainable number of steps (MAX_STEPS): identical to never re-linearising
    return int(value)


def check_positive(value: Any, name: str) -> float:
    """A finite real number > 0 (learning rates, step sizes)."""
    allowed = "a finite number > 0"
    v = _as_real(name, value, allowed)
    if not math.isfinite(v) or v <= 0:
        raise _fail(name, value, allowed)
    return v


def check_nonnegative(value: Any, name: str, allow_inf: bool = False) -> float:
    """A finite real number ≥ 0 (damping); with ``allow_inf``, ``math.inf`` too (a tolerance).

    Rejected: negatives, nan, −∞, bools, strings (and +∞ unless ``allow_inf``).
    """
    allowed = "a number >= 0 or math.inf" if allow_inf else "a finite number >= 0"
    v = _as_real(name, value, allowed)
    if math.isnan(v) or v < 0 or (math.isinf(v) and not allow_inf):
        raise _fail(name, value, allowed)
    return v


def check_int(value: Any, name: str, minimum: int = 1, maximum: int | None = None, why: str = "") -> int:
    """An integer in [minimum, maximum] (integral floats such as 1e4 are accepted).

    ``why``: the reason for the bounds, appended to the message in parentheses.
    """
    allowed = f"an integer >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
    if why:
        allowed += f" ({why})"
    v = _as_real(name, value, allowed)
    if not math.isfinite(v) or v != int(v) or v < minimum or (maximum is not None and v > maximum):
        raise _fail(name, value, allowed)
    if isinstance(value, numbers.Integral):  # exact: float(2**53 + 1) would round
        v = int(value)
        if v < minimum or (maximum is not None and v > maximum):
            raise _fail(name, value, allowed)
    return int(v)


def check_steps(value: Any, name: str = "steps") -> int:
    """A number of optimisation steps: an integer in [1, :data:`MAX_STEPS`]."""
    return check_int(value, name, minimum=1, maximum=MAX_STEPS, why="step counters are int32")


def check_seed(value: Any, name: str = "seed", count: int = 1) -> int:
    """A seed for ``jax.random.PRNGKey``: an integer in [0, :data:`MAX_SEED`].

    ``count`` seeds ``value, …, value + count − 1`` are used (Figs. 1, 9): the last must be in range too.
    """
    top = MAX_SEED - (count - 1)
    why = "jax.random.PRNGKey distinguishes exactly the seeds 0 .. 2**32 - 1"
    if count > 1:
        why += f"; seeds {name} .. {name} + {count - 1} are used"
    return check_int(value, name, minimum=0, maximum=top, why=why)


def check_choice(value: Any, name: str, choices: Iterable[Any]) -> Any:
    """One of a fixed set of values (scale, model, loss, BatchNorm mode, solver, ...)."""
    choices = tuple(choices)
    if not isinstance(value, str) or value not in choices:
        raise _fail(name, value, "one of " + ", ".join(repr(c) for c in choices))
    return value


def check_xy(x: Any, y: Any, xname: str = "x", yname: str = "y") -> None:
    """x and y must have the same number of examples (leading axis), and at least one."""
    xs, ys = getattr(x, "shape", None), getattr(y, "shape", None)
    if xs is None or ys is None or len(xs) == 0 or len(ys) == 0:
        raise ValueError(
            f"{xname} and {yname} must be arrays with a leading example axis; "
            f"got {xname} of shape {xs} and {yname} of shape {ys}."
        )
    if xs[0] != ys[0]:
        raise ValueError(
            f"{xname} has {xs[0]} examples (shape {tuple(xs)}) but {yname} has {ys[0]} "
            f"(shape {tuple(ys)}): they must have the same leading dimension."
        )
    if xs[0] == 0:
        raise ValueError(f"{xname} has no examples (shape {tuple(xs)}): at least one is needed.")
