"""Closed forms for MSE on the linearised model (Appendix B), and the K ↔ λ bridge (Sec. 3.3).

Everything here is for the SUMMED loss L(θ) = ½‖f_lin(θ, X) − Y‖² of one linearisation at θ_s,
with J = ∂f/∂θ at θ_s (N·O × P, example-major), the empirical NTK Θ = JJᵀ (N·O × N·O, Eq. 2),
its eigendecomposition Θ = Σ_i σ_i u_i u_iᵀ, and the initial residual r₀ = f(θ_s, X) − Y.
Gradient descent, gradient flow and damped Gauss–Newton started at θ_s all move θ inside the row
space of J and act on each NTK eigen-direction independently:

    θ − θ_s = −Jᵀ Σ_i φ(σ_i) u_i u_iᵀ r₀,      f_lin − Y = Σ_i (1 − σ_i φ(σ_i)) u_i u_iᵀ r₀,

with the spectral filter φ (:func:`spectral_update` applies any filter, with the spectral solve of
:mod:`iterlin.analysis.jacobian` that the Gauss–Newton step uses too):

* K steps of GD with step η (:func:`k_step_gd`):    φ(σ) = (1 − (1 − ησ)^K)/σ     (→ Kη as σ → 0)
* gradient flow for time t (Eq. 18):                φ(σ) = (1 − e^{−ησt})/σ        (→ ηt)
* damped Gauss–Newton, Eq. 6 (λ):                   φ(σ) = 1/(σ + λ)
* t → ∞, K → ∞ or λ → 0 (Eq. 5, 19):                φ(σ) = 1/σ  (minimum-norm step; Θ⁻¹ on
  its range: eigenvalues below N·O·ε·max σ are treated as exact zeros).

UNITS. :func:`iterlin.training.train` minimises the MEAN over the N examples of ½‖f − y‖², so
one ``train`` step with SGD learning rate η' equals one step here with η = η'/N.

The bridge between K and λ (:func:`equivalent_damping`): in terms of the fraction of the residual
removed along u_i, ρ(σ) = σφ(σ), K-step GD gives 1 − (1 − ησ)^K ≈ 1 − e^{−Kησ} and damped GN
gives σ/(σ + λ). Both are ≈ 0 for σ ≪ 1/(Kη) resp. σ ≪ λ and ≈ 1 above: with λ ≈ 1/(Kη)
(the default answer) they switch at the same scale, so more frequent re-linearisation (smaller
K) corresponds to more damping. Given a spectrum the function instead returns the λ minimising
the weighted squared difference of the two ρ over the eigenvalues.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ..analysis.jacobian import eigh_psd, jacobian_matrix, maybe_jit, spectral_apply, spectral_filter
from ..losses import mse_targets
from ..precision import matmul
from ..validate import check_K, check_nonnegative, check_positive, check_xy

__all__ = [
    "gd_filter",
    "flow_filter",
    "gn_filter",
    "equivalent_damping",
    "residual_spectrum",
    "spectral_update",
    "gradient_flow_outputs",
    "gradient_flow_params",
    "gradient_flow_limit",
    "k_step_gd",
]


# ------------------------------------------------------------------------------------------
# Spectral filters φ(σ) (element-wise over σ ≥ 0, arrays or scalars)
# ------------------------------------------------------------------------------------------


def _check_time(t, name="t"):
    """t ≥ 0, possibly math.inf (the limit)."""
    if isinstance(t, (int, float)) and not isinstance(t, bool) and t == math.inf:
        return math.inf
    return check_nonnegative(t, name)


def gd_filter(sigma, K, lr):
    """φ_K(σ) = (1 − (1 − ησ)^K)/σ, with its σ → 0 limit Kη: K GD steps of step η = ``lr``.

    ``K``: int ≥ 1 or ``math.inf`` (then 1/σ where 0 < ησ < 2). Computed as
    −expm1(K·log1p(−ησ))/σ for 0 < ησ < 1 (no cancellation for small σ), directly otherwise.
    """
    K = check_K(K)
    lr = check_positive(lr, "lr")
    sigma = jnp.maximum(jnp.asarray(sigma), 0.0)
    pos = sigma > 0
    s = jnp.where(pos, sigma, 1.0)
    z = lr * s
    small = z < 1
    stable = -jnp.expm1(K * jnp.log1p(-jnp.where(small, z, 0.0))) / s
    direct = (1.0 - jnp.power(1.0 - z, K)) / s
    return jnp.where(pos, jnp.where(small, stable, direct), K * lr)


def flow_filter(sigma, t, lr):
    """φ_t(σ) = (1 − e^{−ησt})/σ, with its σ → 0 limit ηt: gradient flow for time t (Eq. 18)."""
    t = _check_time(t)
    lr = check_positive(lr, "lr")
    sigma = jnp.maximum(jnp.asarray(sigma), 0.0)
    pos = sigma > 0
    s = jnp.where(pos, sigma, 1.0)
    return jnp.where(pos, -jnp.expm1(-lr * s * t) / s, lr * t)


def gn_filter(sigma, damping):
    """φ_λ(σ) = 1/(σ + λ): damped Gauss–Newton (Eq. 6); λ = 0 is Gauss–Newton (Eq. 5)."""
    damping = check_nonnegative(damping, "damping")
    sigma = jnp.maximum(jnp.asarray(sigma), 0.0)
    return 1.0 / (sigma + damping)


def equivalent_damping(K, lr, sigma=None, weights=None) -> float:
    """The damping λ that corresponds to K steps of GD with step η = ``lr`` (Sec. 3.3).

    Without ``sigma``: the scale approximation λ = 1/(Kη) (0 for K = ∞). The residual fractions
    removed per eigen-direction, ρ_GD(σ) = 1 − (1 − ησ)^K and ρ_GN(σ) = σ/(σ + λ), then both
    switch from 0 to 1 around σ ≈ 1/(Kη) = λ (they agree for σ ≫ 1/(Kη) and σ ≪ 1/(Kη) up to
    constants).

    With ``sigma`` (NTK eigenvalues, any shape) and optional ``weights`` (same shape, ≥ 0;
    default 1, e.g. ``coeffs**2`` from :func:`residual_spectrum` to weigh by the residual r₀):
    the λ ≥ 0 minimising Σ_i w_i (ρ_GD(σ_i) − ρ_GN(σ_i; λ))², i.e. the damped GN step whose action
    on the training residual is closest to that of K GD steps. A 1-D search on log λ (grid, then
    golden section) on the host. Returns a Python float.

    Example:
      K = 10 steps with η = 0.05 and damping λ = 1/(Kη) = 2 remove about the same fraction
      ρ(σ) = σφ(σ) of the residual along small and large eigenvalues σ, and differ in between:

      >>> import jax.numpy as jnp, numpy as np
      >>> from iterlin import equivalent_damping, gd_filter, gn_filter
      >>> lam = equivalent_damping(10, 0.05)
      >>> lam
      2.0
      >>> sigma = jnp.array([0.01, 0.1, 1.0, 10.0])
      >>> print(np.asarray(sigma * gd_filter(sigma, 10, 0.05)).round(3))  # ρ_GD
      [0.005 0.049 0.401 0.999]
      >>> print(np.asarray(sigma * gn_filter(sigma, lam)).round(3))  # ρ_GN
      [0.005 0.048 0.333 0.833]
    """
    K = check_K(K)
    lr = check_positive(lr, "lr")
    if sigma is None:
        return 0.0 if math.isinf(K) else 1.0 / (K * lr)
    sig = np.maximum(np.asarray(sigma, np.float64).ravel(), 0.0)
    w = np.ones_like(sig) if weights is None else np.asarray(weights, np.float64).ravel()
    if w.shape != sig.shape or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(
            f"weights (shape {w.shape}) is not allowed: weights must be finite, >= 0 and shaped like sigma "
            f"({sig.shape})."
        )
    if not np.all(np.isfinite(sig)):
        raise ValueError("sigma is not allowed: sigma must hold finite eigenvalues.")
    keep = (sig > 0) & (w > 0)
    if not np.any(keep):
        return 0.0 if math.isinf(K) else 1.0 / (K * lr)
    sig, w = sig[keep], w[keep]
    if lr * sig.max() >= 2:
        raise ValueError(
            f"lr={lr!r} is not allowed with this spectrum: lr * max(sigma) = {lr * sig.max():.3g} >= 2, so K "
            "steps of GD diverge and have no equivalent damping; lr must be < 2 / max(sigma)."
        )
    rho_gd = np.asarray(sig * gd_filter(sig, K, lr), np.float64)

    def loss(log_lam):
        lam = np.exp(log_lam)
        return float(np.sum(w * (rho_gd - sig / (sig + lam)) ** 2))

    lo, hi = np.log(sig.min()) - 10.0, np.log(sig.max()) + 10.0
    grid = np.linspace(lo, hi, 801)
    vals = np.array([loss(v) for v in grid])
    i = int(np.argmin(vals))
    a, b = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    gr = (math.sqrt(5) - 1) / 2
    c, d = b - gr * (b - a), a + gr * (b - a)
    for _ in range(100):
        if loss(c) < loss(d):
            b = d
        else:
            a = c
        c, d = b - gr * (b - a), a + gr * (b - a)
    best = 0.5 * (a + b)
    # λ = 0 (no damping) is the answer when the smallest λ on the grid is still the best.
    if i == 0 and float(np.sum(w * (rho_gd - 1.0) ** 2)) <= loss(best):
        return 0.0
    return float(np.exp(best))


# ------------------------------------------------------------------------------------------
# The linearised least-squares problem in NTK coordinates
# ------------------------------------------------------------------------------------------


def _problem(apply_fn, params_s, x, y):
    """J (N·O × P), r₀ = f(θ_s) − Y (N·O,), θ_s raveled, unravel, and Θ = JJᵀ = U diag(σ) Uᵀ."""
    check_xy(x, y)
    x, y = jnp.asarray(x), jnp.asarray(y)
    flat, unravel = ravel_pytree(params_s)
    J, r0, sigma, U = maybe_jit(_ntk_problem, apply_fn)(apply_fn, params_s, x, y)
    return J, r0, flat, unravel, sigma, U


def _ntk_problem(apply_fn, params_s, x, y):
    out = apply_fn(params_s, x).reshape(x.shape[0], -1)
    r0 = (out - mse_targets(out, y)).reshape(-1)
    J = jacobian_matrix(apply_fn, params_s, x)
    sigma, U, _ = eigh_psd(matmul(J, J.T))
    return J, r0, sigma, U


def residual_spectrum(apply_fn: Callable, params_s: Any, x, y):
    """NTK eigenvalues σ (N·O,) ascending and the residual's coordinates c = Uᵀr₀ (N·O,).

    The training residual of the linear model after a spectral update with filter φ is
    Σ_i (1 − σ_i φ(σ_i)) c_i u_i; ``equivalent_damping(K, lr, sigma, weights=c**2)`` uses them.
    """
    _, r0, _, _, sigma, U = _problem(apply_fn, params_s, x, y)
    return sigma, matmul(U.T, r0)


def spectral_update(apply_fn: Callable, params_s: Any, x, y, phi: Callable):
    """θ = θ_s − Jᵀ U diag(φ(σ)) Uᵀ r₀ for a spectral filter ``phi(sigma) -> (N·O,)``.

    Directions with σ below N·O·ε·max σ (numerically null directions of Θ, where Jᵀu ≈ 0) are
    dropped. Returns parameters with the structure of ``params_s``.
    """
    J, r0, flat, unravel, sigma, U = _problem(apply_fn, params_s, x, y)
    delta = spectral_apply(J, U, spectral_filter(sigma, phi), r0)
    return unravel(flat + delta.astype(flat.dtype))


# ------------------------------------------------------------------------------------------
# Appendix B and K-step GD
# ------------------------------------------------------------------------------------------


def gradient_flow_outputs(theta_kernel, f0, y, t, lr):
    """f_t = Y + exp(−ηΘt)(f_s − Y) on the training inputs (Eq. 14).

    Args:
      theta_kernel: Θ = JJᵀ (N·O × N·O), example-major. f0: f(θ_s, X), (N, O) or (N·O,).
      y: targets, shaped like ``f0`` (or integer labels (N,), read as one-hot).
      t: time ≥ 0, a scalar or an array of times (then the result has shape t.shape + f0.shape).
      lr: η > 0 for the summed loss (``train``'s learning rate / N).

    Example:
      With a diagonal kernel each output decays to its target at the rate ησ of its eigenvalue:

      >>> import jax.numpy as jnp, numpy as np
      >>> from iterlin import gradient_flow_outputs
      >>> theta = jnp.array([[2.0, 0.0], [0.0, 0.5]])  # Θ, N·O = 2
      >>> f0, y = jnp.ones((2, 1)), jnp.zeros((2, 1))
      >>> ft = gradient_flow_outputs(theta, f0, y, t=jnp.array([0.0, 1.0]), lr=1.0)
      >>> print(np.asarray(ft[..., 0]).round(3))  # rows t = 0, 1: (e^{−2t}, e^{−t/2})
      [[1.    1.   ]
       [0.135 0.607]]
    """
    lr = check_positive(lr, "lr")
    f0 = jnp.asarray(f0)
    y = jnp.asarray(y)
    theta = jnp.asarray(theta_kernel)
    if theta.ndim != 2 or theta.shape[0] != theta.shape[1] or theta.shape[0] != f0.size:
        raise ValueError(
            f"theta_kernel has shape {theta.shape}: it must be square (N·O × N·O) with N·O = f0.size = {f0.size}."
        )
    t = jnp.asarray(t)
    if not bool(jnp.all(t >= 0)):
        raise ValueError(f"t={t!r} is not allowed: t must be >= 0.")
    f2 = f0.reshape(f0.shape[0], -1)
    target = mse_targets(f2, y).reshape(-1)
    sigma, U, _ = eigh_psd(theta)
    c = matmul(U.T, f2.reshape(-1) - target)
    decay = jnp.exp(-lr * sigma * t[..., None])  # t.shape + (N·O,)
    ft = target + matmul(decay * c, U.T)
    return ft.reshape(t.shape + f0.shape)


def gradient_flow_params(apply_fn: Callable, params_s: Any, x, y, t, lr):
    """θ_t = θ_s − Jᵀ Θ⁻¹(I − e^{−ηΘt})(f_s − Y) (Eq. 18): gradient flow on the linear model.

    Θ⁻¹(I − e^{−ηΘt}) is applied spectrally as φ(σ) = (1 − e^{−ησt})/σ (limit ηt on null
    directions), so it is defined for singular Θ. ``t`` ≥ 0 scalar (``math.inf``: Eq. 19);
    ``lr`` = η for the summed loss.

    Example:
      With N·O = 4 < P = 12 the flow on the linearisation reaches the targets as t → ∞
      (the minimum-norm interpolant, Eq. 19), and its residual shrinks along the way:

      >>> import math
      >>> import jax.numpy as jnp
      >>> from iterlin import gradient_flow_limit, gradient_flow_params, linearise, tree_allclose
      >>> def f(params, x):  # a two-layer MLP: (N, 1) -> (N, 1), P = 12
      ...     return jnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"]
      >>> params = {"w1": jnp.array([[1.0, -2.0, 0.5, 1.5]]), "b1": jnp.array([0.0, 0.5, -0.5, 0.2]),
      ...           "w2": jnp.array([[1.0], [0.5], [-1.0], [0.3]])}
      >>> x = jnp.array([[-1.0], [-0.3], [0.4], [1.0]])
      >>> y = jnp.sin(3 * x)
      >>> f_lin = linearise(f, params)
      >>> for t in (0.0, 1.0, 10.0, math.inf):
      ...     theta_t = gradient_flow_params(f, params, x, y, t, lr=0.5)
      ...     print(t, round(float(jnp.abs(f_lin(theta_t, x) - y).max()), 3))
      0.0 1.39
      1.0 0.654
      10.0 0.442
      inf 0.0
      >>> tree_allclose(theta_t, gradient_flow_limit(f, params, x, y))
      True
    """
    t = _check_time(t)
    lr = check_positive(lr, "lr")
    if math.isinf(t):
        return gradient_flow_limit(apply_fn, params_s, x, y)
    return spectral_update(apply_fn, params_s, x, y, lambda s: flow_filter(s, t, lr))


def gradient_flow_limit(apply_fn: Callable, params_s: Any, x, y):
    """θ_∞ = θ_s − JᵀΘ⁺(f_s − Y) (Eq. 19): the minimum-norm solution of the linearised problem.

    Equals the undamped Gauss–Newton step (Eq. 5) when N·O ≤ P; Θ⁺ is the pseudo-inverse
    (eigenvalues below N·O·ε·max σ are zeros).
    """
    return spectral_update(apply_fn, params_s, x, y, lambda s: 1.0 / s)


def k_step_gd(apply_fn: Callable, params_s: Any, x, y, K, lr):
    """θ_K: exactly K steps of full-batch GD with step η on ½‖f_lin − Y‖² (summed), from θ_s.

    δ_K = −Jᵀ Θ⁻¹[I − (I − ηΘ)^K] r₀, applied spectrally with φ(σ) = (1 − (1 − ησ)^K)/σ (limit Kη).
    ``lr`` = η for the summed loss: ``train(..., optimizer=optax.sgd(lr'), loss="mse")`` with K
    steps and no re-linearisation in between gives this with η = lr'/N.
    """
    K = check_K(K)
    lr = check_positive(lr, "lr")
    return spectral_update(apply_fn, params_s, x, y, lambda s: gd_filter(s, K, lr))
