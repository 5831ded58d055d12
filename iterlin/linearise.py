"""The linearisation of a network around θ_s (Sec. 1 and 3 of the paper).

    f_lin_s(θ, x) = f(θ_s, x) + J(θ_s, x) · (θ − θ_s),      J = ∂f/∂θ at θ_s,

computed with one forward-mode product (``jax.jvp``), never by materialising J. Differentiating
f_lin with respect to θ transposes that jvp, i.e. gives Jᵀ·g by one reverse pass at θ_s, so a
gradient step on the linear model costs about one forward, one jvp and one vjp.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from .memo import memoise
from .tree import tree_sub

__all__ = ["linearise", "linearised_apply", "transpose_apply", "linearised_predict"]

ApplyFn = Callable[[Any, Any], Any]


def linearised_apply(apply_fn: ApplyFn, params_s: Any, params: Any, x: Any):
    """f_lin evaluated with θ_s as an explicit (traceable) argument.

    Inside jitted training steps θ_s is part of the carried state, so re-linearising is a value
    change, never a re-compilation. Shapes: ``x`` (N, ...), output as ``apply_fn``: (N, O).
    """
    f0, df = jax.jvp(lambda p: apply_fn(p, x), (params_s,), (tree_sub(params, params_s),))
    return f0 + df


def linearise(apply_fn: ApplyFn, params_s: Any) -> ApplyFn:
    """Return ``f_lin(params, x) = f(params_s, x) + J(params_s, x)·(params − params_s)``.

    Like ``neural_tangents.linearize``: ``f_lin`` has the same ``apply_fn(params, x)`` signature
    as the network, agrees with it at ``params_s`` and is affine in ``params``.

    Example:
      A two-layer MLP, f(θ, x) = tanh(x W₁ + b₁) W₂, with θ a dict of arrays (P = 12), on N = 4
      inputs. ``f_lin`` equals f at θ_s; a step δ away it differs from f by O(‖δ‖²):

      >>> import jax, jax.numpy as jnp, numpy as np
      >>> from iterlin import linearise
      >>> def f(params, x):  # (N, 1) -> (N, 1)
      ...     return jnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"]
      >>> params_s = {"w1": jnp.array([[1.0, -2.0, 0.5, 1.5]]), "b1": jnp.array([0.0, 0.5, -0.5, 0.2]),
      ...             "w2": jnp.array([[1.0], [0.5], [-1.0], [0.3]])}
      >>> x = jnp.array([[-1.0], [-0.3], [0.4], [1.0]])
      >>> f_lin = linearise(f, params_s)
      >>> bool(jnp.allclose(f_lin(params_s, x), f(params_s, x)))
      True
      >>> params = jax.tree.map(lambda a: a + 0.1, params_s)  # θ = θ_s + δ
      >>> print(np.asarray(f_lin(params, x)).ravel().round(3), np.asarray(f(params, x)).ravel().round(3))
      [0.095 0.626 0.85  0.578] [0.095 0.645 0.884 0.605]
    """

    def f_lin(params, x):
        return linearised_apply(apply_fn, params_s, params, x)

    return f_lin


@memoise
def transpose_apply(apply_fn: ApplyFn) -> Callable:
    """``(params, x, a) -> Jᵀa`` with J = ∂f(params, x)/∂θ: one VJP over the batch (``a`` of the
    outputs' shape, or flat (N·O,) example-major, cast to the outputs' dtype), a pytree like
    ``params``. Jitted once per ``apply_fn``. The parameter update of every function-space solve
    (θ = θ_s − Jᵀa: the closed-form flow, the Gauss–Newton step, the flow under a general loss)."""
    def pull(params, x, a):
        out, vjp = jax.vjp(lambda p: apply_fn(p, x), params)
        return vjp(a.reshape(out.shape).astype(out.dtype))[0]
    return jax.jit(pull)


@memoise
def linearised_predict(apply_fn: ApplyFn) -> Callable:
    """``(θ_s, θ, x) -> argmax f_lin_s(θ, x)`` (N,): the linear model's predicted classes (one JVP),
    jitted once per ``apply_fn``."""
    return jax.jit(lambda ps, p, xb: jnp.argmax(linearised_apply(apply_fn, ps, p, xb), -1))
