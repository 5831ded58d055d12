"""Convolution and max-pooling lowered to slices and one matrix product (the ``"matmul"`` lowering).

A 2-d convolution of an NHWC input x with an HWIO kernel W (k_h × k_w × C × F), strides
(s_h, s_w) and zero padding, is

    y[n, i, j, :] = Σ_{a < k_h, b < k_w} x_pad[n, s_h·i + a, s_w·j + b, :] · W[a, b]          (C → F)
                  = cols[n, i, j, :] · W.reshape(k_h·k_w·C, F),

where ``cols`` concatenates the k_h·k_w strided slices of x_pad along the channel axis (im2col by
slicing). The whole convolution is then ONE dense product of shape (N·H_out·W_out, k_h·k_w·C) ×
(k_h·k_w·C, F), and its derivatives are products of the same shapes (the JVP in W is cols · dW; the
VJP in W is colsᵀ · g; the VJP in x scatters g · Wᵀ back through the slices). A 2×2 max-pool with
stride 2 on even sizes is a reshape (N, H/2, 2, W/2, 2, C) and a max over the two window axes.

Why: XLA:CPU runs these products near the machine's matrix-multiply ceiling, while its
convolutions (and, above all, the grouped convolutions it makes of a ``vmap``-ed convolution) run
well below it; see ``benchmarks/bench_train.py``. On accelerators cuDNN's convolutions are the
fast route, so :func:`iterlin.models.make_model` picks this lowering by its documented rule
(``conv="auto"``: ``"matmul"`` when JAX's default backend is the CPU, ``"xla"`` elsewhere).

Both routes compute the same function: the products sum the same terms in another order, so they
agree to rounding (``tests/test_conv.py`` checks values, gradients and JVPs in float64). The
max-pool's derivative differs only where a window holds two equal maxima, where ``jnp.max``
splits the cotangent evenly between them and ``lax.reduce_window`` gives it to one; inside the
paper's networks a tie follows a ReLU and sits at zero, where the ReLU's derivative is zero, so the
networks' derivatives agree as well.

A known XLA:CPU fault (jaxlib 0.10.2): in a jitted, ``vmap``-ed program, the linearisation of a
network with this max-pool (``jax.linearize``) applied to a tangent that is zero at compile time
(``jnp.zeros_like(θ)`` inside the program) can return NaN: the reduction of the max-pool's JVP is
compiled into a YNNPACK library fusion that mishandles it (with
``XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=dot,individual_dot`` it does not occur). A tangent
that is an argument, or computed from one, is unaffected. The library never applies a linearisation
to a constant zero (:func:`iterlin.solvers.gauss_newton.conjugate_gradient` starts from r₀ = b for this
reason); code of one's own that does should pass the zero in as an argument.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
from jax import lax

__all__ = ["CONV_LOWERINGS", "matmul_conv_general_dilated", "max_pool_2x2"]

#: The lowerings a model's convolutions accept (XLA's convolution, or slices and one product).
CONV_LOWERINGS = ("xla", "matmul")

_NHWC = ("NHWC", "HWIO", "NHWC")


def _is_nhwc(dimension_numbers) -> bool:
    if dimension_numbers is None:
        return False
    if isinstance(dimension_numbers, lax.ConvDimensionNumbers):
        return tuple(dimension_numbers) == ((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
    return tuple(dimension_numbers) == _NHWC


def matmul_conv_general_dilated(
    lhs,
    rhs,
    window_strides: Sequence[int],
    padding,
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers=None,
    feature_group_count: int = 1,
    batch_group_count: int = 1,
    precision=None,
    preferred_element_type=None,
):
    """``lax.conv_general_dilated`` for 2-d NHWC/HWIO convolutions, as slices and one matrix product.

    The signature is ``lax.conv_general_dilated``'s, so that ``flax.linen.Conv(...,
    conv_general_dilated=matmul_conv_general_dilated)`` uses it with unchanged parameters.
    Supported: lhs (N, H, W, C), rhs (k_h, k_w, C, F), any strides, ``"VALID"``, ``"SAME"`` or
    explicit ((lo, hi), (lo, hi)) zero padding; no dilation, one feature and batch group. Returns
    (N, H_out, W_out, F) with H_out = ⌊(H + lo + hi − k_h) / s_h⌋ + 1 (likewise W_out).

    Raises:
        NotImplementedError: another layout, a dilation, or grouped convolutions.
    """
    if lhs.ndim != 4 or rhs.ndim != 4 or not _is_nhwc(dimension_numbers):
        raise NotImplementedError(
            "matmul_conv_general_dilated: only 2-d convolutions with dimension_numbers "
            f"{_NHWC} are supported; got lhs {lhs.shape}, rhs {rhs.shape}, {dimension_numbers!r}"
        )
    if any(d != 1 for d in tuple(lhs_dilation or (1, 1)) + tuple(rhs_dilation or (1, 1))):
        raise NotImplementedError("matmul_conv_general_dilated: dilations are not supported")
    if feature_group_count != 1 or batch_group_count != 1:
        raise NotImplementedError("matmul_conv_general_dilated: grouped convolutions are not supported")
    kh, kw, c, f = rhs.shape
    sh, sw = tuple(window_strides)
    if isinstance(padding, str):
        padding = lax.padtype_to_pads(lhs.shape[1:3], (kh, kw), (sh, sw), padding)
    (ph0, ph1), (pw0, pw1) = padding
    if ph0 or ph1 or pw0 or pw1:
        lhs = jnp.pad(lhs, ((0, 0), (ph0, ph1), (pw0, pw1), (0, 0)))
    n, h, w, _ = lhs.shape
    ho, wo = (h - kh) // sh + 1, (w - kw) // sw + 1
    cols = [
        lax.slice(lhs, (0, a, b, 0), (n, a + sh * (ho - 1) + 1, b + sw * (wo - 1) + 1, c), (1, sh, sw, 1))
        for a in range(kh)
        for b in range(kw)
    ]
    cols = cols[0] if len(cols) == 1 else jnp.concatenate(cols, axis=-1)
    return jnp.dot(cols, rhs.reshape(kh * kw * c, f), precision=precision,
                   preferred_element_type=preferred_element_type)


def max_pool_2x2(x):
    """2×2 max-pooling with stride 2 ("VALID") of x (N, H, W, C) with H and W even -> (N, H/2, W/2, C).

    A reshape and a max: the same values as ``flax.linen.max_pool(x, (2, 2), strides=(2, 2))``.
    """
    n, h, w, c = x.shape
    if h % 2 or w % 2:
        raise ValueError(f"max_pool_2x2: height and width must be even; got x of shape {x.shape}")
    return jnp.max(x.reshape(n, h // 2, 2, w // 2, 2, c), axis=(2, 4))
