"""iterlin.conv: the "matmul" lowering equals XLA's convolution and pooling (float64, values, JVPs, VJPs)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from iterlin.conv import matmul_conv_general_dilated, max_pool_2x2
from iterlin.models import CONV_CHOICES, make_model, resolve_conv

NHWC = ("NHWC", "HWIO", "NHWC")


def _pair(dtype, x_shape, k_shape, key=0):
    k1, k2 = jax.random.split(jax.random.key(key))
    return (jax.random.normal(k1, x_shape, dtype), jax.random.normal(k2, k_shape, dtype))


@pytest.mark.parametrize(
    "x_shape, k_shape, strides, padding",
    [
        ((2, 12, 12, 3), (5, 5, 3, 4), (1, 1), "VALID"),
        ((2, 9, 11, 3), (3, 3, 3, 5), (2, 2), ((1, 1), (1, 1))),
        ((1, 8, 8, 4), (1, 1, 4, 6), (2, 2), "VALID"),
        ((2, 7, 7, 2), (3, 2, 2, 3), (1, 2), "SAME"),
    ],
)
def test_conv_equals_lax_conv_with_derivatives(x64, x_shape, k_shape, strides, padding):
    x, w = _pair(jnp.float64, x_shape, k_shape)
    dx, dw = _pair(jnp.float64, x_shape, k_shape, key=1)

    def ref(x, w):
        return lax.conv_general_dilated(x, w, strides, padding, dimension_numbers=NHWC)

    def mm(x, w):
        return matmul_conv_general_dilated(x, w, strides, padding, dimension_numbers=NHWC)

    y_ref, t_ref = jax.jvp(ref, (x, w), (dx, dw))
    y_mm, t_mm = jax.jvp(mm, (x, w), (dx, dw))
    assert y_mm.shape == y_ref.shape
    np.testing.assert_allclose(y_mm, y_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(t_mm, t_ref, rtol=1e-12, atol=1e-12)
    g = jax.random.normal(jax.random.key(2), y_ref.shape, jnp.float64)
    for a, b in zip(jax.vjp(mm, x, w)[1](g), jax.vjp(ref, x, w)[1](g)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_conv_refuses_what_it_does_not_compute():
    x, w = _pair(jnp.float32, (1, 6, 6, 2), (3, 3, 2, 2))
    with pytest.raises(NotImplementedError, match="dilation"):
        matmul_conv_general_dilated(x, w, (1, 1), "VALID", rhs_dilation=(2, 2), dimension_numbers=NHWC)
    with pytest.raises(NotImplementedError, match="grouped"):
        matmul_conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=NHWC, feature_group_count=2)
    with pytest.raises(NotImplementedError, match="dimension_numbers"):
        matmul_conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))


def test_max_pool_equals_reduce_window(x64):
    import flax.linen as nn

    x = jax.random.normal(jax.random.key(0), (2, 6, 8, 3), jnp.float64)
    np.testing.assert_array_equal(max_pool_2x2(x), nn.max_pool(x, (2, 2), strides=(2, 2), padding="VALID"))
    with pytest.raises(ValueError, match="even"):
        max_pool_2x2(x[:, :5])


@pytest.mark.parametrize("name", ["cnn", "resnet18", "resnet18_bn"])
def test_models_equal_under_both_lowerings(x64, name):
    """Same parameters; logits, the JVP in θ (the linear model) and the gradient agree in float64.

    The tolerance is relative 1e-9: BatchNorm's batch statistics divide by small variances, which
    amplifies the products' different summation orders well above float64's 1e-16."""
    shape = (16, 16, 3) if name == "cnn" else (8, 8, 3)  # small images: every layer, a fraction of the cost
    x = jax.random.normal(jax.random.key(1), (2, *shape), jnp.float64)
    ref = make_model(name, jax.random.key(0), input_shape=shape, dtype=jnp.float64, conv="xla")
    mm = make_model(name, jax.random.key(0), input_shape=shape, dtype=jnp.float64, conv="matmul")
    for a, b in zip(jax.tree.leaves(ref.params), jax.tree.leaves(mm.params)):
        np.testing.assert_array_equal(a, b)
    params = ref.params
    tangent = jax.tree.map(lambda p: jax.random.normal(jax.random.key(3), p.shape, p.dtype), params)

    def lin(apply_fn):
        return jax.jit(lambda p, t: jax.jvp(lambda q: apply_fn(q, x), (p,), (t,)))(params, tangent)

    def grad(apply_fn):
        return jax.jit(jax.grad(lambda p: jnp.sum(jnp.sin(apply_fn(p, x)))))(params)

    (y0, t0), (y1, t1) = lin(ref.apply_fn), lin(mm.apply_fn)
    np.testing.assert_allclose(y1, y0, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(t1, t0, rtol=1e-9, atol=1e-10)
    for a, b in zip(jax.tree.leaves(grad(mm.apply_fn)), jax.tree.leaves(grad(ref.apply_fn))):
        # relative to each leaf's largest entry: BatchNorm's small entries carry its large ones' rounding
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-9 * float(np.abs(b).max()))


def test_resolve_conv_rule():
    expected = "matmul" if jax.default_backend() == "cpu" else "xla"
    assert resolve_conv("auto", "cnn") == expected
    assert resolve_conv("auto", "resnet18") == expected
    assert resolve_conv("auto", "mlp") == "xla"
    assert resolve_conv("xla", "cnn") == "xla" and resolve_conv("matmul", "cnn") == "matmul"
    assert set(CONV_CHOICES) == {"auto", "xla", "matmul"}
    with pytest.raises(ValueError, match="conv"):
        make_model("cnn", jax.random.key(0), conv="im2col")
