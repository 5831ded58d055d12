"""The learning-rate bound of linearised training: why large K can diverge where K = 1 does not.

Training the linearisation around θ_s, f_lin_s(θ, x) = f(θ_s, x) + J_s (θ − θ_s) (Eq. 3), on the
mean loss L̄(θ) = (1/N) Σ_i ℓ(f_lin_s(θ, x_i), y_i) has the parameter Hessian

    ∇²_θ L̄(θ) = (1/N) J_sᵀ H(θ) J_s =: G(θ),      H = blockdiag_i ∂²ℓ/∂f² at f_lin_s(θ, x_i),

exactly (f_lin_s is affine in θ, so no second derivative of the network enters): the generalised
Gauss–Newton (GGN) matrix of the network at θ_s. Gradient descent on the linear model with rate η
multiplies the error along G's top eigenvector by (1 − η λ_max(G)) per step, so it is stable only
for η < 2 / λ_max(G):

* MSE (H = I): the loss is quadratic and G constant; full-batch GD on the linear model diverges
  exactly when η > 2/λ_max(G) (given any error along that direction), and converges below.
* Cross-entropy: H = diag(p) − ppᵀ shrinks as the softmax saturates, so 2/λ_max(G(θ_s)) is the
  rate at which the linear model can *start*; below it, training only makes it safer.

The network itself (K = 1) is not bound in the same way: its sharpness moves with θ and SGD can
self-stabilise ("edge of stability"), so a rate K = 1 trains at can make every long-K run diverge.
Measured on the paper's CNN at initialisation (512 CIFAR-10 training images, seed 0):
λ_max(G) ≈ 37, a bound of 0.054 (see ``iterlin/experiments/fig3.py``, its cpu scale).

:func:`ggn_matvec` is G·v by one JVP and one VJP (never materialising J); :func:`ggn_sharpness`
is λ_max(G) by power iteration (G is positive semi-definite, so the iteration converges to its
largest eigenvalue); :func:`max_stable_lr` is 2/λ_max(G).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp

from .losses import Loss, get_loss
from .validate import check_int, check_xy

__all__ = ["ggn_matvec", "ggn_sharpness", "max_stable_lr"]


def _vdot(a, b):
    return sum(jnp.vdot(u, v) for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def ggn_matvec(apply_fn: Callable, params: Any, x, y, loss: str | Loss = "ce") -> Callable:
    """Return ``v ↦ G v`` with G = (1/N) Jᵀ H J at θ_s = ``params`` (the module's maths).

    ``v`` and the result are pytrees shaped like ``params``; ``x`` (N, ...), ``y`` (N,) integer
    labels or (N, O) targets. H·u is the Hessian of the mean loss with respect to the outputs,
    applied by forward-over-reverse differentiation of the :class:`~iterlin.losses.Loss`, so any
    loss of that form works. Pure and traceable.
    """
    per_example = get_loss(loss).per_example
    out, jvp_fn = jax.linearize(lambda p: apply_fn(p, x), params)
    _, vjp_fn = jax.vjp(lambda p: apply_fn(p, x), params)

    def mean_loss(o):
        return jnp.mean(per_example(o, y))

    def matvec(v):
        u = jvp_fn(v)
        hu = jax.jvp(jax.grad(mean_loss), (out,), (u,))[1]
        return vjp_fn(hu)[0]

    return matvec


def _unit(v):
    n = jnp.sqrt(_vdot(v, v))
    return jax.tree.map(lambda a: a / n, v)


@functools.lru_cache(maxsize=64)
def _power_step(apply_fn, loss):
    """One compiled power-iteration step per (apply_fn, loss): v ↦ (G v / ‖G v‖, vᵀ G v) for a
    unit v (the Rayleigh quotient of v). The iteration itself is a host loop: a compiled loop
    around the network's JVP and VJP took minutes to compile on CPU for the paper's CNN."""

    @jax.jit
    def step(params, x, y, v):
        gv = ggn_matvec(apply_fn, params, x, y, loss)(v)
        return _unit(gv), _vdot(v, gv)

    return step


def ggn_sharpness(apply_fn: Callable, params: Any, x, y, *, loss: str | Loss = "ce", iters: int = 100,
                  key=None) -> float:
    """λ_max of the GGN G = (1/N) Jᵀ H J at ``params`` on (x, y), by ``iters`` power iterations.

    The Hessian of the linear model's mean loss (exactly, module docstring); an estimate from
    below that tightens with ``iters`` (the Rayleigh quotient of the last iterate). ``key``: the
    start vector's PRNG key (default ``jax.random.key(0)``).
    """
    check_xy(x, y)
    iters = check_int(iters, "iters", minimum=1)
    key = jax.random.key(0) if key is None else key
    step = _power_step(apply_fn, get_loss(loss))
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(key, len(leaves))
    v = _unit(jax.tree.unflatten(treedef, [jax.random.normal(k, a.shape, a.dtype) for k, a in zip(keys, leaves)]))
    x, y = jnp.asarray(x), jnp.asarray(y)
    for _ in range(iters):
        v, rayleigh = step(params, x, y, v)
    return float(rayleigh)


def max_stable_lr(apply_fn: Callable, params: Any, x, y, *, loss: str | Loss = "ce", iters: int = 100,
                  key=None) -> float:
    """2 / λ_max(G): the largest rate at which gradient descent on the linearisation at ``params``
    does not diverge from its start (exact for MSE, the starting bound for cross-entropy).

    Example:
      For a linear model f(θ, X) = Xw with the MSE, J = X and H = I, so G = XᵀX/N, whatever w:

      >>> import jax.numpy as jnp, numpy as np
      >>> from iterlin import ggn_sharpness, max_stable_lr
      >>> def f(params, x):  # (N, 2) -> (N, 1)
      ...     return x @ params["w"]
      >>> x, y = jnp.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]), jnp.zeros((3, 1))
      >>> params = {"w": jnp.zeros((2, 1))}
      >>> round(ggn_sharpness(f, params, x, y, loss="mse", iters=50), 4)  # power iteration
      1.7676
      >>> round(float(np.linalg.eigvalsh(np.asarray(x.T @ x) / 3).max()), 4)  # λ_max(XᵀX/N), directly
      1.7676
      >>> round(max_stable_lr(f, params, x, y, loss="mse", iters=50), 4)  # 2/λ_max
      1.1315
    """
    return 2.0 / ggn_sharpness(apply_fn, params, x, y, loss=loss, iters=iters, key=key)
