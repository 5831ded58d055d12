"""One numerical-precision policy for iterlin: kernel and Jacobian contractions, and float64.

Contractions. Every product that builds or applies an empirical NTK or a Jacobian (Θ = JJᵀ,
Σ_leaves J_a J_bᵀ, Jᵀa, U diag(φ) Uᵀr, the Gram matrices of the linear probes) is computed with
:data:`KERNEL_PRECISION` = ``jax.lax.Precision.HIGHEST``: full float32 (or float64) arithmetic,
never the reduced-precision passes (TF32, bf16) that XLA may use for default-precision matrix
products on GPUs. Kernels are compared to 1e-6 and eigendecomposed, and their small eigenvalues
decide the spectral filters (Eq. 5–6, 18–19), so they must not lose 13 bits of mantissa. On CPU the
setting changes nothing. :func:`matmul` and :func:`einsum` are ``jnp.matmul``/``jnp.einsum`` with
that precision.

Jacobians. The products inside the network (its convolutions and dense layers) feed the Jacobian as
much as the contractions above do: a TF32 pass rounds J's entries to about 1e-3, and Θ = JJᵀ with
them. So wherever ``apply_fn`` is differentiated to build or apply a Jacobian or an NTK (per-example
Jacobians, the NTK's vector products, the Gauss–Newton step) it is traced inside
:func:`full_precision`, which sets JAX's default precision of every 32-bit matrix product and
convolution traced in its block to :data:`KERNEL_PRECISION`. Whether a GPU uses TF32 for a
default-precision convolution is otherwise the autotuner's choice, which can differ from one process
to the next. Training (the network's forward pass and its gradient, the linearised model's JVP) and
the sharpness estimates of :mod:`iterlin.analysis.stability` (a largest eigenvalue, which no filter reads) keep
JAX's default precision.

float64. :func:`x64` is a context manager that sets ``jax_enable_x64`` inside a block and restores
the previous value afterwards (the Gauss–Newton experiments run in float64, Sec. 4.3).
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["KERNEL_PRECISION", "matmul", "einsum", "full_precision", "x64"]

#: The precision of every kernel / Jacobian contraction in iterlin (see the module docstring).
KERNEL_PRECISION = jax.lax.Precision.HIGHEST


def matmul(a, b):
    """``a @ b`` at :data:`KERNEL_PRECISION` (shapes as ``jnp.matmul``)."""
    return jnp.matmul(a, b, precision=KERNEL_PRECISION)


def einsum(subscripts: str, *operands):
    """``jnp.einsum(subscripts, *operands)`` at :data:`KERNEL_PRECISION`."""
    return jnp.einsum(subscripts, *operands, precision=KERNEL_PRECISION)


def full_precision():
    """A context manager: every 32-bit matrix product and convolution traced inside the block that
    does not name its own precision runs at :data:`KERNEL_PRECISION` (``jax.default_matmul_precision``;
    the previous default is restored afterwards). A jitted function traced inside keeps that precision;
    JAX keys its compilation cache on the setting, so the same function traced outside compiles anew."""
    return jax.default_matmul_precision(KERNEL_PRECISION.name.lower())


@contextlib.contextmanager
def x64(enabled: bool):
    """``jax_enable_x64`` set to ``enabled`` inside the block, the previous value restored after.

    ``enabled``: a bool (NumPy bools and the integers 0 and 1 are accepted). The previous value is
    restored also when the block raises. Arrays created inside keep their dtype afterwards.
    """
    if isinstance(enabled, (bool, np.bool_)) or (isinstance(enabled, (int, np.integer)) and enabled in (0, 1)):
        enabled = bool(enabled)
    else:
        raise ValueError(f"enabled={enabled!r} is not allowed: enabled must be a bool (True: float64, False: float32).")
    previous = bool(jax.config.jax_enable_x64)
    jax.config.update("jax_enable_x64", enabled)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)
