"""The checks of the training entry points' arguments (validated once, before any compute).

A private module of :mod:`iterlin.training` (see its docstring), which exports what users need.
"""

from __future__ import annotations

import math
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..losses import get_loss
from ..validate import check_int, check_steps, check_xy

__all__ = ["check_pair", "check_train_args", "validate_common", "check_optimizer", "check_reset", "check_hyperparams",
           "check_microbatch"]


def check_pair(data, name: str) -> tuple:
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        got = f"a {type(data).__name__}" + (f" of length {len(data)}" if isinstance(data, (tuple, list)) else "")
        raise ValueError(f"{name} must be a pair (x, y) of arrays; got {got}.")
    return tuple(data)


def check_train_args(data, steps, loss, batch_size, eval_data) -> None:
    """Validate what ``train``, ``train_sweep`` and ``gauss_newton.gauss_newton_train`` share, before
    their initial refresh.

    ``data`` and ``eval_data`` are ``(x, y)`` pairs, ``steps`` a positive count, ``batch_size`` None or
    in 1 … len(x), ``loss`` a known loss; a bad one raises an error naming it. :func:`fit` checks the rest.
    """
    x, y = (jnp.asarray(a) for a in check_pair(data, "data"))
    if eval_data is not None:
        eval_data = tuple(jnp.asarray(a) for a in check_pair(eval_data, "eval_data"))
    validate_common(x, y, steps, batch_size, eval_data)
    get_loss(loss)


def validate_common(x, y, steps, batch_size, eval_data):
    check_xy(x, y)
    steps = check_steps(steps)
    if batch_size is not None:
        batch_size = check_int(batch_size, "batch_size", minimum=1, maximum=x.shape[0])
    if eval_data is not None:
        check_xy(*eval_data, xname="eval_data x", yname="eval_data y")
    return steps, batch_size


def check_optimizer(optimizer):
    if not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(f"optimizer={optimizer!r} is not allowed: optimizer must be an optax GradientTransformation")
    return optimizer


def check_microbatch(microbatch) -> int | None:
    """``microbatch``: None (the whole batch at once) or a chunk size, an integer ≥ 1."""
    return None if microbatch is None else check_int(microbatch, "microbatch", minimum=1)


def check_reset(reset_optimizer) -> bool:
    if not isinstance(reset_optimizer, (bool, np.bool_)):
        raise ValueError(f"reset_optimizer={reset_optimizer!r} is not allowed: reset_optimizer must be True or False")
    return bool(reset_optimizer)


def check_hyperparams(hyperparams, optimizer: optax.GradientTransformation, params, runs: int) -> dict:
    """:func:`train_sweep`'s per-run hyperparameters as ``{name: [R floats]}`` (``{}`` for None).

    Allowed: a mapping from names of the optimizer's injected hyperparameters (the float scalars of
    its state's ``hyperparams``: an ``optax.inject_hyperparams`` optimizer) to ``runs`` finite real
    numbers each, one per run. ``params`` is the stacked θ_0 (R, ...); only its shapes are read
    (``jax.eval_shape`` of ``optimizer.init`` on one run: nothing is computed).
    """
    if hyperparams is None:
        return {}

    def fail(why: str) -> ValueError:
        return ValueError(f"hyperparams={hyperparams!r} is not allowed: {why}")

    if not isinstance(hyperparams, Mapping):
        raise fail("hyperparams must be a mapping {name: one value per run}, or None")
    state = jax.eval_shape(lambda p: optimizer.init(jax.tree.map(lambda a: a[0], p)), params)
    known = getattr(state, "hyperparams", None)
    if not isinstance(known, Mapping):
        raise fail("the optimizer's state holds no hyperparams; make it with optax.inject_hyperparams, e.g. "
                   "optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)")
    floats = sorted(k for k, v in known.items() if v.shape == () and jnp.issubdtype(v.dtype, jnp.floating))
    out = {}
    for name, values in hyperparams.items():
        if name not in floats:
            raise fail(f"{name!r} is not a float hyperparameter of the optimizer (it has {floats})")
        if isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__len__") or len(values) != runs:
            raise fail(f"hyperparams[{name!r}] must be a sequence of {runs} numbers, one per run (len(K))")
        if not all(map(_finite_real, values)):
            raise fail(f"hyperparams[{name!r}] must hold finite real numbers")
        out[name] = [float(v) for v in values]
    return out


def _finite_real(value) -> bool:
    """A finite real scalar (Python, NumPy or 0-d JAX), never a bool or a string."""
    if isinstance(value, (bool, np.bool_, str, bytes)) or np.ndim(value) != 0:
        return False
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
