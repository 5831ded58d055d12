"""Per-example Jacobians, kernel contractions and the spectral solve: written once for iterlin.

For a network f(θ, x) with O outputs and P parameters, the Jacobian of a batch X (N examples) is

    J = ∂f(θ, X)/∂θ                                  shape (N·O, P), example-major,

row ``n·O + o`` holding ∂f_o(θ, x_n)/∂θ, columns in the order of
:func:`jax.flatten_util.ravel_pytree` (leaves in ``jax.tree.leaves`` order, each raveled). The
empirical NTK is Θ = JJᵀ (N·O × N·O, Eq. 2). Everything here uses the one precision policy of
:mod:`iterlin.precision` (``HIGHEST`` for every contraction) and is used by :mod:`iterlin.analysis.ntk`,
:mod:`iterlin.solvers.gauss_newton` and :mod:`iterlin.solvers.closed_form`:

* :func:`example_jacobians`: ∂f(θ, x_n)/∂θ of a chunk of examples (``jax.vmap`` of ``jax.jacrev``
  of ONE example's outputs), as a pytree like θ with leaves (c·O, leaf.size). Examples must be
  processed independently by ``apply_fn`` (any model in inference mode; not BatchNorm in batch mode).
* :func:`jacobian_matrix` (traceable) / :func:`flat_jacobian` (compiled, public): the (N·O × P)
  matrix J, computed in chunks of examples (:func:`map_examples`) so that one chunk's Jacobian holds
  at most :data:`AUTO_CHUNK_NUMBERS` numbers. :func:`ntk_mean_diag`: tr(Θ)/(N·O) without storing J.
* :func:`contract`: Σ over parameter leaves of J_a J_bᵀ (a kernel block).
* :func:`eigh_psd`: Θ = U diag(σ) Uᵀ for a PSD matrix (σ ascending, clipped at 0), with the mask of
  the numerically non-null directions, σ > N·O·ε·max σ.
* The spectral solve: for a filter φ (a function of the eigenvalue), the parameter update

      δ = −Jᵀ U diag(φ(σ)) Uᵀ r                        (Appendix B; r a residual or ∂L/∂f)

  by :func:`spectral_solve` (= :func:`eigh_psd` of JJᵀ, :func:`spectral_filter`,
  :func:`spectral_apply`). φ(σ) = 1/(σ + λ) is damped Gauss–Newton (Eq. 6; λ = 0, Eq. 5, the
  minimum-norm step), φ(σ) = (1 − e^{−στ})/σ gradient flow for time τ (Eq. 18), and so on
  (:mod:`iterlin.solvers.closed_form`). Directions whose shifted eigenvalue σ + λ is at most
  N·O·ε·(max σ + λ) are dropped (pseudo-inverse semantics).
* :func:`maybe_jit`: ``jax.jit`` with ``apply_fn`` and the named options static (jit's own cache:
  one compiled program per function, ``apply_fn``, static values and shapes).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..precision import einsum, full_precision, matmul
from ..tree import tree_size

__all__ = [
    "AUTO_CHUNK_NUMBERS",
    "maybe_jit",
    "auto_chunk",
    "map_examples",
    "n_outputs",
    "example_jacobian",
    "example_jacobians",
    "flatten_jacobian",
    "jacobian_matrix",
    "flat_jacobian",
    "ntk_mean_diag",
    "contract",
    "rcond",
    "eigh_psd",
    "spectral_filter",
    "spectral_apply",
    "spectral_solve",
]

#: Per-example Jacobians are computed in chunks of examples whose Jacobian holds at most this many
#: numbers (chunk·O·P ≤ 2**26: 256 MiB in float32).
AUTO_CHUNK_NUMBERS = 2**26


# ------------------------------------------------------------------------------------------
# Compilation cache
# ------------------------------------------------------------------------------------------


def maybe_jit(fn: Callable, apply_fn: Callable, **static) -> Callable:
    """``fn`` compiled with its argument 0 (``apply_fn``) and the named arguments ``static`` static.

    ``jax.jit`` caches its traces and programs on the function and the static values, so a second
    call with the same ``fn``, ``apply_fn``, shapes and static values compiles nothing, with no memo
    of ours. ``fn`` itself is returned when ``apply_fn`` is not hashable (then it is traced op by
    op, or inside the caller's jit).
    """
    try:
        hash(apply_fn)
    except TypeError:
        return fn
    return jax.jit(fn, static_argnums=(0,), static_argnames=tuple(static))


# ------------------------------------------------------------------------------------------
# Per-example Jacobians
# ------------------------------------------------------------------------------------------


def auto_chunk(n: int, n_out: int, n_params: int) -> int:
    """Examples per chunk: the largest c ≤ n with c·O·P ≤ :data:`AUTO_CHUNK_NUMBERS` (at least 1)."""
    return int(max(1, min(n, AUTO_CHUNK_NUMBERS // max(1, n_out * n_params))))


def map_examples(fn: Callable, x, entries_per_example: int, chunk_size: int | None = None):
    """``jax.vmap(fn)(x)``, or sequential chunks of ``chunk_size`` examples (``jax.lax.map``).

    ``chunk_size=None``: ⌊AUTO_CHUNK_NUMBERS / entries_per_example⌋ examples (all of them when
    that is at least N), so that one chunk's per-example results hold at most that many numbers.
    """
    n = x.shape[0]
    if chunk_size is None:
        chunk_size = max(1, AUTO_CHUNK_NUMBERS // max(1, entries_per_example))
    chunk = max(1, min(n, int(chunk_size)))
    if chunk == n:
        return jax.vmap(fn)(x)
    return jax.lax.map(fn, x, batch_size=chunk)


def n_outputs(apply_fn: Callable, params: Any, x) -> int:
    """O, the number of outputs per example, from the shape of ``apply_fn(params, x[:1])`` (traced
    abstractly, no compute): the product of the output's trailing axes, 1 for an (N,) output."""
    out = jax.eval_shape(lambda p, xi: apply_fn(p, xi), params, x[:1])
    return int(np.prod(out.shape[1:], dtype=np.int64)) if len(out.shape) > 1 else 1


def example_jacobian(apply_fn: Callable, params: Any, xi):
    """∂f(θ, x_i)/∂θ of ONE example x_i (shape of one example): a pytree like θ, leaves ``(O, *leaf.shape)``.

    Reverse mode (O vector–Jacobian products) on ``apply_fn(θ, x_i[None])`` flattened to (O,), every
    product inside the network at full precision (:func:`iterlin.precision.full_precision`).
    """
    with full_precision():
        return jax.jacrev(lambda p: apply_fn(p, xi[None]).reshape(-1))(params)


def example_jacobians(apply_fn: Callable, params: Any, xs):
    """Per-example Jacobians of a chunk xs (c, ...): a pytree like θ with leaves (c·O, leaf.size).

    Row n·O + o of each leaf is ∂f_o(θ, x_n)/∂(that leaf), raveled. :func:`contract` turns two of
    them into a kernel block, :func:`flatten_jacobian` into the (c·O × P) matrix.
    """
    jac = jax.vmap(lambda xi: example_jacobian(apply_fn, params, xi))(xs)  # leaves (c, O, *leaf)
    return jax.tree.map(lambda j: j.reshape(j.shape[0] * j.shape[1], -1), jac)


def flatten_jacobian(jac) -> jax.Array:
    """A pytree of (rows, leaf.size) Jacobian blocks → the (rows × P) matrix, columns in ravel order."""
    leaves = jax.tree.leaves(jac)
    return leaves[0] if len(leaves) == 1 else jnp.concatenate(leaves, axis=1)


def jacobian_matrix(apply_fn: Callable, params: Any, x, *, chunk_size: int | None = None) -> jax.Array:
    """J = ∂f(θ, X)/∂θ as an (N·O × P) matrix, example-major (traceable; see :func:`flat_jacobian`).

    Per-example Jacobians (:func:`example_jacobian`) in chunks of ``chunk_size`` examples
    (default :func:`auto_chunk`), walked sequentially by ``jax.lax.map`` when there are several.
    """
    n = x.shape[0]
    n_params = tree_size(params)
    n_out = n_outputs(apply_fn, params, x)

    def one(xi):  # (O, P)
        return flatten_jacobian(jax.tree.map(lambda j: j.reshape(j.shape[0], -1),
                                             example_jacobian(apply_fn, params, xi)))

    jac = map_examples(one, x, n_out * n_params, chunk_size)  # (N, O, P)
    return jac.reshape(n * n_out, n_params)


def flat_jacobian(apply_fn: Callable, params: Any, x) -> jax.Array:
    """The Jacobian J = ∂f(θ, X)/∂θ as an (N·O × P) matrix, example-major (row n·O + o).

    θ is raveled with :func:`jax.flatten_util.ravel_pytree` (column order = its order). Built from
    per-example Jacobians (reverse mode, O vector–Jacobian products per example, in chunks), so
    ``apply_fn`` must treat examples independently. The empirical NTK (Eq. 2) is ``J @ J.T``.
    Compiled once per ``apply_fn`` and shapes.

    Example:
      >>> import jax.numpy as jnp
      >>> from iterlin import flat_jacobian
      >>> def f(params, x):  # x (N, 3) -> (N, 2): O = 2 outputs, P = 3 + 2 parameters
      ...     return jnp.stack([x @ params["a"], jnp.sin(x[:, :2]) @ params["b"]], axis=-1)
      >>> params = {"a": jnp.ones(3), "b": jnp.ones(2)}
      >>> x = jnp.zeros((4, 3))
      >>> flat_jacobian(f, params, x).shape  # (N·O, P)
      (8, 5)
    """
    x = jnp.asarray(x)
    return maybe_jit(_flat_jacobian, apply_fn)(apply_fn, params, x)


def _flat_jacobian(apply_fn, params, x):
    return jacobian_matrix(apply_fn, params, x)


def ntk_mean_diag(apply_fn: Callable, params: Any, x, *, chunk_size: int | None = None):
    """tr(Θ)/(N·O) = the mean over (n, o) of ‖∂f_{n,o}/∂θ‖², without storing J (traceable)."""
    n_params = tree_size(params)
    n_out = n_outputs(apply_fn, params, x)

    def one(xi):
        return sum(jnp.sum(j**2) for j in jax.tree.leaves(example_jacobian(apply_fn, params, xi)))

    return jnp.sum(map_examples(one, x, n_out * n_params, chunk_size)) / (x.shape[0] * n_out)


def contract(ja, jb) -> jax.Array:
    """Σ over parameter leaves of J_a J_bᵀ: (rows_a, rows_b), e.g. a block of the NTK (Eq. 2)."""
    parts = [einsum("ap,bp->ab", a, b) for a, b in zip(jax.tree.leaves(ja), jax.tree.leaves(jb))]
    return sum(parts[1:], parts[0])


# ------------------------------------------------------------------------------------------
# PSD eigendecomposition and the spectral solve
# ------------------------------------------------------------------------------------------


def rcond(n: int, dtype) -> float:
    """The relative cut-off n·ε of the pseudo-inverses (ε of ``dtype``)."""
    return n * float(jnp.finfo(dtype).eps)


def eigh_psd(theta):
    """Θ = U diag(σ) Uᵀ for a symmetric PSD (M × M) matrix Θ.

    Returns ``(sigma, U, keep)``: σ (M,) ascending and clipped at 0 (rounding can make tiny
    eigenvalues negative), U (M, M) orthonormal, and the mask keep = σ > M·ε·max σ of the
    numerically non-null directions. Θ is symmetrised, ½(Θ + Θᵀ), first.
    """
    sigma, U = jnp.linalg.eigh(0.5 * (theta + theta.T))
    sigma = jnp.maximum(sigma, 0.0)
    keep = sigma > rcond(theta.shape[0], theta.dtype) * sigma[-1]
    return sigma, U, keep


def spectral_filter(sigma, phi: Callable, shift=0.0):
    """φ(σ) on the kept directions, 0 on the others: the diagonal of a spectral solve.

    ``sigma`` (M,) ascending (from :func:`eigh_psd`), ``phi`` element-wise (traceable), ``shift``
    λ ≥ 0 (traceable): a direction is kept when σ + λ > M·ε·(max σ + λ), i.e. the pseudo-inverse
    cut-off of the shifted matrix Θ + λI (λ = 0: σ > M·ε·max σ). φ is only evaluated on kept
    directions (elsewhere at σ = 1), so φ(σ) = 1/σ is safe.
    """
    shift = jnp.asarray(shift, sigma.dtype)
    keep = sigma + shift > rcond(sigma.shape[0], sigma.dtype) * (sigma[-1] + shift)
    return jnp.where(keep, phi(jnp.where(keep, sigma, 1.0)), 0.0)


def spectral_apply(J, U, filt, r):
    """δ = −Jᵀ U diag(filt) Uᵀ r: J (M × P), U (M × M), filt (M,), r (M,) → δ (P,)."""
    return -matmul(J.T, matmul(U, filt * matmul(U.T, r)))


def spectral_solve(J, r, phi: Callable, shift=0.0):
    """δ = −Jᵀ U diag(φ(σ)) Uᵀ r with Θ = JJᵀ = U diag(σ) Uᵀ (the one spectral solve).

    ``J`` (M × P), ``r`` (M,), ``phi`` and ``shift`` as :func:`spectral_filter`. Examples: for
    MSE with r = f − Y, φ = 1/(σ + λ) with shift λ gives the damped Gauss–Newton step
    −(JᵀJ + λI)⁻¹Jᵀr (Eq. 6, push-through identity; λ = 0 the minimum-norm step, Eq. 5, 19), and
    φ = (1 − e^{−στ})/σ gradient flow on the linearisation for time τ (Eq. 18). Traceable.
    """
    sigma, U, _ = eigh_psd(matmul(J, J.T))
    return spectral_apply(J, U, spectral_filter(sigma, phi, shift), r)
