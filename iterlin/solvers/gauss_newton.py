"""Damped (generalised) Gauss–Newton, the K → ∞ limit of iterative linearisation (Eq. 5–6).

One step re-linearises at the current θ and solves the linearised problem exactly:

    θ ← θ − α (JᵀHJ + λI)⁻¹ Jᵀg                                     (Eq. 6; λ = 0: Eq. 5)

with J = ∂f/∂θ the (N·O × P) Jacobian of the outputs on the batch, ordered example-major (row
n·O + o is output o of example n), g = ∂L/∂f (N·O,) and H = ∂²L/∂f² (N·O × N·O), for the loss
SUMMED over examples (not averaged: so that λ means what it means in the paper):

* ``loss="mse"``: L = ½‖f − Y‖², so H = I and g = f − Y: Eq. 6 literally.
* ``loss="ce"``: summed softmax cross-entropy, g = p − onehot(y) and H block-diagonal with the
  softmax Hessian diag(p) − ppᵀ per example: the generalised Gauss–Newton step.

For MSE the step is the ridge solution of the linearised problem,

    δ = argmin_δ ½‖f(θ) + Jδ − Y‖² + (λ/2)‖δ‖²,   (JᵀJ + λI)δ = −Jᵀ(f − Y),

i.e. the paper's penalty λ‖θ − θ_s‖² goes with its loss ‖f_lin − Y‖² (both without the ½, or
both with it); λ → ∞ with α ∝ λ is a gradient step, λ → 0 the Gauss–Newton step of Eq. 5.

Three solvers give the same δ (``solver=``):

* ``"kernel"``: dense, in kernel form. By the push-through identity
  (JᵀHJ + λI)⁻¹Jᵀ = Jᵀ(HΘ + λI)⁻¹ with the empirical NTK Θ = JJᵀ (N·O × N·O, Eq. 2),
  δ = −Jᵀa. J is materialised from per-example Jacobians (so ``apply_fn`` must treat examples
  independently, as any model in inference mode does), Θ = JJᵀ is eigendecomposed,
  Θ = U diag(σ) Uᵀ, and for MSE a = U diag(1/(σ + λ)) Uᵀg: the spectral solve of
  :func:`iterlin.analysis.jacobian.spectral_solve` with the filter φ(σ) = 1/(σ + λ). For CE (HΘ is not
  symmetric) the same δ is computed in the symmetric coordinates of the row space of J:
  a = U Σ^{-1/2} (C + λI)⁺ Σ^{1/2} Uᵀg with C = Σ^{1/2} UᵀHU Σ^{1/2}. Inverses are
  pseudo-inverses (eigenvalues of σ + λ below N·O·ε·(max σ + λ) are dropped), so λ = 0 gives the
  minimum-norm Gauss–Newton step, which in the over-parameterised case N·O < P is Eq. 19:
  θ − Jᵀ(JJᵀ)⁻¹(f − Y).
* ``"kernel_cg"``: conjugate gradients on (Θ + λI)a = g with matrix-free NTK–vector products
  Θv = J(Jᵀv) (one transposed jvp, one jvp), then δ = −Jᵀa. MSE only: with cross-entropy the
  kernel system HΘ + λI is not symmetric; CG on it in the Θ-inner product is exactly primal CG
  mapped by Jᵀ, so use ``"primal_cg"`` (same cost per iteration). λ = 0 works when Θ is
  non-singular (over-parameterised).
* ``"primal_cg"``: conjugate gradients on (JᵀHJ + λI)δ = −Jᵀg with products jvp → H → vjp.
  With λ = 0 it is singular when the rank bound of JᵀHJ, N·O (N·(O − 1) for CE), is below P;
  a ``ValueError`` is then raised (use a kernel solver for the minimum-norm step).

Both CG solvers use :func:`conjugate_gradient` (the iteration of
:func:`jax.scipy.sparse.linalg.cg`, started from x₀ = 0 with r₀ = b, so that the operator is never
applied to a zero vector): ``cg_tol``/``cg_maxiter`` bound the work (relative residual tolerance
1e-10 in float64, 1e-6 in float32 by default). Non-convergence is reported, not hidden: each solve
also returns its true relative residual ‖b − Ax‖/‖b‖ (one operator product more than the
iteration), and a residual above :data:`CG_RESIDUAL_SLACK` · ``cg_tol`` (λ = 0 with a singular
system that g is not in the range of: a wrong step; or an unreachable ``cg_tol``) warns,
:class:`CGConvergenceWarning`, unless ``cg_maxiter`` was given (a solve truncated by choice). A
compiled step cannot warn on a value, so the eager :func:`gauss_newton_step` checks it after the
step, and a training run keeps the largest residual of its steps in its state
(``GaussNewtonState.cg_residual``), which :func:`gauss_newton_train` checks once after training
(no host callback inside the compiled loop: it would keep the programs out of the persistent
compilation cache).

``solver="auto"``: ``"kernel"`` if N·O ≤ :data:`KERNEL_MAX_OUTPUTS` (4096) and the Jacobian has
at most :data:`KERNEL_MAX_JACOBIAN` (2²⁷) entries; otherwise CG in the smaller space:
``"primal_cg"`` if P ≤ N·O or the loss is CE, else ``"kernel_cg"``.

``damping_mode="relative"`` scales λ by the mean NTK diagonal, λ_abs = damping · tr(Θ)/(N·O)
(the mean of ‖∂f_{n,o}/∂θ‖², computed from per-example Jacobians for the CG solvers), which makes
λ comparable across architectures and widths.

Two spectral filters (``filter=``), one implementation of the step (``_gn_step``):

* ``"damped"`` (default): the hyperparameter h is the damping λ ≥ 0 and the step is Eq. 6 above.
* ``"flow"``: h is a time τ ≥ 0 (``math.inf`` allowed), MSE and the kernel solver only: the
  linearisation at θ is trained by gradient flow for time τ on ½‖f_lin − Y‖² (summed), in closed
  form, δ = −Jᵀ U diag(φ(σ)) Uᵀ(f − Y) with φ(σ) = (1 − e^{−στ})/σ (Eq. 18;
  :func:`iterlin.solvers.closed_form.gradient_flow_params` with η = 1). τ = ∞ gives φ = 1/σ, the
  minimum-norm Gauss–Newton step (Eq. 5, 19). K gradient-descent steps of size η on one
  linearisation approach it with τ = Kη (the small-step limit); its cost, one Jacobian and one
  eigendecomposition per step, does not grow with τ.

In both the update is scaled by the step size α (``step_size``), and the MSE kernel path and the
flow filter share one spectral solve (:func:`iterlin.analysis.jacobian.spectral_solve`).

Training. A run has its own typed state, :class:`GaussNewtonState` (θ, the step counter, the
divergence flags and h, a scalar array; no optimizer: the step is the solve), made by
:func:`init_gauss_newton_state`. :func:`make_gauss_newton_step` returns a pure step on it for the
one training loop :func:`iterlin.training.fit` (a :class:`~iterlin.training.RunState`: θ_s = θ,
K = 1 and the re-linearisation count are derived), committed through its one divergence guard
:func:`iterlin.training.commit_proposal`. h is traced: runs with different λ (or τ) are vmapped
together in one compilation (``fit(..., sweep=True)``, h of shape (R,)). :func:`gauss_newton_train`
does all of this for one value of ``damping`` or for a sequence of them (a sweep over stacked
parameters), Fig. 1 and Fig. 9. :func:`gauss_newton_step` is the eager one-step API; all of them
run the same ``_gn_step``.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ..conv import lower_convolutions
from ..analysis.jacobian import (  # noqa: F401 (flat_jacobian re-exported)
    eigh_psd,
    flat_jacobian,
    jacobian_matrix,
    maybe_jit,
    ntk_mean_diag,
    spectral_filter,
    spectral_solve,
)
from ..losses import Loss, get_loss, mse_targets
from ..precision import full_precision, matmul
from ..memo import memoise
from ..training import check_train_args, commit_proposal, fit
from ..tree import tree_size
from ..validate import check_choice, check_int, check_nonnegative, check_positive, check_xy

__all__ = [
    "SOLVERS",
    "GaussNewtonConfig",
    "DAMPING_MODES",
    "FILTERS",
    "KERNEL_MAX_OUTPUTS",
    "KERNEL_MAX_JACOBIAN",
    "flat_jacobian",
    "select_solver",
    "conjugate_gradient",
    "CGSolution",
    "CGConvergenceWarning",
    "CG_RESIDUAL_SLACK",
    "warn_cg_residual",
    "gauss_newton_step",
    "GaussNewtonState",
    "init_gauss_newton_state",
    "make_gauss_newton_step",
    "gauss_newton_train",
]

SOLVERS = ("auto", "kernel", "kernel_cg", "primal_cg")
DAMPING_MODES = ("absolute", "relative")
FILTERS = ("damped", "flow")
_GN_LOSSES = ("mse", "ce")

#: ``solver="auto"`` uses the dense kernel solver up to this many outputs N·O ...
KERNEL_MAX_OUTPUTS = 4096
#: ... and up to this many Jacobian entries N·O·P (2²⁷, i.e. 0.5 GiB in float32, 1 GiB in float64).
KERNEL_MAX_JACOBIAN = 2**27


# ------------------------------------------------------------------------------------------
# Validation (all in Python, before any compute)
# ------------------------------------------------------------------------------------------


def _loss_name(loss: str | Loss) -> str:
    name = loss.name if isinstance(loss, Loss) else loss
    return check_choice(name, "loss", _GN_LOSSES)


@dataclasses.dataclass(frozen=True)
class GaussNewtonConfig:
    """The static options of a Gauss–Newton step (see the module docstring), validated on construction.

    ``loss`` may be given as a :class:`~iterlin.losses.Loss` and is stored by name; with
    ``filter="flow"`` the solver is resolved to ``"kernel"``. Frozen and hashable, so a config is a
    static argument of ``jax.jit`` and a memo key. Raises ``ValueError`` naming the option, the value
    and what is allowed.
    """

    loss: str = "mse"
    filter: str = "damped"
    solver: str = "auto"
    damping_mode: str = "absolute"
    step_size: float = 1.0
    cg_tol: float | None = None
    cg_maxiter: int | None = None

    def __post_init__(self):
        loss = _loss_name(self.loss)
        filter = check_choice(self.filter, "filter", FILTERS)
        solver = check_choice(self.solver, "solver", SOLVERS)
        damping_mode = check_choice(self.damping_mode, "damping_mode", DAMPING_MODES)
        step_size = check_positive(self.step_size, "step_size")
        cg_tol = None if self.cg_tol is None else check_positive(self.cg_tol, "cg_tol")
        cg_maxiter = None if self.cg_maxiter is None else check_int(self.cg_maxiter, "cg_maxiter", minimum=1)
        if solver == "kernel_cg" and loss != "mse":
            raise ValueError(
                f"solver='kernel_cg' is not allowed with loss={loss!r}: the kernel system HΘ + λI is not "
                "symmetric for cross-entropy, so CG does not apply to it; use solver='primal_cg' (the same "
                "cost per iteration) or solver='kernel' (dense)."
            )
        if filter == "flow":
            if loss != "mse":
                raise ValueError(
                    f"loss={loss!r} is not allowed with filter='flow': the flow filter is the closed-form "
                    "gradient flow of the linearised MSE problem (Eq. 18); use loss='mse', or filter='damped'."
                )
            if solver not in ("auto", "kernel"):
                raise ValueError(
                    f"solver={solver!r} is not allowed with filter='flow': the flow filter needs the NTK's "
                    "eigendecomposition; use solver='kernel' (or 'auto')."
                )
            if damping_mode != "absolute":
                raise ValueError(
                    f"damping_mode={damping_mode!r} is not allowed with filter='flow': the flow time τ is "
                    "absolute; use damping_mode='absolute'."
                )
            solver = "kernel"
        for name, value in dict(loss=loss, filter=filter, solver=solver, damping_mode=damping_mode,
                                step_size=step_size, cg_tol=cg_tol, cg_maxiter=cg_maxiter).items():
            object.__setattr__(self, name, value)

    def record(self) -> dict:
        """The options as stored in a run's checkpoint config (under ``"gauss_newton"``)."""
        return {k: getattr(self, k) for k in ("filter", "step_size", "loss", "solver", "damping_mode", "cg_tol",
                                              "cg_maxiter")}


def _check_hyper(value, filter: str, name: str = "damping") -> float:
    """The per-run hyperparameter h: λ ≥ 0 finite (``"damped"``), or τ ≥ 0 or ``math.inf`` (``"flow"``)."""
    if filter == "damped":
        return check_nonnegative(value, name)
    try:
        return check_nonnegative(value, name)
    except ValueError:
        v = None
        if not isinstance(value, (str, bytes, bool, np.bool_)) and np.ndim(value) == 0:
            try:
                v = float(value)
            except (TypeError, ValueError):
                v = None
        if v == math.inf:
            return math.inf
        raise ValueError(
            f"{name}={value!r} is not allowed: with filter='flow' {name} is the flow time τ and must be a "
            "number >= 0 or math.inf."
        ) from None


def _is_sequence(value) -> bool:
    return not isinstance(value, (str, bytes, Mapping)) and hasattr(value, "__len__") and np.ndim(value) == 1


def _check_labels(loss: str, y) -> None:
    if loss == "ce" and not jnp.issubdtype(jnp.asarray(y).dtype, jnp.integer):
        raise ValueError(f"y has dtype {jnp.asarray(y).dtype}: loss='ce' needs integer class labels of shape (N,).")


def _check_not_singular(loss: str, n: int, n_out: int, p_size: int) -> None:
    """λ = 0 with primal CG: JᵀHJ (P × P) must not be singular by its rank bound."""
    rank_bound = n * n_out if loss == "mse" else n * (n_out - 1)
    if rank_bound < p_size:
        raise ValueError(
            f"damping=0.0 is not allowed with solver='primal_cg' here: JᵀHJ (P={p_size}) has rank at "
            f"most {rank_bound} < P, so it is singular; use damping > 0, or solver='kernel' / "
            "'kernel_cg' for the minimum-norm Gauss–Newton step (Eq. 5, 19)."
        )


def _float():
    return jnp.result_type(float)


# ------------------------------------------------------------------------------------------
# Pieces: flat parameters and loss derivatives
# ------------------------------------------------------------------------------------------


def _flat_fn(apply_fn, params, x):
    """θ ↦ f(θ, x) on raveled parameters, with outputs as (N, O)."""
    flat, unravel = ravel_pytree(params)
    n = x.shape[0]

    def f(p):
        return apply_fn(unravel(p), x).reshape(n, -1)

    return f, flat, unravel


def _grad_and_hess(loss: str, out, y):
    """g = ∂L/∂f (N, O) and v ↦ Hv on (N, O) (None for H = I) for the summed loss."""
    if loss == "mse":
        return out - mse_targets(out, y), None
    p = jax.nn.softmax(out, axis=-1)
    g = p - jax.nn.one_hot(y, out.shape[-1], dtype=out.dtype)

    def hess(v):  # per example (diag(p) − ppᵀ) v
        return p * v - p * jnp.sum(p * v, axis=-1, keepdims=True)

    return g, hess


class CGSolution(NamedTuple):
    """What :func:`conjugate_gradient` returns."""

    x: jax.Array  #: (n,) the last iterate
    residual: jax.Array  #: () the true relative residual ‖b − Ax‖ / ‖b‖ of x (0 for b = 0)


#: CG is taken to have converged when its true relative residual is at most this many times ``tol``
#: (the recursive residual it stops on drifts from the true one by rounding).
CG_RESIDUAL_SLACK = 10.0


def conjugate_gradient(matvec: Callable, b, *, tol: float, maxiter: int | None = None) -> CGSolution:
    """x ≈ A⁻¹b for a symmetric positive (semi-)definite A given as ``matvec(v) = Av``; b a vector (n,).

    Conjugate gradients (Hestenes–Stiefel) from x₀ = 0, so r₀ = p₀ = b: at step k,
    α = rᵀr / pᵀAp, x ← x + αp, r ← r − αAp, β = r'ᵀr' / rᵀr, p ← r' + βp; it stops when
    ‖r‖² ≤ tol²·‖b‖² or after ``maxiter`` steps (default 10·n). The iterates are those of
    :func:`jax.scipy.sparse.linalg.cg` with x0 = 0 and atol = 0 (it computes r₀ = b − A·0, one
    product more). Starting from r₀ = b is not only cheaper: XLA:CPU (jaxlib 0.10.2) can compute
    NaN for A·0 when the zero is a compile-time constant, the operator contains the JVP of a
    max-pool and the solve is vmapped, and then jax's CG stops at once with x = 0
    (``tests/test_gauss_newton.py`` checks a vmapped sweep of the CNN against its runs one by one).
    Returns :class:`CGSolution`: x and its true relative residual ‖b − Ax‖/‖b‖, one product more
    than the iteration, so that a solve that did not converge (``maxiter`` reached, or a singular
    system that b is not in the range of) can be reported by the caller: converged means
    residual ≤ :data:`CG_RESIDUAL_SLACK` · tol.
    Traceable, vmappable (a batch of systems runs until the last one stops); not differentiated.
    """
    maxiter = 10 * b.shape[0] if maxiter is None else maxiter
    rs0 = matmul(b, b)  # rᵀr at KERNEL_PRECISION, as jax.scipy.sparse.linalg.cg
    bound = tol**2 * rs0

    def cond(state):
        _, _, rs, _, k = state
        return (rs > bound) & (k < maxiter)

    def body(state):
        x, r, rs, p, k = state
        ap = matvec(p)
        alpha = rs / matmul(p, ap)
        x = x + alpha * p
        r = r - alpha * ap
        rs_new = matmul(r, r)
        return x, r, rs_new, r + (rs_new / rs) * p, k + 1

    x, *_ = jax.lax.while_loop(cond, body, (jnp.zeros_like(b), b, rs0, b, 0))
    true_r = b - matvec(x)
    residual = jnp.where(rs0 > 0, jnp.sqrt(matmul(true_r, true_r) / jnp.where(rs0 > 0, rs0, 1)), 0.0)
    return CGSolution(x, residual)


class CGConvergenceWarning(RuntimeWarning):
    """A conjugate-gradient solve of a Gauss–Newton step did not reach its tolerance (see
    :func:`gauss_newton_step`): the step is not the one asked for."""


def warn_cg_residual(residual, tol: float, where: str) -> None:
    """Warn (:class:`CGConvergenceWarning`) when the largest of ``residual`` (concrete; any shape,
    NaN counts as not converged) exceeds :data:`CG_RESIDUAL_SLACK` · ``tol``; ``where`` names the call."""
    worst = np.asarray(residual, np.float64)
    worst = float(np.max(np.where(np.isnan(worst), np.inf, worst))) if worst.size else 0.0
    if worst > CG_RESIDUAL_SLACK * tol:
        warnings.warn(CGConvergenceWarning(
            f"{where}: conjugate gradients did not converge: relative residual ‖b − Ax‖/‖b‖ = {worst:.2e} > "
            f"{CG_RESIDUAL_SLACK:g} × cg_tol = {CG_RESIDUAL_SLACK * tol:.1e}; the step is not the one asked "
            "for (λ = 0 with a singular system? raise cg_maxiter, or use damping > 0 or solver='kernel')"),
            stacklevel=3)


def _cg_defaults(dtype, cg_tol):
    if cg_tol is not None:
        return cg_tol
    return 1e-10 if jnp.finfo(dtype).bits >= 64 else 1e-6


def _damped_filter(lam):
    """φ(σ) = 1/(σ + λ): damped Gauss–Newton (Eq. 6); λ = 0 is Eq. 5 (on the kept directions)."""
    return lambda sigma: 1.0 / (sigma + lam)


def _flow_filter(tau):
    """φ(σ) = (1 − e^{−στ})/σ for σ > 0: gradient flow for time τ (Eq. 18); τ = ∞ gives 1/σ."""
    return lambda sigma: -jnp.expm1(-sigma * tau) / sigma


def _kernel_ce(J, g, hess, lam, n, n_out):
    """δ = −Jᵀa for the generalised Gauss–Newton step (CE) in the symmetric coordinates of Θ's range.

    Θ = JJᵀ = U diag(σ) Uᵀ, C = Σ^{1/2} UᵀHU Σ^{1/2} = Q diag(w) Qᵀ,
    a = U Σ^{-1/2} (C + λI)⁺ Σ^{1/2} Uᵀg.
    """
    sigma, U, keep = eigh_psd(matmul(J, J.T))
    s = jnp.where(keep, jnp.sqrt(sigma), 0.0)
    s_inv = jnp.where(keep, 1.0 / jnp.sqrt(jnp.where(keep, sigma, 1.0)), 0.0)
    HU = jax.vmap(lambda u: hess(u.reshape(n, n_out)).reshape(-1), in_axes=1, out_axes=1)(U)
    C = s[:, None] * matmul(U.T, HU) * s[None, :]
    w, Q, _ = eigh_psd(C)
    filt = spectral_filter(w, _damped_filter(lam), shift=lam)
    c = matmul(Q, filt * matmul(Q.T, s * matmul(U.T, g.reshape(-1))))
    return -matmul(J.T, matmul(U, s_inv * c))


# ------------------------------------------------------------------------------------------
# The step: ONE implementation of the maths (pure, traceable in h and α)
# ------------------------------------------------------------------------------------------


def _gn_step(apply_fn, params, x, y, h, config: GaussNewtonConfig, zero_damping=False):
    """θ − α·(the filtered Gauss–Newton update), f(θ, X) as (N, O), and the CG solve's relative
    residual (:class:`CGSolution`; 0 for the dense kernel solver); arguments already validated.

    h (λ or τ) is traced (a scalar, may be vmapped); ``config`` (α = ``config.step_size``) is static.
    ``zero_damping`` (static, known only to eager callers) turns on the singular-system check of
    primal CG.
    """
    loss, filter, damping_mode = config.loss, config.filter, config.damping_mode
    f, flat, unravel = _flat_fn(apply_fn, params, x)
    with full_precision():  # J's products, and so its transpose's (iterlin.precision)
        out, jvp_fn = jax.linearize(f, flat)
    n, n_out = out.shape
    p_size = flat.size
    solver = select_solver(n * n_out, p_size, loss) if config.solver == "auto" else config.solver
    if solver == "primal_cg" and zero_damping:
        _check_not_singular(loss, n, n_out, p_size)
    g, hess = _grad_and_hess(loss, out, y)
    dtype = out.dtype
    h = jnp.asarray(h, dtype)

    if solver == "kernel":
        residual = jnp.zeros((), dtype)  # a direct (pseudo-inverse) solve: nothing to converge
        J = jacobian_matrix(apply_fn, params, x)
        if filter == "flow":
            delta = spectral_solve(J, g.reshape(-1), _flow_filter(h))
        else:
            lam = h if damping_mode == "absolute" else h * jnp.sum(J**2) / (n * n_out)
            if hess is None:
                delta = spectral_solve(J, g.reshape(-1), _damped_filter(lam), shift=lam)
            else:
                delta = _kernel_ce(J, g, hess, lam, n, n_out)
    else:
        vjp_fn = jax.linear_transpose(jvp_fn, flat)
        lam = h if damping_mode == "absolute" else h * ntk_mean_diag(apply_fn, params, x)
        tol = _cg_defaults(dtype, config.cg_tol)
        if solver == "kernel_cg":

            def matvec(v):  # (Θ + λI)v = J(Jᵀv) + λv
                (jt_v,) = vjp_fn(v.reshape(n, n_out))
                return jvp_fn(jt_v).reshape(-1) + lam * v

            a, residual = conjugate_gradient(matvec, g.reshape(-1), tol=tol, maxiter=config.cg_maxiter)
            (delta,) = vjp_fn(-a.reshape(n, n_out))
        else:

            def matvec(d):  # (JᵀHJ + λI)d
                jd = jvp_fn(d)
                hjd = jd if hess is None else hess(jd)
                (jt,) = vjp_fn(hjd)
                return jt + lam * d

            (rhs,) = vjp_fn(-g)
            delta, residual = conjugate_gradient(matvec, rhs, tol=tol, maxiter=config.cg_maxiter)

    new = unravel(flat + jnp.asarray(config.step_size, flat.dtype) * delta.astype(flat.dtype))
    return new, out, residual


def select_solver(n_outputs: int, n_params: int, loss: str = "mse") -> str:
    """The solver ``solver="auto"`` picks for N·O outputs and P parameters (see module docstring)."""
    if n_outputs <= KERNEL_MAX_OUTPUTS and n_outputs * n_params <= KERNEL_MAX_JACOBIAN:
        return "kernel"
    if n_params <= n_outputs or loss != "mse":
        return "primal_cg"
    return "kernel_cg"


# ------------------------------------------------------------------------------------------
# Eager one-step API
# ------------------------------------------------------------------------------------------


def gauss_newton_step(
    apply_fn: Callable,
    params: Any,
    x,
    y,
    *,
    damping: float,
    loss: str | Loss = "mse",
    damping_mode: str = "absolute",
    solver: str = "auto",
    step_size: float = 1.0,
    cg_tol: float | None = None,
    cg_maxiter: int | None = None,
    filter: str = "damped",
    conv: str = "auto",
):
    """One damped (generalised) Gauss–Newton step, θ ← θ − α(JᵀHJ + λI)⁻¹Jᵀg (Eq. 5–6).

    Args:
      apply_fn: ``apply_fn(params, x) -> (N, O)`` outputs ((N,) is read as O = 1).
      params: θ, any pytree of floating arrays.
      x: inputs (N, ...). y: targets, (N, O) (or (N,) for O = 1) floats for ``"mse"``,
        integer labels (N,) for ``"ce"`` (one-hot targets for ``"mse"`` too).
      damping: λ ≥ 0 (finite). With ``damping_mode="relative"`` the damping used is
        λ_abs = damping · tr(Θ)/(N·O), the mean diagonal of the empirical NTK. With
        ``filter="flow"``: the flow time τ ≥ 0 (``math.inf`` allowed).
      loss: ``"mse"`` (½‖f − Y‖² summed over examples: Eq. 6 literally) or ``"ce"`` (summed
        softmax cross-entropy, generalised Gauss–Newton with H = diag(p) − ppᵀ per example).
      solver: ``"auto"``, ``"kernel"``, ``"kernel_cg"`` (MSE only) or ``"primal_cg"`` (see the
        module docstring for the maths and the automatic rule).
      step_size: α > 0 (1 is the full step).
      cg_tol: relative residual tolerance of CG (default 1e-10 in float64, 1e-6 in float32).
      cg_maxiter: CG iteration cap (default: JAX's, 10 × the system size).
      filter: ``"damped"`` (Eq. 6) or ``"flow"`` (gradient flow for time τ = ``damping`` on the
        linearisation, Eq. 18; MSE and the kernel solver only).
      conv: ``apply_fn``'s convolutions and poolings (:func:`iterlin.conv.lower_convolutions`):
        ``"auto"`` (default) as slices and products on the CPU backend, as written elsewhere;
        ``"matmul"``; ``"xla"`` (as written).

    Returns:
      The new parameters, same structure and dtypes as ``params``. For MSE with α = 1 they are
      argmin_θ ½‖f_lin(θ, X) − Y‖² + (λ/2)‖θ − θ_s‖² (the ridge solution of the linearisation).

    A CG solve that does not converge (its true relative residual above
    :data:`CG_RESIDUAL_SLACK` · ``cg_tol`` after the default cap of 10 × the system size: λ = 0
    with a singular Θ that g is not in the range of, or a ``cg_tol`` below what the precision
    reaches) warns, :class:`CGConvergenceWarning` with the residual: the step returned is not the
    one asked for. With ``cg_maxiter`` given, the solve is truncated by choice (an inexact
    Gauss–Newton step, as the ``gn`` experiment's): not warned. Called inside a traced function, it
    cannot warn; :func:`make_gauss_newton_step`'s state records the residual instead.

    All arguments are validated in Python before any compute; the step itself is compiled once per
    (``apply_fn``, shapes, loss, filter, solver, damping mode) with λ and α traced, so sweeping λ
    does not re-compile. It can also be called inside a traced function (e.g. a jitted training step).

    Example:
      With N·O = 4 < P = 12 the undamped step (λ = 0, Eq. 5) solves the linearised problem
      exactly: the linearisation at θ fits the targets (the largest residual is 1.39 before the
      step). Damping shortens the step (Eq. 6):

      >>> import jax.numpy as jnp
      >>> from iterlin import gauss_newton_step, linearise
      >>> def f(params, x):  # a two-layer MLP: (N, 1) -> (N, 1), P = 12
      ...     return jnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"]
      >>> params = {"w1": jnp.array([[1.0, -2.0, 0.5, 1.5]]), "b1": jnp.array([0.0, 0.5, -0.5, 0.2]),
      ...           "w2": jnp.array([[1.0], [0.5], [-1.0], [0.3]])}
      >>> x = jnp.array([[-1.0], [-0.3], [0.4], [1.0]])
      >>> y = jnp.sin(3 * x)
      >>> f_lin = linearise(f, params)
      >>> for damping in (0.0, 0.1, 10.0):
      ...     new = gauss_newton_step(f, params, x, y, damping=damping)
      ...     print(damping, round(float(jnp.abs(f_lin(new, x) - y).max()), 3))
      0.0 0.0
      0.1 0.378
      10.0 1.116
    """
    config = GaussNewtonConfig(loss=loss, filter=filter, solver=solver, damping_mode=damping_mode,
                               step_size=step_size, cg_tol=cg_tol, cg_maxiter=cg_maxiter)
    h = _check_hyper(damping, config.filter, "damping")
    check_xy(x, y)
    x = jnp.asarray(x)
    y = jnp.asarray(y)
    _check_labels(config.loss, y)
    apply_fn = lower_convolutions(apply_fn, conv)
    static = dict(config=config, zero_damping=(config.filter == "damped" and h == 0.0))
    new, out, residual = maybe_jit(_gn_step, apply_fn, **static)(apply_fn, params, x, y, h, **static)
    if config.cg_maxiter is None and not isinstance(residual, jax.core.Tracer):  # see the docstring
        warn_cg_residual(residual, _cg_defaults(out.dtype, config.cg_tol), "gauss_newton_step")
    return new


# ------------------------------------------------------------------------------------------
# Gauss–Newton training through the one training loop (Figs. 1 and 9)
# ------------------------------------------------------------------------------------------


class GaussNewtonState(NamedTuple):
    """A Gauss–Newton run's state (one run; a sweep stacks runs on a leading axis of every field).

    A :class:`~iterlin.training.RunState` for :func:`iterlin.training.fit`: every step re-linearises
    at θ_t and solves the linearisation (Eq. 5–6), so θ_s = θ (``params_s``), the re-linearisation
    period is K = 1 (``K``) and the number of re-linearisations is the number of steps committed
    before any divergence (``n_relin``); these three are derived, not stored. There is no optimizer
    state: the step is the solve. Made by :func:`init_gauss_newton_state`, advanced by the step of
    :func:`make_gauss_newton_step`, frozen on divergence by :func:`iterlin.training.commit_proposal`,
    saved whole in checkpoints.
    """

    params: Any  #: θ_t
    step: jax.Array  #: int32 (): steps completed
    diverged: jax.Array  #: bool (): a non-finite or overflowing loss or update was met; frozen
    diverged_step: jax.Array  #: int32 (): the step at which it diverged, −1 if it has not
    h: jax.Array  #: float (): the damping λ ≥ 0 (``filter="damped"``) or the flow time τ ≥ 0 or ∞ (``"flow"``)
    #: float (): the largest relative residual of the CG solves committed so far (0 for the dense
    #: solver; :class:`CGSolution`), checked once after training (:func:`gauss_newton_train` warns)
    cg_residual: jax.Array

    @property
    def params_s(self):
        """The linearisation point θ_s, equal to θ_t here (every step re-linearises)."""
        return self.params

    @property
    def K(self) -> jax.Array:
        """int32, the shape of ``step``: 1 (re-linearise every step)."""
        return jnp.ones_like(self.step)

    @property
    def n_relin(self) -> jax.Array:
        """int32, the shape of ``step``: the steps committed, each a re-linearisation (none after a divergence)."""
        return jnp.where(self.diverged, self.diverged_step, self.step)


def _gn_state(params, h) -> GaussNewtonState:
    i32 = lambda v: jnp.asarray(v, jnp.int32)  # noqa: E731
    return GaussNewtonState(params=params, step=i32(0), diverged=jnp.asarray(False), diverged_step=i32(-1), h=h,
                            cg_residual=jnp.zeros((), _float()))


def init_gauss_newton_state(params: Any, damping, *, filter: str = "damped", stacked: bool = False) -> GaussNewtonState:
    """A fresh Gauss–Newton run at θ_0 = ``params``: a :class:`GaussNewtonState` with ``h = damping``.

    ``damping``: λ ≥ 0, finite (``filter="damped"``), or the flow time τ ≥ 0 or ``math.inf``
    (``filter="flow"``); validated here, eagerly, and stored as ``h``, a float scalar array (of
    ``float``'s dtype). With ``stacked=True``, ``params`` is stacked on a leading axis of R runs and
    ``damping`` is a sequence of R values: a stacked state (``h`` and the counters of shape (R,))
    for ``fit(..., sweep=True)``. Raises ``ValueError`` naming the argument.
    """
    filter = check_choice(filter, "filter", FILTERS)
    if not isinstance(stacked, (bool, np.bool_)):
        raise ValueError(f"stacked={stacked!r} is not allowed: stacked must be a bool.")
    if not stacked:
        h = _check_hyper(damping, filter, "damping")
        return _gn_state(params, jnp.asarray(h, _float()))
    if not _is_sequence(damping) or len(damping) == 0:
        raise ValueError(
            f"damping={damping!r} is not allowed: with stacked=True damping must be a non-empty sequence "
            "of values, one per stacked run."
        )
    hs = [_check_hyper(v, filter, f"damping[{i}]") for i, v in enumerate(damping)]
    leaves = jax.tree.leaves(params)
    if not leaves or any(np.shape(leaf)[:1] != (len(hs),) for leaf in leaves):
        raise ValueError(
            f"params must be stacked on a leading run axis of size len(damping)={len(hs)}; got leading shapes "
            f"{sorted({np.shape(leaf)[:1] for leaf in leaves})}"
        )
    return jax.vmap(_gn_state)(params, jnp.asarray(hs, _float()))


def make_gauss_newton_step(
    apply_fn: Callable,
    *,
    loss: str | Loss = "mse",
    filter: str = "damped",
    step_size: float = 1.0,
    solver: str = "auto",
    damping_mode: str = "absolute",
    cg_tol: float | None = None,
    cg_maxiter: int | None = None,
    conv: str = "auto",
) -> Callable:
    """Return ``step(state, (x, y)) -> (state, {"loss": L(f(θ_t, x), y)})`` for :func:`~iterlin.training.fit`.

    ``state`` is a :class:`GaussNewtonState` (from :func:`init_gauss_newton_state`) whose ``h`` is
    the run's hyperparameter, a scalar array: λ for ``filter="damped"``,
    θ ← θ − α(JᵀHJ + λI)⁻¹Jᵀg (Eq. 6; λ = 0: Eq. 5, minimum-norm), or τ for ``filter="flow"``
    (MSE, kernel solver), θ ← θ − α Jᵀ U diag((1 − e^{−στ})/σ) Uᵀ(f − Y) (Eq. 18; τ = ∞ the
    Gauss–Newton step); x (N, ...), y as for :func:`gauss_newton_step`. h is traced, so runs with
    different h vmap together in one compilation (``fit(..., sweep=True)``). Every step
    re-linearises (θ_s = θ, so ``n_relin`` grows by one). The reported loss is the per-example mean
    (as in :func:`iterlin.training.make_step`) at θ_t, where the network and its linearisation
    coincide. The proposal is committed through :func:`iterlin.training.commit_proposal`
    (divergence freezes the run, h included). All arguments are static and validated here; h is
    validated by :func:`init_gauss_newton_state` (the traced step cannot refuse λ = 0 for a singular
    primal-CG system: :func:`gauss_newton_train` and :func:`gauss_newton_step` do). A state of
    another type, or an ``h`` that is not a scalar array, is refused while tracing.

    ``conv``: ``apply_fn``'s convolutions and poolings lowered by
    :func:`iterlin.conv.lower_convolutions` (``"auto"``: into products on the CPU backend, as
    written elsewhere; ``"matmul"``; ``"xla"``: as written), as in :func:`gauss_newton_step` and
    :func:`gauss_newton_train` (through ``**fit_kwargs``).

    Memoised: the same ``apply_fn`` and options (after validation) give the same function object,
    so :func:`~iterlin.training.fit` reuses its compiled programs.
    """
    return _make_gauss_newton_step(lower_convolutions(apply_fn, conv), GaussNewtonConfig(
        loss=loss, filter=filter, solver=solver, damping_mode=damping_mode, step_size=step_size, cg_tol=cg_tol,
        cg_maxiter=cg_maxiter))


def _check_state(state) -> None:
    """A :class:`GaussNewtonState` of one run (static: raised while tracing)."""
    if not isinstance(state, GaussNewtonState):
        raise TypeError(
            f"state is a {type(state).__name__}, but make_gauss_newton_step's step needs a GaussNewtonState: make "
            "the state with init_gauss_newton_state(params, damping)."
        )
    if getattr(state.h, "shape", None) != ():
        raise ValueError(
            f"state.h={state.h!r} is not allowed: the step reads the damping (or flow time) of one run from "
            "state.h, a scalar array; make the state with init_gauss_newton_state (stacked=True with "
            "fit(..., sweep=True) for h of shape (R,))."
        )


@memoise
def _make_gauss_newton_step(apply_fn, config: GaussNewtonConfig):
    loss_obj = get_loss(config.loss)

    def step(state: GaussNewtonState, batch):
        _check_state(state)
        x, y = batch
        params, out, residual = _gn_step(apply_fn, state.params, x, y, state.h, config)
        value = jnp.mean(loss_obj.per_example(out, y))
        worst = jnp.maximum(state.cg_residual, residual.astype(state.cg_residual.dtype))
        return commit_proposal(state, value, state._replace(params=params, cg_residual=worst)), {"loss": value}

    return step


@memoise
def _jitted(fn: Callable) -> Callable:
    """``jax.jit(fn)``, one wrapper per function (``jax.eval_shape(fn, ...)`` would trace it at every call)."""
    return jax.jit(fn)


def gauss_newton_train(
    apply_fn: Callable,
    params: Any,
    data: tuple,
    *,
    damping,
    steps: int,
    filter: str = "damped",
    step_size: float = 1.0,
    loss: str | Loss = "mse",
    solver: str = "auto",
    damping_mode: str = "absolute",
    cg_tol: float | None = None,
    cg_maxiter: int | None = None,
    batch_size: int | None = None,
    key=None,
    **fit_kwargs,
) -> tuple[Any, dict]:
    """Train by damped Gauss–Newton (or the flow filter) with fixed h and step size α (Figs. 1, 9).

    ``damping``: one value (λ, or τ for ``filter="flow"``): one run from ``params``; or a sequence
    of R values: R runs in one compiled program, ``params`` stacked on a leading axis of R (see
    :func:`iterlin.tree.tree_stack`), run i with ``damping[i]``, through ``fit(..., sweep=True)``
    (all runs see the same batches; run i equals the run alone). Full batch by default
    (``batch_size`` gives stochastic Gauss–Newton). Runs through :func:`iterlin.training.fit`
    with :func:`init_gauss_newton_state`'s state, so evaluation, callbacks, checkpoints (the static
    options are added to ``config`` under ``"gauss_newton"``) and divergence freezing behave as in
    :func:`iterlin.training.train`; ``n_relin`` counts the Gauss–Newton steps. The history's ``loss``
    for ``"mse"`` is the per-example mean ½‖f − y‖² (plus ``rmse``), although the step itself uses
    the summed loss of Eq. 6. Other arguments as :func:`make_gauss_newton_step`; ``**fit_kwargs``
    as for :func:`iterlin.training.train`. Everything is validated before any compute.

    Returns ``(params, history)`` (stacked params and (R, E) history arrays for a sequence).
    """
    gn = GaussNewtonConfig(loss=loss, filter=filter, solver=solver, damping_mode=damping_mode, step_size=step_size,
                           cg_tol=cg_tol, cg_maxiter=cg_maxiter)
    apply_fn = lower_convolutions(apply_fn, fit_kwargs.get("conv", "auto"))
    step_fn = _make_gauss_newton_step(apply_fn, gn)
    if "sweep" in fit_kwargs:
        raise ValueError(
            f"sweep={fit_kwargs['sweep']!r} is not allowed: gauss_newton_train sweeps exactly when damping is a "
            "sequence (one value per stacked run)."
        )
    sweep = _is_sequence(damping)
    state = init_gauss_newton_state(params, damping, filter=filter, stacked=sweep)
    check_train_args(data, steps, loss, batch_size, fit_kwargs.get("eval_data"))
    x, y = (jnp.asarray(a) for a in data)
    _check_labels(gn.loss, y)
    hs = np.atleast_1d(np.asarray(state.h))
    if gn.filter == "damped" and np.any(hs == 0) and gn.solver in ("auto", "primal_cg"):
        one = jax.tree.map(lambda a: jax.ShapeDtypeStruct(np.shape(a)[1:], a.dtype), params) if sweep else params
        n = x.shape[0] if batch_size is None else int(batch_size)
        out = jax.eval_shape(_jitted(apply_fn), one, x[:1])  # a jitted apply_fn: traced once per shape, not per call
        n_out = int(np.prod(out.shape[1:], dtype=np.int64)) if len(out.shape) > 1 else 1
        p_size = tree_size(one)
        if gn.solver == "primal_cg" or select_solver(n * n_out, p_size, gn.loss) == "primal_cg":
            _check_not_singular(gn.loss, n, n_out, p_size)
    config = dict(fit_kwargs.pop("config", None) or {})
    config["gauss_newton"] = gn.record()
    state, history = fit(step_fn, state, apply_fn, data, steps=steps, loss=gn.loss, batch_size=batch_size,
                         key=key, sweep=sweep, config=config, **fit_kwargs)
    if gn.cg_maxiter is None:  # else truncated by choice (see gauss_newton_step)
        warn_cg_residual(state.cg_residual, _cg_defaults(jnp.result_type(*jax.tree.leaves(params)), gn.cg_tol),
                         "gauss_newton_train")
    return state.params, history
