"""The empirical neural tangent kernel and how it moves during training (Eq. 2, Fort et al. 2020).

For a network f(θ, x) with O outputs and P parameters, and ϕ(X) = ∂f(θ, X)/∂θ the (N·O × P)
Jacobian of the stacked outputs, the empirical NTK is (Eq. 2)

    Θ̂_θ(X₁, X₂) = ϕ(X₁) ϕ(X₂)ᵀ                       shape (N₁·O, N₂·O),

example-major: row ``n·O + o`` holds output o of example n. Iterative linearisation keeps the
kernel of the linear model, Θ̂_{θ_s}, fixed for K steps and moves it at each re-linearisation
(Eq. 4), whereas the network's kernel Θ̂_{θ_t} moves at every step.

Three ways to compute it, all exact (they agree to rounding):

* :func:`empirical_ntk` (host-driven, ``mode="jacobian"``): per-example Jacobians (``jax.jacrev`` of
  one example's outputs, ``jax.vmap``-ed over a chunk of ``chunk_size`` examples), contracted block by
  block, Θ[i, j] = Σ_leaves J_i J_jᵀ. The rows are walked a panel of ``panel_chunks`` chunks at a
  time (at most ``PANEL_NUMBERS`` Jacobian numbers, computed once and held), each panel
  contracted with one column chunk at a time, so that the column chunks' Jacobians are recomputed
  once per panel, not once per row chunk. Memory on the device is about (panel_chunks +
  1)·chunk_size·O·P numbers plus the kernel; for ``x2=None`` only the blocks on or above the
  diagonal are computed (the kernel is symmetric), within a panel too.
* ``mode="ntvp"``: column block by column block with NTK-vector products: the columns of block j
  are ϕ(X₂)ᵀe (one vjp per column, per example) and the block is ϕ(X₁_i)·(ϕᵀe) by ``jax.jvp``; ϕ(X₁)
  is never materialised. More compute, less memory when P is huge.
* :func:`empirical_ntk_fn`: the same computations (either mode) as a pure, traceable
  ``ntk(params, x1, x2=None)`` (chunks walked with ``jax.lax.map``), usable inside
  ``jax.jit``/``jax.vmap``. With a single chunk it is as fast as :func:`empirical_ntk`; with several,
  the host-driven loop was faster on CPU (the CNN at N = 16, chunk 4: 2.0 s against 6.9 s).

:func:`ntk_vector_product` gives v ↦ Θ̂(X, X)v without forming Θ̂ (one vjp then one jvp), for
Krylov solvers (Gauss–Newton with CG). :func:`kernel_distance` is Fort et al.'s
1 − ⟨K₁, K₂⟩_F / (‖K₁‖_F‖K₂‖_F), and :func:`kernel_tracker` records it over training.

The per-example Jacobians assume examples are processed independently (``apply_fn(params, x)[n]``
depends on ``x[n]`` only): true of every iterlin model except ``resnet18_bn`` in ``bn_mode="batch"``,
whose outputs depend on the whole batch (use ``bn_mode="frozen"`` there, or
:func:`ntk_vector_product`, which differentiates the batch as a whole).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..conv import lower_convolutions
from .jacobian import auto_chunk, contract, example_jacobians, n_outputs
from ..precision import full_precision
from ..tree import tree_index, tree_size
from ..validate import check_choice, check_int, check_K

__all__ = [
    "NTK_MODES",
    "empirical_ntk",
    "empirical_ntk_fn",
    "ntk_vector_product",
    "kernel_distance",
    "kernel_tracker",
    "relinearisation_steps",
]

NTK_MODES = ("jacobian", "ntvp")

# With ``chunk_size=None`` the chunk is chosen so that one chunk's Jacobian holds at most
# AUTO_CHUNK_NUMBERS numbers (2**26: 256 MiB in float32; :mod:`iterlin.analysis.jacobian`). Contractions use
# the one precision policy of :mod:`iterlin.precision` (HIGHEST: no TF32 / bf16 passes on GPU).

#: With ``panel_chunks=None``, :func:`empirical_ntk` holds panels of at most this many Jacobian
#: numbers (2**29: 2 GiB in float32), and at least one chunk.
PANEL_NUMBERS = 2**29


# ----------------------------------------------------------------------------------------------
# Validation and shapes
# ----------------------------------------------------------------------------------------------


def _check_x(x, name: str):
    shape = getattr(x, "shape", None)
    if shape is None or len(shape) == 0 or shape[0] == 0:
        raise ValueError(
            f"{name} must be an array with a leading example axis and at least one example; "
            f"got {type(x).__name__} of shape {shape}."
        )
    return jnp.asarray(x)


def _check_pair(x1, x2):
    x1 = _check_x(x1, "x1")
    if x2 is None:
        return x1, None
    x2 = _check_x(x2, "x2")
    if x1.shape[1:] != x2.shape[1:]:
        raise ValueError(
            f"x1 and x2 must hold examples of the same shape; got x1 of shape {tuple(x1.shape)} and "
            f"x2 of shape {tuple(x2.shape)}."
        )
    return x1, x2


def _chunk(chunk_size, n: int, n_out: int, n_params: int) -> int:
    """The number of examples per chunk (``None``: the largest with chunk·O·P ≤ AUTO_CHUNK_NUMBERS)."""
    if chunk_size is None:
        return auto_chunk(n, n_out, n_params)
    return min(check_int(chunk_size, "chunk_size", minimum=1), n)


def _chunk_at(x, i, c: int):
    """Examples i·c, ..., i·c + c − 1 of x (traced i), indices clamped to the last example."""
    return x[jnp.minimum(i * c + jnp.arange(c), x.shape[0] - 1)]


def _blocks(x, c: int):
    """(N, ...) → (⌈N/c⌉, c, ...), padding by repeating the last example (its rows are dropped)."""
    n = x.shape[0]
    nb = -(-n // c)
    idx = jnp.minimum(jnp.arange(nb * c), n - 1)
    return x[idx].reshape((nb, c) + x.shape[1:])


# ----------------------------------------------------------------------------------------------
# Block kernels (pure, traceable)
# ----------------------------------------------------------------------------------------------


def _single(apply_fn):
    """θ, x_n ↦ f(θ, x_n) as a flat (O,) vector (one example, batch of one)."""
    return lambda params, xi: apply_fn(params, xi[None]).reshape(-1)


def _jacobian(apply_fn, params, xs):
    """Per-example Jacobians of a chunk: a pytree with leaves (c·O, leaf.size), row n·O + o."""
    return example_jacobians(apply_fn, params, xs)


def _contract(ja, jb):
    """Σ over parameter leaves of J_a J_bᵀ → (c_a·O, c_b·O)."""
    return contract(ja, jb)


def _ntvp_block(apply_fn, params, xa, xb):
    """Θ(x_a, x_b) by NTK-vector products: columns ϕ(x_b)ᵀe by vjp, then ϕ(x_a)·(·) by jvp (the
    network's products at full precision, :func:`iterlin.precision.full_precision`)."""
    single = _single(apply_fn)

    def columns(xi):  # the O columns ϕ(x_i)ᵀe_o, one vjp each: leaves (O, *leaf)
        out, vjp = jax.vjp(lambda p: single(p, xi), params)
        return jax.vmap(vjp)(jnp.eye(out.shape[0], dtype=out.dtype))[0]

    def apply_block(tangent):  # ϕ(x_a) t: one jvp over the chunk x_a → (c_a·O,)
        return jax.jvp(lambda p: apply_fn(p, xa), (params,), (tangent,))[1].reshape(-1)

    with full_precision():
        cols = jax.vmap(columns)(xb)  # leaves (c_b, O, *leaf)
        cols = jax.tree.map(lambda c: c.reshape((c.shape[0] * c.shape[1],) + c.shape[2:]), cols)
        return jax.vmap(apply_block)(cols).T  # (c_a·O, c_b·O)


# Compiled once per (apply_fn, chunk size, shapes) and reused by later calls of empirical_ntk
# (apply_fn is a static argument: hashed by identity). The chunk index i is traced.
@functools.partial(jax.jit, static_argnames=("apply_fn", "c"))
def _jacobian_at(apply_fn, params, x, i, c):
    return _jacobian(apply_fn, params, _chunk_at(x, i, c))


_contract_jit = jax.jit(_contract)


@functools.partial(jax.jit, static_argnames=("rows",))
def _contract_rows(panel, jb, rows):
    """The first ``rows`` rows of a panel contracted with a column chunk: (rows, c·O)."""
    return _contract(jax.tree.map(lambda j: j[:rows], panel), jb)


@functools.partial(jax.jit, static_argnames=("apply_fn", "c", "g"))
def _panel_at(apply_fn, params, x, i0, c, g):
    """The Jacobians of chunks i0 … i0 + g − 1 (traced i0), one after the other (``lax.map``),
    stacked: leaves (g·c·O, leaf.size), row (i − i0)·c·O + n·O + o."""
    chunks = jax.lax.map(lambda i: _jacobian(apply_fn, params, _chunk_at(x, i, c)), i0 + jnp.arange(g))
    return jax.tree.map(lambda j: j.reshape(-1, j.shape[-1]), chunks)


@functools.partial(jax.jit, static_argnames=("rows",))
def _panel_rows(panel, start, rows):
    """Rows start … start + rows − 1 of every leaf of a panel (traced start)."""
    return jax.tree.map(lambda j: jax.lax.dynamic_slice_in_dim(j, start, rows), panel)


@functools.partial(jax.jit, static_argnames=("apply_fn", "c"))
def _ntvp_block_at(apply_fn, params, xa, xb, i, j, c):
    return _ntvp_block(apply_fn, params, _chunk_at(xa, i, c), _chunk_at(xb, j, c))


def _assemble(blocks, n1: int, n2: int, c: int, n_out: int):
    """(nb₁, nb₂, c·O, c·O) → (N₁·O, N₂·O), dropping the padded rows and columns."""
    nb1, nb2 = blocks.shape[:2]
    k = blocks.transpose(0, 2, 1, 3).reshape(nb1 * c * n_out, nb2 * c * n_out)
    return k[: n1 * n_out, : n2 * n_out]


# ----------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------


def empirical_ntk_fn(apply_fn: Callable, *, chunk_size: int | None = None, mode: str = "jacobian",
                     conv: str = "auto") -> Callable:
    """Return a pure, traceable ``ntk(params, x1, x2=None) -> Θ̂(X₁, X₂)`` (Eq. 2).

    The traced variant of :func:`empirical_ntk`: the same block computations, with the chunks walked
    by ``jax.lax.map`` (sequentially, so memory stays bounded by the chunk), so it can be used under
    ``jax.jit`` or ``jax.vmap`` (e.g. one kernel per run of a sweep). With one chunk (N ≤ chunk_size)
    the Jacobian is computed once; otherwise the column chunks' Jacobians are recomputed for every
    row chunk (compute ≈ (N/chunk_size + 1)·N per-example Jacobians, the price of bounded memory).
    For ``x2=None`` the blocks below the diagonal are skipped (``lax.switch``) and mirrored.

    Args:
      apply_fn: ``apply_fn(params, x) -> (N, O)``; examples must be processed independently.
      chunk_size: examples per chunk (static). ``None``: the largest chunk whose Jacobian holds at most
        ``AUTO_CHUNK_NUMBERS`` numbers, capped at N.
      mode: ``"jacobian"`` (per-example Jacobians contracted) or ``"ntvp"`` (jvp of vjp columns).
      conv: ``apply_fn``'s convolutions and poolings (:func:`iterlin.conv.lower_convolutions`):
        ``"auto"`` (default) as slices and products on the CPU backend, as written elsewhere;
        ``"matmul"``; ``"xla"`` (as written).

    Returns:
      ``ntk(params, x1, x2=None)`` with x1 (N₁, ...), x2 (N₂, ...) or None (x2 = x1) returning the
      (N₁·O, N₂·O) kernel, row n·O + o, in the parameters' dtype.

    Example::

        ntk = jax.jit(empirical_ntk_fn(apply_fn, chunk_size=16))
        K = ntk(params, x_probe)                                 # (N·O, N·O)
        Ks = jax.vmap(ntk, in_axes=(0, None))(stacked_params, x)  # (R, N·O, N·O)
    """
    mode = check_choice(mode, "mode", NTK_MODES)
    if chunk_size is not None:
        check_int(chunk_size, "chunk_size", minimum=1)
    apply_fn = lower_convolutions(apply_fn, conv)

    def ntk(params, x1, x2=None):
        x1, x2 = _check_pair(x1, x2)
        n_out = n_outputs(apply_fn, params, x1)
        sym = x2 is None
        n1 = x1.shape[0]
        n2 = n1 if sym else x2.shape[0]
        c = _chunk(chunk_size, max(n1, n2), n_out, tree_size(params))
        xs1 = _blocks(x1, c)
        xs2 = xs1 if sym else _blocks(x2, c)
        nb1, nb2 = xs1.shape[0], xs2.shape[0]
        if sym and nb1 == 1 and mode == "jacobian":  # one chunk: one Jacobian
            j = _jacobian(apply_fn, params, xs1[0])
            return _assemble(_contract(j, j)[None, None], n1, n2, c, n_out)

        def row(args):
            i, xa = args
            ja = _jacobian(apply_fn, params, xa) if mode == "jacobian" else None

            def col(args):
                j, xb = args
                if mode == "jacobian":
                    full = lambda: _contract(ja, _jacobian(apply_fn, params, xb))  # noqa: E731
                    diag = lambda: _contract(ja, ja)  # noqa: E731
                else:
                    full = diag = lambda: _ntvp_block(apply_fn, params, xa, xb)  # noqa: E731
                if not sym:
                    return full()
                out = jax.eval_shape(diag)
                skip = lambda: jnp.zeros(out.shape, out.dtype)  # noqa: E731
                # symmetric: blocks below the diagonal are skipped here and mirrored below
                return jax.lax.switch((j > i).astype(jnp.int32) + (j >= i).astype(jnp.int32), (skip, diag, full))

            return jax.lax.map(col, (jnp.arange(nb2), xs2))

        blocks = jax.lax.map(row, (jnp.arange(nb1), xs1))  # (nb1, nb2, m, m)
        if sym:
            ii, jj = np.indices((nb1, nb2))
            blocks = jnp.where((jj < ii)[:, :, None, None], blocks.transpose(1, 0, 3, 2), blocks)
        return _assemble(blocks, n1, n2, c, n_out)

    return ntk


def empirical_ntk(
    apply_fn: Callable,
    params: Any,
    x1,
    x2=None,
    *,
    chunk_size: int | None = None,
    mode: str = "jacobian",
    panel_chunks: int | None = None,
    conv: str = "auto",
):
    """The empirical NTK Θ̂_θ(X₁, X₂) = ϕ(X₁)ϕ(X₂)ᵀ (Eq. 2), computed chunk by chunk.

    Host-driven: a Python loop over blocks of chunks of ``chunk_size`` examples, each computed by
    one jitted function (one compilation: the last chunk is padded). ``mode="jacobian"``:
    per-example Jacobians (``jax.vmap`` of ``jax.jacrev`` of one example's outputs), Θ[i, j] = Σ over
    parameter leaves of J_i J_jᵀ, the rows a panel of ``panel_chunks`` chunks at a time (their
    Jacobians computed once and held, each column chunk's once per panel); device memory ≈
    (panel_chunks + 1)·chunk_size·O·P numbers plus the kernel.
    ``mode="ntvp"``: NTK-vector products (columns ϕᵀe by vjp, then jvp), never holding ϕ(X₁).
    With ``x2=None`` (x2 = x1) only the blocks j ≥ i are computed and the rest mirrored, and with a
    single chunk the Jacobian is computed once. For a version usable inside ``jax.jit`` see
    :func:`empirical_ntk_fn`.

    Args:
      apply_fn: ``apply_fn(params, x) -> (N, O)`` (an (N,) output counts as O = 1); examples must be
        processed independently (see the module docstring about BatchNorm).
      params: θ, any pytree of arrays (P numbers in all).
      x1: (N₁, ...) inputs.
      x2: (N₂, ...) inputs, or None for x2 = x1 (the symmetric N₁·O × N₁·O kernel).
      chunk_size: examples per chunk; ``None`` picks the largest chunk with chunk·O·P ≤ 2**26.
      mode: ``"jacobian"`` or ``"ntvp"``.
      panel_chunks: chunks per panel (``mode="jacobian"``); ``None``: as many as hold at most
        ``PANEL_NUMBERS`` numbers, at least one. The last panel holds the chunks that remain (its
        shapes are compiled once more), so no padding chunk is computed.
      conv: ``apply_fn``'s convolutions and poolings (:func:`iterlin.conv.lower_convolutions`):
        ``"auto"`` (default) as slices and products on the CPU backend, as written elsewhere;
        ``"matmul"``; ``"xla"`` (as written).

    Returns:
      Θ̂ of shape (N₁·O, N₂·O), example-major (row n·O + o is output o of example n), in the
      parameters' dtype. ``Θ̂.reshape(N₁, O, N₂, O)`` separates examples and outputs.

    Example:
      The kernel of a small MLP on N = 4 inputs equals JJᵀ with J the (N·O × P) Jacobian:

      >>> import jax.numpy as jnp, numpy as np
      >>> from iterlin import empirical_ntk, flat_jacobian
      >>> def f(params, x):  # a two-layer MLP: (N, 1) -> (N, 1), P = 12
      ...     return jnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"]
      >>> params = {"w1": jnp.array([[1.0, -2.0, 0.5, 1.5]]), "b1": jnp.array([0.0, 0.5, -0.5, 0.2]),
      ...           "w2": jnp.array([[1.0], [0.5], [-1.0], [0.3]])}
      >>> x = jnp.array([[-1.0], [-0.3], [0.4], [1.0]])
      >>> theta = empirical_ntk(f, params, x)
      >>> J = np.asarray(flat_jacobian(f, params, x))
      >>> theta.shape, J.shape  # (N·O, N·O), (N·O, P)
      ((4, 4), (4, 12))
      >>> bool(np.allclose(theta, J @ J.T, rtol=1e-5, atol=1e-6))
      True
    """
    mode = check_choice(mode, "mode", NTK_MODES)
    if chunk_size is not None:
        check_int(chunk_size, "chunk_size", minimum=1)
    if panel_chunks is not None:
        check_int(panel_chunks, "panel_chunks", minimum=1)
    apply_fn = lower_convolutions(apply_fn, conv)
    x1, x2 = _check_pair(x1, x2)
    n_out = n_outputs(apply_fn, params, x1)
    sym = x2 is None
    x2 = x1 if sym else x2
    n1, n2 = x1.shape[0], x2.shape[0]
    n_params = tree_size(params)
    c = _chunk(chunk_size, max(n1, n2), n_out, n_params)
    nb1, nb2 = -(-n1 // c), -(-n2 // c)
    m = c * n_out
    g = min(nb1, panel_chunks or max(1, PANEL_NUMBERS // (m * n_params)))
    k = None  # assembled on the host, block by block

    def put(i, j, blk):
        nonlocal k
        if k is None:
            k = np.empty((nb1 * m, nb2 * m), blk.dtype)
        k[i * m:(i + 1) * m, j * m:(j + 1) * m] = blk

    # Chunk i is gathered inside the compiled functions from a traced index (rows past the end
    # repeat the last example and are dropped), so every block of one shape uses the same compiled
    # code (a last, shorter panel and its row counts compile once more).
    if mode == "jacobian":
        for i0 in range(0, nb1, g):  # a panel: row chunks i0 … i0 + rows − 1
            rows = min(g, nb1 - i0)
            panel = _panel_at(apply_fn, params, x1, i0, c, rows)
            for j in range(i0 if sym else 0, nb2):
                if sym and j < i0 + rows:  # a chunk of the panel itself: only the rows on or above the diagonal
                    jb = _panel_rows(panel, (j - i0) * m, m)
                    blk = np.asarray(_contract_rows(panel, jb, (j - i0 + 1) * m))  # ((j − i0 + 1)·m, m)
                else:
                    jb = _jacobian_at(apply_fn, params, x2, j, c)
                    blk = np.asarray(_contract_jit(panel, jb))  # (rows·m, m)
                for r in range(len(blk) // m):  # the panel's rows this block holds
                    put(i0 + r, j, blk[r * m:(r + 1) * m])
    else:
        for i in range(nb1):
            for j in range(i if sym else 0, nb2):
                put(i, j, _ntvp_block_at(apply_fn, params, x1, x2, i, j, c))
    if sym:  # Θ(X, X) is symmetric: mirror the blocks below the diagonal
        for i in range(nb1):
            for j in range(i):
                put(i, j, k[j * m:(j + 1) * m, i * m:(i + 1) * m].T)
    return jnp.asarray(k[: n1 * n_out, : n2 * n_out])


def ntk_vector_product(apply_fn: Callable, params: Any, x, *, conv: str = "auto") -> Callable:
    """Return ``mv(v) = Θ̂(X, X) v = ϕ(ϕᵀv)`` without forming Θ̂ or ϕ (one vjp, then one jvp).

    The forward pass at θ is linearised once (``jax.linearize`` and ``jax.vjp`` residuals are kept),
    so each product costs one reverse and one forward-mode pass over the batch. Unlike the
    per-example kernels, X is differentiated as a batch, so batch-dependent models (BatchNorm in
    batch mode) get their true Gauss–Newton products. ``mv`` is traceable (wrap the caller in
    ``jax.jit`` for speed).

    Args:
      apply_fn: ``apply_fn(params, x) -> (N, O)``.
      params: θ, the point where the kernel is taken.
      x: (N, ...) inputs.
      conv: ``apply_fn``'s convolutions and poolings (:func:`iterlin.conv.lower_convolutions`):
        ``"auto"`` (default) as slices and products on the CPU backend, as written elsewhere;
        ``"matmul"``; ``"xla"`` (as written).

    Returns:
      ``mv(v)`` for v of the output's shape (N, O) or flat (N·O,) (example-major), returning Θ̂v in
      the same shape; or v of shape (N·O, k), returning Θ̂V of shape (N·O, k) (k products).
    """
    x = _check_x(x, "x")
    apply_fn = lower_convolutions(apply_fn, conv)
    f = lambda p: apply_fn(p, x)  # noqa: E731
    with full_precision():  # the network's products in both passes (iterlin.precision)
        out, jvp_fn = jax.linearize(f, params)
        _, vjp_fn = jax.vjp(f, params)
    m = int(np.prod(out.shape, dtype=np.int64))

    def single(v):
        (g,) = vjp_fn(v.reshape(out.shape).astype(out.dtype))
        return jvp_fn(g)

    def mv(v):
        v = jnp.asarray(v)
        if v.shape == out.shape:
            return single(v)
        if v.shape == (m,):
            return single(v).reshape(m)
        if v.ndim == 2 and v.shape[0] == m:
            return jax.vmap(lambda col: single(col).reshape(m), in_axes=1, out_axes=1)(v)
        raise ValueError(
            f"v of shape {tuple(v.shape)} is not allowed: v must have the output's shape {tuple(out.shape)}, "
            f"the flat shape ({m},) or ({m}, k)."
        )

    return mv


def kernel_distance(k1, k2):
    """Kernel distance d(K₁, K₂) = 1 − ⟨K₁, K₂⟩_F / (‖K₁‖_F ‖K₂‖_F) (Fort et al. 2020).

    0 for kernels equal up to a positive scale, 1 for orthogonal ones (e.g. PSD kernels with
    disjoint supports), in [0, 1] for PSD kernels (their Frobenius inner product is ≥ 0). Computed
    as ½‖K₁/‖K₁‖ − K₂/‖K₂‖‖²_F, which equals the formula above but without its cancellation for
    nearby kernels (the small distances between successive kernels stay accurate in float32).

    Args:
      k1, k2: arrays of the same shape (..., M, M') (any leading batch axes, e.g. runs of a sweep).

    Returns:
      d of shape (...) (a scalar for two matrices); NaN if a kernel is zero.

    Example:
      >>> import jax.numpy as jnp
      >>> from iterlin import kernel_distance
      >>> k = jnp.array([[2.0, 1.0], [1.0, 2.0]])
      >>> round(float(kernel_distance(k, 3 * k)), 6)  # equal up to a positive scale
      0.0
      >>> round(float(kernel_distance(k, jnp.eye(2))), 4)  # 1 − 4/(√10 · √2)
      0.1056
    """
    k1, k2 = jnp.asarray(k1), jnp.asarray(k2)
    if k1.shape != k2.shape or k1.ndim < 2:
        raise ValueError(
            f"k1 and k2 must be matrices (or batches of matrices) of the same shape; got {tuple(k1.shape)} "
            f"and {tuple(k2.shape)}."
        )
    dtype = jnp.result_type(k1.dtype, k2.dtype, jnp.float32)
    k1, k2 = k1.astype(dtype), k2.astype(dtype)
    n1 = jnp.sqrt(jnp.sum(k1 * k1, axis=(-2, -1), keepdims=True))
    n2 = jnp.sqrt(jnp.sum(k2 * k2, axis=(-2, -1), keepdims=True))
    return 0.5 * jnp.sum((k1 / n1 - k2 / n2) ** 2, axis=(-2, -1))


def relinearisation_steps(K, steps: int, max_points: int = 50) -> list[int]:
    """The multiples of K in [0, steps] (the re-linearisation points), at most ``max_points`` of them.

    Pass them as ``eval_steps`` so that :func:`kernel_tracker` sees every re-linearisation: then
    ``kernel_distance_relin`` at a point is the kernel change made by exactly one re-linearisation.
    When there are more multiples than ``max_points``, a log-spaced subset of them is returned
    (0 and the first and last multiples kept; each point then spans several re-linearisations).
    ``fit`` always adds step 0 and the last step. K = ∞ gives ``[0]``.

    Example: ``relinearisation_steps(100, 1000)`` is ``[0, 100, 200, ..., 1000]``;
    ``relinearisation_steps(1, 10**5, max_points=5)`` is ``[0, 1, 18, 316, 5623, 100000]``
    (log-spaced multiples, at most 5 besides 0). For a sweep over several K (one shared list of
    evaluation points) pass the union of the runs' lists.
    """
    K = check_K(K)
    steps = check_int(steps, "steps", minimum=0)
    max_points = check_int(max_points, "max_points", minimum=1)
    if math.isinf(K):
        return [0]
    m = steps // K  # multiples 1..m
    if m <= max_points:
        mults = range(1, m + 1)
    else:
        mults = sorted({int(round(v)) for v in np.geomspace(1, m, max_points)})
    return [0] + [int(i * K) for i in mults]


def kernel_tracker(
    apply_fn: Callable,
    x_probe,
    *,
    chunk_size: int | None = None,
    mode: str = "jacobian",
    params0: Any = None,
) -> Callable:
    """A ``callback`` for :func:`~iterlin.training.train`/``fit`` that follows the empirical NTK on a probe set.

    At each evaluation point t (state.step) it computes K_t = Θ̂_{θ_t}(X_p, X_p) (the network's kernel)
    and K_s = Θ̂_{θ_s}(X_p, X_p) (the current linear model's kernel) and returns

    * ``kernel_distance_init``: d(K_t, K_0), the distance travelled from the initial kernel;
    * ``kernel_velocity``: d(K_t, K_prev) / (t − t_prev), the distance between the kernels at
      successive evaluation points per step (Fort et al. 2020); NaN at the first point;
    * ``kernel_distance_relin``: d(K_s, K_{s,prev}), the change of the linear model's kernel since
      the previous evaluation point, made by the re-linearisations in between; exactly 0 when θ_s did
      not change (no re-linearisation in between, e.g. K = ∞), and 0 at the first point.

    d is :func:`kernel_distance`. Kernels come from :func:`empirical_ntk` (compiled once, reused at
    every point) and are only computed when needed: K_s is reused when θ_s is unchanged or equals θ_t.
    With a sweep state (a leading run axis, ``state.step.ndim == 1``) each run is handled separately
    (a loop over runs) and the values are arrays (R,).

    To see every re-linearisation, evaluate at the multiples of K::

        cb = kernel_tracker(apply_fn, x_train[:32])
        params, hist = iterlin.train(apply_fn, params0, (x, y), K=100, steps=1000, optimizer=opt,
                                     eval_steps=relinearisation_steps(100, 1000), callback=cb)
        hist.extra["kernel_distance_relin"]   # (11,): the kernel change of each re-linearisation

    Args:
      apply_fn: ``apply_fn(params, x) -> (N, O)``.
      x_probe: (N_p, ...) fixed probe inputs; kernels are (N_p·O, N_p·O).
      chunk_size, mode: as :func:`empirical_ntk`.
      params0: θ_0 (stacked (R, ...) for a sweep) for K_0. By default K_0 is the kernel at the first
        point this tracker sees, which is θ_0 for a fresh run but not for one resumed from a
        checkpoint (the tracker keeps its reference kernels in memory): pass ``params0`` then.

    Returns:
      ``callback(step, state) -> dict`` (floats for one run, (R,) arrays for a sweep). It is stateful
      (it remembers the previous kernels): use a fresh tracker for each training run.
    """
    x_probe = _check_x(x_probe, "x_probe")
    mode = check_choice(mode, "mode", NTK_MODES)
    if chunk_size is not None:
        check_int(chunk_size, "chunk_size", minimum=1)
    ntk = functools.partial(empirical_ntk, apply_fn, chunk_size=chunk_size, mode=mode)
    dist = jax.jit(kernel_distance)
    same = jax.jit(lambda a, b: jnp.all(jnp.stack([jnp.array_equal(u, v) for u, v in zip(jax.tree.leaves(a),
                                                                                           jax.tree.leaves(b))])))
    mem: dict[str, Any] = {}

    def callback(step, state):
        sweep = np.ndim(state.step) == 1
        runs = int(np.shape(state.step)[0]) if sweep else 1
        run = (lambda tree, r: tree_index(tree, r)) if sweep else (lambda tree, r: tree)
        step = int(np.max(np.asarray(step)))
        first = "k_t" not in mem
        if first:
            mem["k0"] = [None if params0 is None else ntk(run(params0, r), x_probe) for r in range(runs)]
        d_init, vel, d_relin = np.zeros(runs), np.full(runs, np.nan), np.zeros(runs)
        ks_t, ks_s, ps = [], [], []
        for r in range(runs):
            p, p_s = run(state.params, r), run(state.params_s, r)
            k_t = ntk(p, x_probe)
            unchanged = not first and bool(same(p_s, mem["p_s"][r]))
            if unchanged:
                k_s = mem["k_s"][r]
            elif bool(same(p_s, p)):
                k_s = k_t
            else:
                k_s = ntk(p_s, x_probe)
            if mem["k0"][r] is None:
                mem["k0"][r] = k_t
            d_init[r] = 0.0 if mem["k0"][r] is k_t else float(dist(k_t, mem["k0"][r]))
            if not first:
                dt = step - mem["step"]
                vel[r] = float(dist(k_t, mem["k_t"][r])) / dt if dt > 0 else np.nan
                d_relin[r] = 0.0 if unchanged else float(dist(k_s, mem["k_s"][r]))
            ks_t.append(k_t)
            ks_s.append(k_s)
            ps.append(p_s)
        mem.update(k_t=ks_t, k_s=ks_s, p_s=ps, step=step)
        out = {"kernel_distance_init": d_init, "kernel_velocity": vel, "kernel_distance_relin": d_relin}
        return out if sweep else {k: float(v[0]) for k, v in out.items()}

    return callback
