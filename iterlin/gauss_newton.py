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
  Θ = U diag(σ) Uᵀ, and for MSE a = U diag(1/(σ + λ)) Uᵀg. For CE (HΘ is not symmetric) the
  same δ is computed in the symmetric coordinates of the row space of J:
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

Both CG solvers use :func:`jax.scipy.sparse.linalg.cg`, which does not report non-convergence:
``cg_tol``/``cg_maxiter`` bound the work (relative residual tolerance 1e-10 in float64, 1e-6 in
float32 by default).

``solver="auto"``: ``"kernel"`` if N·O ≤ :data:`KERNEL_MAX_OUTPUTS` (4096) and the Jacobian has
at most :data:`KERNEL_MAX_JACOBIAN` (2²⁷) entries; otherwise CG in the smaller space:
``"primal_cg"`` if P ≤ N·O or the loss is CE, else ``"kernel_cg"``.

``damping_mode="relative"`` scales λ by the mean NTK diagonal, λ_abs = damping · tr(Θ)/(N·O)
(the mean of ‖∂f_{n,o}/∂θ‖², computed from per-example Jacobians for the CG solvers), which makes
λ comparable across architectures and widths.

:func:`make_gauss_newton_step` and :func:`gauss_newton_train` run damped Gauss–Newton through the
one training loop :func:`iterlin.training.fit` (Fig. 9).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree
from jax.scipy.sparse.linalg import cg

from .losses import Loss, get_loss
from .training import TrainState, commit_step, fit, init_state

from .validate import check_choice, check_int, check_nonnegative, check_positive, check_xy

__all__ = [
    "SOLVERS",
    "DAMPING_MODES",
    "KERNEL_MAX_OUTPUTS",
    "KERNEL_MAX_JACOBIAN",
    "flat_jacobian",
    "select_solver",
    "gauss_newton_step",
    "make_gauss_newton_step",
    "gauss_newton_train",
]

SOLVERS = ("auto", "kernel", "kernel_cg", "primal_cg")
DAMPING_MODES = ("absolute", "relative")
_GN_LOSSES = ("mse", "ce")

#: ``solver="auto"`` uses the dense kernel solver up to this many outputs N·O ...
KERNEL_MAX_OUTPUTS = 4096
#: ... and up to this many Jacobian entries N·O·P (2²⁷: 0.5 GiB in float32, 1 GiB in float64).
KERNEL_MAX_JACOBIAN = 2**27
#: Per-example Jacobians are computed in chunks of at most this many entries (chunk·O·P).
_CHUNK_ENTRIES = 2**25


# ------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------


def _loss_name(loss: str | Loss) -> str:
    name = loss.name if isinstance(loss, Loss) else loss
    return check_choice(name, "loss", _GN_LOSSES)


def _check_args(damping, loss, solver, damping_mode, step_size, cg_tol, cg_maxiter):
    damping = check_nonnegative(damping, "damping")
    loss = _loss_name(loss)
    solver = check_choice(solver, "solver", SOLVERS)
    damping_mode = check_choice(damping_mode, "damping_mode", DAMPING_MODES)
    step_size = check_positive(step_size, "step_size")
    if cg_tol is not None:
        cg_tol = check_positive(cg_tol, "cg_tol")
    if cg_maxiter is not None:
        cg_maxiter = check_int(cg_maxiter, "cg_maxiter", minimum=1)
    if solver == "kernel_cg" and loss != "mse":
        raise ValueError(
            f"solver='kernel_cg' is not allowed with loss={loss!r}: the kernel system HΘ + λI is not "
            "symmetric for cross-entropy, so CG does not apply to it; use solver='primal_cg' (the same "
            "cost per iteration) or solver='kernel' (dense)."
        )
    return damping, loss, solver, damping_mode, step_size, cg_tol, cg_maxiter


# ------------------------------------------------------------------------------------------
# Pieces: flat parameters, per-example Jacobians, loss derivatives
# ------------------------------------------------------------------------------------------


def _flat_fn(apply_fn, params, x):
    """θ ↦ f(θ, x) on raveled parameters, with outputs as (N, O)."""
    flat, unravel = ravel_pytree(params)
    n = x.shape[0]

    def f(p):
        return apply_fn(unravel(p), x).reshape(n, -1)

    return f, flat, unravel


def _map_examples(fn, x, entries_per_example):
    """``vmap(fn)(x)``, in sequential chunks of examples when the per-example Jacobians are large."""
    chunk = max(1, min(x.shape[0], _CHUNK_ENTRIES // max(1, entries_per_example)))
    if chunk == x.shape[0]:
        return jax.vmap(fn)(x)
    return jax.lax.map(fn, x, batch_size=chunk)


def _per_example_jacobians(apply_fn, unravel, flat, x, n_out):
    """(N, O, P) per-example Jacobians ∂f_n/∂θ, computed in chunks of examples."""

    def one(xi):
        return jax.jacrev(lambda p: apply_fn(unravel(p), xi[None]).reshape(-1))(flat)

    return _map_examples(one, x, n_out * flat.size)


def flat_jacobian(apply_fn: Callable, params: Any, x) -> jax.Array:
    """The Jacobian J = ∂f(θ, X)/∂θ as an (N·O × P) matrix, example-major (row n·O + o).

    θ is raveled with :func:`jax.flatten_util.ravel_pytree` (column order = its order). Built from
    per-example Jacobians (reverse mode, O vector–Jacobian products per example, in chunks), so
    ``apply_fn`` must treat examples independently. The empirical NTK (Eq. 2) is ``J @ J.T``.
    """
    x = jnp.asarray(x)
    return _maybe_jit(_flat_jacobian, apply_fn)(apply_fn, params, x)


def _flat_jacobian(apply_fn, params, x):
    f, flat, unravel = _flat_fn(apply_fn, params, x)
    n_out = jax.eval_shape(f, flat).shape[1]
    jac = _per_example_jacobians(apply_fn, unravel, flat, x, n_out)
    return jac.reshape(-1, flat.size)


_JITTED: dict = {}


def _maybe_jit(fn, apply_fn, **static):
    """``fn`` compiled with ``apply_fn`` (argument 0) and the named arguments static; ``fn`` itself
    when ``apply_fn`` is unhashable (then it is traced op by op, or inside the caller's jit)."""
    try:
        hash(apply_fn)
    except TypeError:
        return fn
    if fn not in _JITTED:
        _JITTED[fn] = jax.jit(fn, static_argnums=(0,), static_argnames=tuple(static))
    return _JITTED[fn]


def _ntk_mean_diag(apply_fn, unravel, flat, x, n_out):
    """tr(Θ)/(N·O) = mean over (n, o) of ‖∂f_{n,o}/∂θ‖², without storing J."""

    def one(xi):
        jac = jax.jacrev(lambda p: apply_fn(unravel(p), xi[None]).reshape(-1))(flat)
        return jnp.sum(jac**2)

    return jnp.sum(_map_examples(one, x, n_out * flat.size)) / (x.shape[0] * n_out)


def _grad_and_hess(loss: str, out, y):
    """g = ∂L/∂f (N, O) and v ↦ Hv on (N, O) (None for H = I) for the summed loss."""
    if loss == "mse":
        if jnp.issubdtype(y.dtype, jnp.integer):
            target = jax.nn.one_hot(y, out.shape[-1], dtype=out.dtype)
        else:
            target = y.reshape(out.shape).astype(out.dtype)
        return out - target, None
    p = jax.nn.softmax(out, axis=-1)
    g = p - jax.nn.one_hot(y, out.shape[-1], dtype=out.dtype)

    def hess(v):  # per example (diag(p) − ppᵀ) v
        return p * v - p * jnp.sum(p * v, axis=-1, keepdims=True)

    return g, hess


def _rcond(n: int, dtype) -> float:
    return n * float(jnp.finfo(dtype).eps)


# ------------------------------------------------------------------------------------------
# Solvers: each returns a = (HΘ + λI)⁻¹g (kernel) or δ (primal)
# ------------------------------------------------------------------------------------------


def _kernel_dense(J, g, hess, lam, n, n_out):
    """δ = −Jᵀa by eigendecomposition of Θ = JJᵀ (pseudo-inverse semantics for λ = 0)."""
    theta = J @ J.T
    theta = 0.5 * (theta + theta.T)
    sigma, U = jnp.linalg.eigh(theta)
    sigma = jnp.maximum(sigma, 0.0)
    rcond = _rcond(theta.shape[0], theta.dtype)
    gv = g.reshape(-1)
    if hess is None:
        denom = sigma + lam
        filt = jnp.where(denom > rcond * (sigma[-1] + lam), 1.0 / jnp.where(denom > 0, denom, 1.0), 0.0)
        a = U @ (filt * (U.T @ gv))
    else:
        keep = sigma > rcond * sigma[-1]
        s = jnp.where(keep, jnp.sqrt(sigma), 0.0)
        s_inv = jnp.where(keep, 1.0 / jnp.sqrt(jnp.where(keep, sigma, 1.0)), 0.0)
        HU = jax.vmap(lambda u: hess(u.reshape(n, n_out)).reshape(-1), in_axes=1, out_axes=1)(U)
        C = s[:, None] * (U.T @ HU) * s[None, :]
        C = 0.5 * (C + C.T)
        w, Q = jnp.linalg.eigh(C)
        w = jnp.maximum(w, 0.0)
        denom = w + lam
        filt = jnp.where(denom > rcond * (w[-1] + lam), 1.0 / jnp.where(denom > 0, denom, 1.0), 0.0)
        c = Q @ (filt * (Q.T @ (s * (U.T @ gv))))
        a = U @ (s_inv * c)
    return -(J.T @ a)


def _cg_defaults(dtype, cg_tol):
    if cg_tol is not None:
        return cg_tol
    return 1e-10 if jnp.finfo(dtype).bits >= 64 else 1e-6


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
):
    """One damped (generalised) Gauss–Newton step, θ ← θ − α(JᵀHJ + λI)⁻¹Jᵀg (Eq. 5–6).

    Args:
      apply_fn: ``apply_fn(params, x) -> (N, O)`` outputs ((N,) is read as O = 1).
      params: θ, any pytree of floating arrays.
      x: inputs (N, ...). y: targets, (N, O) (or (N,) for O = 1) floats for ``"mse"``,
        integer labels (N,) for ``"ce"`` (one-hot targets for ``"mse"`` too).
      damping: λ ≥ 0 (finite). With ``damping_mode="relative"`` the damping used is
        λ_abs = damping · tr(Θ)/(N·O), the mean diagonal of the empirical NTK.
      loss: ``"mse"`` (½‖f − Y‖² summed over examples: Eq. 6 literally) or ``"ce"`` (summed
        softmax cross-entropy, generalised Gauss–Newton with H = diag(p) − ppᵀ per example).
      solver: ``"auto"``, ``"kernel"``, ``"kernel_cg"`` (MSE only) or ``"primal_cg"`` (see the
        module docstring for the maths and the automatic rule).
      step_size: α > 0 (1 is the full step).
      cg_tol: relative residual tolerance of CG (default 1e-10 in float64, 1e-6 in float32).
      cg_maxiter: CG iteration cap (default: JAX's, 10 × the system size).

    Returns:
      The new parameters, same structure and dtypes as ``params``. For MSE with α = 1 they are
      argmin_θ ½‖f_lin(θ, X) − Y‖² + (λ/2)‖θ − θ_s‖² (the ridge solution of the linearisation).

    All arguments are validated in Python before any compute; the step itself is compiled once per
    (``apply_fn``, shapes, loss, solver, damping mode) with λ and α traced, so sweeping λ does not
    re-compile. It can also be called inside a traced function (e.g. a jitted training step).
    """
    damping, loss, solver, damping_mode, step_size, cg_tol, cg_maxiter = _check_args(
        damping, loss, solver, damping_mode, step_size, cg_tol, cg_maxiter
    )
    check_xy(x, y)
    x = jnp.asarray(x)
    y = jnp.asarray(y)
    if loss == "ce" and not jnp.issubdtype(y.dtype, jnp.integer):
        raise ValueError(f"y has dtype {y.dtype}: loss='ce' needs integer class labels of shape (N,).")

    static = dict(loss=loss, solver=solver, damping_mode=damping_mode, cg_tol=cg_tol, cg_maxiter=cg_maxiter,
                  zero_damping=damping == 0.0)
    return _maybe_jit(_gn_step, apply_fn, **static)(apply_fn, params, x, y, damping, step_size, **static)


def _gn_step(apply_fn, params, x, y, damping, step_size, *, loss, solver, damping_mode, cg_tol, cg_maxiter,
             zero_damping):
    """The step itself (arguments already validated); λ and α are traced, the rest is static."""
    f, flat, unravel = _flat_fn(apply_fn, params, x)
    out, jvp_fn = jax.linearize(f, flat)
    n, n_out = out.shape
    p_size = flat.size
    solver = select_solver(n * n_out, p_size, loss) if solver == "auto" else solver
    if solver == "primal_cg" and zero_damping:
        rank_bound = n * n_out if loss == "mse" else n * (n_out - 1)
        if rank_bound < p_size:
            raise ValueError(
                f"damping=0.0 is not allowed with solver='primal_cg' here: JᵀHJ (P={p_size}) has rank at "
                f"most {rank_bound} < P, so it is singular; use damping > 0, or solver='kernel' / "
                "'kernel_cg' for the minimum-norm Gauss–Newton step (Eq. 5, 19)."
            )
    vjp_fn = jax.linear_transpose(jvp_fn, flat)
    g, hess = _grad_and_hess(loss, out, y)
    dtype = out.dtype
    damping = jnp.asarray(damping, dtype)

    if solver == "kernel":
        J = _per_example_jacobians(apply_fn, unravel, flat, x, n_out).reshape(n * n_out, p_size)
        lam = damping if damping_mode == "absolute" else damping * jnp.sum(J**2) / (n * n_out)
        delta = _kernel_dense(J, g, hess, lam, n, n_out)
    else:
        if damping_mode == "absolute":
            lam = damping
        else:
            lam = damping * _ntk_mean_diag(apply_fn, unravel, flat, x, n_out)
        tol = _cg_defaults(dtype, cg_tol)
        if solver == "kernel_cg":

            def matvec(v):  # (Θ + λI)v = J(Jᵀv) + λv
                (jt_v,) = vjp_fn(v.reshape(n, n_out))
                return jvp_fn(jt_v).reshape(-1) + lam * v

            a, _ = cg(matvec, g.reshape(-1), tol=tol, atol=0.0, maxiter=cg_maxiter)
            (delta,) = vjp_fn(-a.reshape(n, n_out))
        else:

            def matvec(d):  # (JᵀHJ + λI)d
                jd = jvp_fn(d)
                hjd = jd if hess is None else hess(jd)
                (jt,) = vjp_fn(hjd)
                return jt + lam * d

            (rhs,) = vjp_fn(-g)
            delta, _ = cg(matvec, rhs, tol=tol, atol=0.0, maxiter=cg_maxiter)

    return unravel(flat + jnp.asarray(step_size, flat.dtype) * delta.astype(flat.dtype))


def select_solver(n_outputs: int, n_params: int, loss: str = "mse") -> str:
    """The solver ``solver="auto"`` picks for N·O outputs and P parameters (see module docstring)."""
    if n_outputs <= KERNEL_MAX_OUTPUTS and n_outputs * n_params <= KERNEL_MAX_JACOBIAN:
        return "kernel"
    if n_params <= n_outputs or loss != "mse":
        return "primal_cg"
    return "kernel_cg"


# ------------------------------------------------------------------------------------------
# Gauss–Newton training through the one training loop (Fig. 9)
# ------------------------------------------------------------------------------------------


def make_gauss_newton_step(
    apply_fn: Callable,
    *,
    damping: float,
    loss: str | Loss = "mse",
    step_size: float = 1.0,
    solver: str = "auto",
    damping_mode: str = "absolute",
    cg_tol: float | None = None,
    cg_maxiter: int | None = None,
) -> Callable:
    """Return ``step(state, (x, y)) -> (state, {"loss": L(f(θ_t, x), y)})`` for :func:`fit`.

    Each step is one damped Gauss–Newton step (:func:`gauss_newton_step`) on the batch, i.e. a
    re-linearisation: ``params_s`` becomes the new θ and ``n_relin`` grows by one. The reported
    loss is the per-example mean (as in :func:`iterlin.training.make_step`) at θ_t, where the
    network and its linearisation coincide. Divergence (a non-finite loss or
    update) freezes the run through :func:`iterlin.training.commit_step`, as for every step. The optimizer state is carried unchanged.
    """
    kw = dict(zip(("damping", "loss", "solver", "damping_mode", "step_size", "cg_tol", "cg_maxiter"),
                  _check_args(damping, loss, solver, damping_mode, step_size, cg_tol, cg_maxiter)))
    loss_obj = get_loss(kw["loss"])

    def step(state: TrainState, batch):
        x, y = batch
        value = jnp.mean(loss_obj.per_example(apply_fn(state.params, x), y))
        params = gauss_newton_step(apply_fn, state.params, x, y, **kw)
        new = commit_step(state, value, params, params, state.opt_state, jnp.asarray(True))
        return new, {"loss": value}

    return step


def gauss_newton_train(
    apply_fn: Callable,
    params: Any,
    data: tuple,
    *,
    damping: float,
    steps: int,
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
    """Train by damped Gauss–Newton (fixed λ and step size α) for ``steps`` steps (Fig. 9).

    Full batch by default (``batch_size`` gives stochastic Gauss–Newton). Runs through
    :func:`iterlin.training.fit` with state ``init_state(params, optax.identity(), K=1)``, so
    evaluation, callbacks, checkpoints and divergence freezing behave as in
    :func:`iterlin.training.train`; ``n_relin`` counts the Gauss–Newton steps. The history's
    ``loss`` for ``"mse"`` is the per-example mean ½‖f − y‖² (plus ``rmse``), although the step
    itself uses the summed loss of Eq. 6. ``**fit_kwargs`` as for :func:`iterlin.training.train`.

    Returns ``(params, history)``.
    """
    step_fn = make_gauss_newton_step(
        apply_fn, damping=damping, loss=loss, step_size=step_size, solver=solver,
        damping_mode=damping_mode, cg_tol=cg_tol, cg_maxiter=cg_maxiter,
    )
    state = init_state(params, optax.identity(), 1)
    state, history = fit(step_fn, state, apply_fn, data, steps=steps, loss=loss, batch_size=batch_size,
                         key=key, **fit_kwargs)
    return state.params, history

