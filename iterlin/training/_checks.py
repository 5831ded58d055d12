"""The checks of the training entry points' arguments (validated once, before any compute).

A private module of :mod:`iterlin.training` (see its docstring), which exports what users need.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax

from ..losses import get_loss
from ..validate import check_int, check_steps, check_xy

__all__ = ["check_pair", "check_train_args", "validate_common", "check_optimizer", "check_reset"]


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


def check_reset(reset_optimizer) -> bool:
    if not isinstance(reset_optimizer, (bool, np.bool_)):
        raise ValueError(f"reset_optimizer={reset_optimizer!r} is not allowed: reset_optimizer must be True or False")
    return bool(reset_optimizer)
