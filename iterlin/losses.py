"""Losses and metrics, applied to network or linearised outputs.

For classification the softmax and cross-entropy are applied to the (linearised) logits and are
never linearised themselves (Sec. 4, Appendix A): the model is affine in θ, the loss is not.
MSE is the paper's ½‖f − Y‖² per example, averaged over examples for training
(the Gauss–Newton module uses the summed form of Eq. 5–6 directly).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from .validate import check_choice

__all__ = ["Loss", "get_loss", "LOSSES", "mse_targets"]


class Loss(NamedTuple):
    """A loss by name: ``per_example(out, y) -> (N,)`` and ``metrics(out, y) -> dict`` of sums."""

    name: str
    per_example: Callable
    metrics: Callable


def mse_targets(out, y):
    """The MSE targets Y for outputs ``out`` (N, O): y itself, reshaped to (N, O) and cast to
    ``out``'s dtype, or one-hot rows for integer class labels y (N,) (regressing onto class outputs).

    The one definition used by the losses here, Gauss–Newton (g = f − Y) and the closed forms.
    """
    if jnp.issubdtype(y.dtype, jnp.integer):
        return jax.nn.one_hot(y, out.shape[-1], dtype=out.dtype)
    return y.reshape(out.shape).astype(out.dtype)


def _ce_per_example(out, y):
    logp = jax.nn.log_softmax(out, axis=-1)
    return -jnp.take_along_axis(logp, y[:, None].astype(jnp.int32), axis=-1)[:, 0]


def _mse_per_example(out, y):
    return 0.5 * jnp.sum((out - mse_targets(out, y)) ** 2, axis=-1)


def _metrics(per_example):
    def metrics(out, y, weight=None):
        """Weighted sums over the batch (divide by the total weight to get means).

        ``loss``; ``acc`` for integer labels; ``sq_err`` (squared error averaged over outputs, so
        that RMSE = sqrt(sum / N)) for real targets. ``weight`` (N,) masks padding.
        """
        w = jnp.ones(out.shape[0], out.dtype) if weight is None else weight.astype(out.dtype)
        sums = {"loss": jnp.sum(w * per_example(out, y))}
        if jnp.issubdtype(y.dtype, jnp.integer):
            sums["acc"] = jnp.sum(w * (jnp.argmax(out, -1) == y))
        else:
            err = jnp.mean((out - mse_targets(out, y)) ** 2, axis=-1)
            sums["sq_err"] = jnp.sum(w * err)
        return sums

    return metrics


LOSSES = {
    "ce": Loss("ce", _ce_per_example, _metrics(_ce_per_example)),
    "mse": Loss("mse", _mse_per_example, _metrics(_mse_per_example)),
}


def get_loss(loss: str | Loss) -> Loss:
    """``"ce"`` (softmax cross-entropy on integer labels) or ``"mse"`` (½‖f − y‖²).

    Example:
      Per-example losses of outputs (N, O) = (2, 2); with integer labels the MSE regresses onto
      one-hot rows (:func:`mse_targets`):

      >>> import jax.numpy as jnp, numpy as np
      >>> from iterlin import get_loss
      >>> out, y = jnp.array([[2.0, 0.0], [0.0, 1.0]]), jnp.array([0, 1])
      >>> print(np.asarray(get_loss("ce").per_example(out, y)).round(4))  # −log softmax(out)[y]
      [0.1269 0.3133]
      >>> print(np.asarray(get_loss("mse").per_example(out, y)).round(4))  # ½‖out − onehot(y)‖²
      [0.5 0. ]
    """
    if isinstance(loss, Loss):
        return loss
    return LOSSES[check_choice(loss, "loss", tuple(LOSSES))]
