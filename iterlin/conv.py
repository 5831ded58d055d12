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

A user's own network (``flax.linen.Conv``, ``nn.max_pool``, ``nn.avg_pool``, any
``lax.conv_general_dilated``) gets the same lowering without being rewritten by hand:
:func:`as_products` is a function transformation (a jaxpr interpreter) that evaluates the traced
function with each ``conv_general_dilated`` computed by :func:`matmul_conv_general_dilated` (any
layout, one or two spatial dimensions, dilations, feature groups) and each ``reduce_window_max`` /
``reduce_window_sum`` as a max / sum of strided slices. ``train``, ``train_sweep``, ``fit``,
``empirical_ntk``, ``empirical_ntk_fn``, ``ntk_vector_product`` and the Gauss–Newton functions apply
it by one documented rule, :func:`lower_convolutions` with their argument ``conv="auto"``: on the CPU
backend, and nowhere else (``conv="xla"`` turns it off, ``conv="matmul"`` forces it). A function
with nothing to rewrite (an MLP; ``make_model``'s networks on the CPU, already lowered) is called
as it is, so its computation does not change. The training loop's own rule covers what remains:
a step that still holds a convolution on the CPU is dispatched step by step rather than run inside
the compiled loop (:func:`iterlin.training.fit`, ``compiled_loop=None``).

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

import functools
import itertools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core

from .memo import memoise
from .validate import check_choice

__all__ = [
    "CONV_LOWERINGS",
    "LOWERING_CHOICES",
    "as_products",
    "contains_convolution",
    "lower_convolutions",
    "matmul_conv_general_dilated",
    "max_pool_2x2",
    "resolve_lowering",
]

#: The lowerings a model's convolutions accept (XLA's convolution, or slices and one product).
CONV_LOWERINGS = ("xla", "matmul")

#: The ``conv`` values of :func:`lower_convolutions` (and of ``train``, ``fit``, ``empirical_ntk``, ...):
#: a lowering of :data:`CONV_LOWERINGS`, or the rule ``"auto"``.
LOWERING_CHOICES = ("auto",) + CONV_LOWERINGS

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


# ----------------------------------------------------------------------------------------------
# Any function's convolutions and poolings as products: a jaxpr interpreter
# ----------------------------------------------------------------------------------------------

#: Call primitives whose body is inlined (evaluated by the interpreter) when it holds a rewrite.
_CALLS = ("jit", "pjit", "closed_call", "core_call")


def _transpose(a, perm):
    perm = tuple(int(p) for p in perm)
    return a if perm == tuple(range(a.ndim)) else jnp.transpose(a, perm)


def _conv_products(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
                   feature_group_count, batch_group_count, precision, preferred_element_type, **_):
    """``conv_general_dilated`` (its primitive's parameters) by :func:`matmul_conv_general_dilated`, or
    None where it is not rewritten (more than two spatial dimensions, ``batch_group_count`` > 1).

    Any layout (transposed to NHWC/HWIO and back), 1-d (a spatial axis of size one added) and 2-d;
    lhs dilation and explicit, possibly negative, padding by one ``lax.pad`` (interior padding
    ``d − 1``), rhs dilation by a kernel with d − 1 zeros between its taps; G feature groups as the
    product ``vmap``-ed over the groups: lhs (N, H, W, G·C_g), rhs (k_h, k_w, C_g, G·F_g) → group g
    convolves channels g·C_g … with filters g·F_g … (XLA's order).
    """
    nd = lhs.ndim - 2
    if nd not in (1, 2) or batch_group_count != 1:
        return None
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    x = _transpose(lhs, (lhs_spec[0], *lhs_spec[2:], lhs_spec[1]))  # (N, spatial..., C)
    w = _transpose(rhs, (*rhs_spec[2:], rhs_spec[1], rhs_spec[0]))  # (spatial..., C_g, F)
    strides, pads = tuple(window_strides), tuple(tuple(p) for p in padding)
    ldil, rdil = tuple(lhs_dilation or (1,) * nd), tuple(rhs_dilation or (1,) * nd)
    if nd == 1:  # a height of one
        x, w = x[:, None], w[None]
        strides, pads, ldil, rdil = (1, *strides), ((0, 0), *pads), (1, *ldil), (1, *rdil)
    if any(lo or hi for lo, hi in pads) or any(d != 1 for d in ldil):
        cfg = [(0, 0, 0)] + [(lo, hi, d - 1) for (lo, hi), d in zip(pads, ldil)] + [(0, 0, 0)]
        x = lax.pad(x, jnp.zeros((), x.dtype), cfg)
    if any(d != 1 for d in rdil):
        w = lax.pad(w, jnp.zeros((), w.dtype), [(0, 0, d - 1) for d in rdil] + [(0, 0, 0), (0, 0, 0)])
    conv = functools.partial(matmul_conv_general_dilated, window_strides=strides, padding=((0, 0), (0, 0)),
                             dimension_numbers=_NHWC, precision=precision,
                             preferred_element_type=preferred_element_type)
    g = int(feature_group_count)
    if g == 1:
        y = conv(x, w)
    else:
        xg = jnp.moveaxis(x.reshape(x.shape[:3] + (g, x.shape[3] // g)), 3, 0)  # (G, N, H, W, C_g)
        wg = jnp.moveaxis(w.reshape(w.shape[:3] + (g, w.shape[3] // g)), 3, 0)  # (G, k_h, k_w, C_g, F_g)
        y = jnp.moveaxis(jax.vmap(conv)(xg, wg), 0, 3)  # (N, H_out, W_out, G, F_g)
        y = y.reshape(y.shape[:3] + (y.shape[3] * y.shape[4],))
    if nd == 1:
        y = y[:, 0]
    return _transpose(y, np.argsort((out_spec[0], *out_spec[2:], out_spec[1])))


def _window_products(x, combine, init, *, window_dimensions, window_strides, padding, base_dilation,
                     window_dilation):
    """``reduce_window`` with ``combine`` (``jnp.maximum`` or ``+``) over the strided slices of x padded
    with ``init``, or None for a base dilation or a non-float x. Non-overlapping windows (strides
    equal to the window, no padding or dilation, sizes divisible) are a reshape and one reduction,
    as :func:`max_pool_2x2`."""
    if any(d != 1 for d in base_dilation) or not jnp.issubdtype(x.dtype, jnp.floating):
        return None
    wins, strides = tuple(window_dimensions), tuple(window_strides)
    if (wins == strides and all(d == 1 for d in window_dilation) and not any(lo or hi for lo, hi in padding)
            and all(n % w == 0 for n, w in zip(x.shape, wins))):
        shape, axes = [], []
        for n, w in zip(x.shape, wins):
            shape += [n // w, w] if w > 1 else [n]
            if w > 1:
                axes.append(len(shape) - 1)
        if not axes:
            return x
        r = x.reshape(shape)
        return jnp.max(r, axis=tuple(axes)) if combine is jnp.maximum else jnp.sum(r, axis=tuple(axes))
    if any(lo or hi for lo, hi in padding):
        x = lax.pad(x, jnp.asarray(init, x.dtype), [(lo, hi, 0) for lo, hi in padding])
    outs = [(n - (w - 1) * d - 1) // s + 1 for n, w, d, s in zip(x.shape, wins, window_dilation, strides)]
    slices = [
        lax.slice(x, [o * d for o, d in zip(off, window_dilation)],
                  [o * d + s * (m - 1) + 1 for o, d, s, m in zip(off, window_dilation, strides, outs)], strides)
        for off in itertools.product(*(range(w) for w in wins))
    ]
    return functools.reduce(combine, slices)


#: The primitives :func:`as_products` rewrites: name → rule(*operands, **params) returning the
#: result, or None to keep the primitive.
_RULES: dict[str, Callable] = {
    "conv_general_dilated": _conv_products,
    "reduce_window_max": lambda x, **p: _window_products(x, jnp.maximum, -jnp.inf, **p),
    "reduce_window_sum": lambda x, **p: _window_products(x, jnp.add, 0.0, **p),
}


def _rewrites(jaxpr) -> bool:
    """Whether the interpreter changes anything in ``jaxpr``: an equation of :data:`_RULES`, at top
    level or inside a call it inlines (:data:`_CALLS`)."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in _RULES:
            return True
        if eqn.primitive.name in _CALLS and _rewrites(eqn.params["jaxpr"].jaxpr):
            return True
    return False


def _evaluate(jaxpr, consts, args) -> list:
    """Evaluate ``jaxpr`` on ``args`` (arrays or tracers), each equation of :data:`_RULES` by its rule
    (products, emitted as JAX operations), calls holding one inlined, every other equation bound as
    it is (so ``custom_jvp``/``custom_vjp`` functions keep their rules, and loops their bodies)."""
    env = {}

    def read(v):
        return v.val if isinstance(v, core.Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        out = _RULES[name](*invals, **eqn.params) if name in _RULES else None
        if out is not None:
            outs = [out]
        elif name in _CALLS and _rewrites(eqn.params["jaxpr"].jaxpr):
            outs = _evaluate(eqn.params["jaxpr"].jaxpr, eqn.params["jaxpr"].consts, invals)
        else:
            with eqn.ctx.manager:
                outs = eqn.primitive.bind(*invals, **eqn.primitive.get_bind_params(eqn.params))
            outs = outs if eqn.primitive.multiple_results else [outs]
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


@memoise
def as_products(fn: Callable) -> Callable:
    """``fn`` with its convolutions and window reductions (pooling) computed as slices and matrix
    products: a function transformation (a jaxpr interpreter), the same function to rounding.

    At each trace (each call outside ``jit``), ``fn`` is traced to a jaxpr at its arguments'
    shapes and evaluated equation by equation, emitting JAX operations, so the result works under
    ``jit``, ``vmap``, ``jax.jvp``, ``jax.grad`` and ``jax.linearize`` like ``fn`` (their rules are
    those of the emitted slices and products). Rewritten:

    * ``lax.conv_general_dilated`` (``flax.linen.Conv``) with one or two spatial dimensions, any
      dimension numbers, strides, padding, dilations and ``feature_group_count``: by
      :func:`matmul_conv_general_dilated` (one product of (N·H_out·W_out, k_h·k_w·C_g) ×
      (k_h·k_w·C_g, F_g) per group); with three spatial dimensions or ``batch_group_count`` > 1
      it is kept.
    * ``reduce_window_max`` and ``reduce_window_sum`` on floats (``flax.linen.max_pool``,
      ``avg_pool``, ``lax.reduce_window``): the max (sum) of the window's strided slices, or a
      reshape and one reduction for non-overlapping windows; with a base dilation they are kept.

    Equations inside ``jit``-ed functions are rewritten too (the call is inlined); those inside
    ``custom_jvp``/``custom_vjp`` functions, loops and conditionals are kept as they are (their
    rules and bodies stay ``fn``'s). A function with nothing to rewrite is called as it is (its
    computation is unchanged). The products sum the same terms in another order: values, JVPs and
    gradients agree with ``fn``'s to rounding (``tests/test_conv.py``, float64), except the max's
    derivative at ties inside a window (split evenly between the tied entries here; given to one by
    ``reduce_window``; see the module docstring on why that does not reach a ReLU network).

    Memoised on ``fn`` (by identity): ``as_products(f) is as_products(f)``, so compiled programs
    cached on the function are reused. ``as_products(as_products(f))`` is ``as_products(f)``.

    Args:
      fn: any function of arrays (pytrees) to arrays, called positionally, e.g. ``apply_fn(params, x)``.

    Returns:
      ``products(*args)`` with ``fn``'s signature and outputs.
    """
    if getattr(fn, "products_of", None) is not None:
        return fn

    @functools.wraps(fn)
    def products(*args):
        closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        if not _rewrites(closed.jaxpr):
            return fn(*args)
        flat = [a if isinstance(a, jax.Array) else jnp.asarray(a) for a in jax.tree.leaves(args)]
        outs = _evaluate(closed.jaxpr, closed.consts, flat)
        return jax.tree.unflatten(jax.tree.structure(out_shape), outs)

    products.products_of = fn
    return products


def resolve_lowering(conv: str) -> str:
    """The lowering ``conv`` names (validated against :data:`LOWERING_CHOICES`): ``"xla"``, ``"matmul"``,
    or for the rule ``"auto"``: ``"matmul"`` when JAX's default backend is the CPU (XLA:CPU's
    convolutions run below its matrix-product rate, and several times slower inside a compiled loop,
    jax-ml/jax#12868), ``"xla"`` elsewhere (cuDNN's convolutions on accelerators). The same rule as
    :func:`iterlin.models.resolve_conv`."""
    conv = check_choice(conv, "conv", LOWERING_CHOICES)
    if conv != "auto":
        return conv
    return "matmul" if jax.default_backend() == "cpu" else "xla"


def lower_convolutions(fn: Callable, conv: str = "auto") -> Callable:
    """``fn`` with its convolutions lowered as ``conv`` says (:func:`resolve_lowering`): ``"matmul"``:
    :func:`as_products` ``(fn)``; ``"xla"``: ``fn`` itself; ``"auto"`` (the default of ``train``,
    ``train_sweep``, ``fit``, ``empirical_ntk``, ``ntk_vector_product`` and the Gauss–Newton
    functions): ``"matmul"`` on the CPU backend, ``"xla"`` elsewhere. A function without
    convolutions or poolings computes exactly what it did either way (see :func:`as_products`)."""
    return as_products(fn) if resolve_lowering(conv) == "matmul" else fn


def contains_convolution(jaxpr) -> bool:
    """Whether a (closed) jaxpr holds a ``conv_general_dilated`` anywhere (in any sub-jaxpr: calls,
    loops, conditionals, custom rules' bodies)."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "conv_general_dilated":
            return True
        if any(contains_convolution(sub) for sub in core.jaxprs_in_params(eqn.params)):
            return True
    return False
