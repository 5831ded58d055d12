"""iterlin.conv: the "matmul" lowering equals XLA's convolution and pooling (float64, values, JVPs, VJPs)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from iterlin.conv import matmul_conv_general_dilated, max_pool_2x2
from iterlin.models import CONV_CHOICES, BasicBlock, make_model, resolve_conv

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


def _equal_under_both_lowerings(build, x):
    """``build(conv) -> (apply_fn, params)`` under "xla" and "matmul": the same parameters; logits,
    the JVP in θ (the linear model) and the gradient agree in float64 (relative 1e-9: BatchNorm's
    batch statistics divide by small variances, which amplifies the products' different summation
    orders well above float64's 1e-16)."""
    (ref, params), (mm, mm_params) = build("xla"), build("matmul")
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(mm_params)):
        np.testing.assert_array_equal(a, b)
    tangent = jax.tree.map(lambda p: jax.random.normal(jax.random.key(3), p.shape, p.dtype), params)

    def lin(apply_fn):
        return jax.jit(lambda p, t: jax.jvp(lambda q: apply_fn(q, x), (p,), (t,)))(params, tangent)

    def grad(apply_fn):
        return jax.jit(jax.grad(lambda p: jnp.sum(jnp.sin(apply_fn(p, x)))))(params)

    (y0, t0), (y1, t1) = lin(ref), lin(mm)
    np.testing.assert_allclose(y1, y0, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(t1, t0, rtol=1e-9, atol=1e-10)
    for a, b in zip(jax.tree.leaves(grad(mm)), jax.tree.leaves(grad(ref))):
        # relative to each leaf's largest entry: BatchNorm's small entries carry its large ones' rounding
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-9 * float(np.abs(b).max()))


def test_cnn_equal_under_both_lowerings(x64):
    """The CNN (convolutions and max-pooling), small images: every layer at a fraction of the cost."""
    x = jax.random.normal(jax.random.key(1), (2, 16, 16, 3), jnp.float64)

    def build(conv):
        m = make_model("cnn", jax.random.key(0), input_shape=(16, 16, 3), dtype=jnp.float64, conv=conv)
        return m.apply_fn, m.params

    _equal_under_both_lowerings(build, x)


@pytest.mark.parametrize("norm", [False, True])
def test_resnet_block_equal_under_both_lowerings(x64, norm):
    """ResNet-18's building block with every convolution the network has (3×3 at stride 2 and 1,
    padding 1; the 1×1 stride-2 shortcut), with and without BatchNorm (batch statistics, as
    ``resnet18_bn``'s default mode): the numerical check, on the block; that the whole network
    takes the lowering in every layer is the next test's (traced, nothing compiled)."""
    x = jax.random.normal(jax.random.key(1), (2, 8, 8, 4), jnp.float64)

    def build(conv):
        block = BasicBlock(features=8, stride=2, norm=norm, dtype=jnp.float64, conv=conv)
        variables = block.init(jax.random.key(0), x, train=True)

        def apply_fn(params, x):
            if not norm:
                return block.apply({"params": params}, x)
            return block.apply({"params": params}, x, train=True, mutable=["batch_stats"])[0]

        return apply_fn, variables["params"]

    _equal_under_both_lowerings(build, x)


@pytest.mark.parametrize("name", ["resnet18", "resnet18_bn"])
def test_resnet18_takes_the_lowering_in_every_layer(x64, name):
    """Under "matmul" no convolution or pooling primitive is left anywhere in ResNet-18's
    initialisation, logits, JVP in θ or gradient (traced, not compiled); under "xla" they are there
    (so the check sees them). With the block's numerical check above this is the whole network's."""
    x = jax.ShapeDtypeStruct((2, 8, 8, 3), jnp.float64)

    def routes(conv):
        def f(key, x):
            m = make_model(name, key, input_shape=(8, 8, 3), dtype=jnp.float64, conv=conv)
            t = jax.tree.map(jnp.ones_like, m.params)
            jvp = jax.jvp(lambda q: m.apply_fn(q, x), (m.params,), (t,))
            return jvp, jax.grad(lambda p: jnp.sum(m.apply_fn(p, x)))(m.params)

        return _primitives(f, jax.random.key(0), x)

    lowered = {"conv_general_dilated", "reduce_window_max", "reduce_window_sum", "reduce_window"}
    assert "conv_general_dilated" in routes("xla")
    assert not routes("matmul") & lowered, sorted(routes("matmul") & lowered)


def test_resolve_conv_rule():
    expected = "matmul" if jax.default_backend() == "cpu" else "xla"
    assert resolve_conv("auto", "cnn") == expected
    assert resolve_conv("auto", "resnet18") == expected
    assert resolve_conv("auto", "mlp") == "xla"
    assert resolve_conv("xla", "cnn") == "xla" and resolve_conv("matmul", "cnn") == "matmul"
    assert set(CONV_CHOICES) == {"auto", "xla", "matmul"}
    with pytest.raises(ValueError, match="conv"):
        make_model("cnn", jax.random.key(0), conv="im2col")


# ----------------------------------------------------------------------------------------------
# as_products: any function's convolutions and poolings rewritten into products
# ----------------------------------------------------------------------------------------------


def _primitives(fn, *args):
    """The names of the primitives in fn's jaxpr (sub-jaxprs included)."""
    from jax.extend import core

    names = set()

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            names.add(eqn.primitive.name)
            for sub in core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return names


def _same_function(fn, args, *, tol=1e-12):
    """as_products(fn) equals fn on args: values, a JVP and the gradient of a scalar of the outputs,
    in float64; and its jaxpr holds no convolution or window reduction."""
    from iterlin.conv import as_products

    prod = as_products(fn)
    names = _primitives(prod, *args)
    assert not names & {"conv_general_dilated", "reduce_window_max", "reduce_window_sum"}, names
    tangents = tuple(jax.random.normal(jax.random.key(7 + i), a.shape, a.dtype) for i, a in enumerate(args))
    (y_ref, t_ref), (y, t) = jax.jvp(fn, args, tangents), jax.jvp(prod, args, tangents)
    assert y.shape == y_ref.shape and y.dtype == y_ref.dtype
    np.testing.assert_allclose(y, y_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(t, t_ref, rtol=tol, atol=tol)
    argnums = tuple(range(len(args)))
    g_ref = jax.grad(lambda *a: jnp.sum(jnp.sin(fn(*a))), argnums)(*args)
    g = jax.grad(lambda *a: jnp.sum(jnp.sin(prod(*a))), argnums)(*args)
    for a, b in zip(g, g_ref):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "x_shape, k_shape, kwargs",
    [
        ((2, 12, 12, 3), (5, 5, 3, 4), dict(window_strides=(1, 1), padding="VALID")),
        ((2, 9, 11, 4), (3, 3, 2, 6), dict(window_strides=(2, 1), padding="SAME", feature_group_count=2)),
        ((2, 9, 8, 6), (3, 2, 1, 6), dict(window_strides=(1, 1), padding="SAME", feature_group_count=6)),
        ((2, 9, 8, 3), (3, 2, 3, 4), dict(window_strides=(2, 2), padding=((1, 2), (0, 1)), rhs_dilation=(2, 1))),
        ((2, 6, 5, 3), (3, 3, 3, 2), dict(window_strides=(1, 1), padding=((1, 1), (2, 0)), lhs_dilation=(2, 2))),
        ((2, 9, 8, 3), (3, 2, 3, 4), dict(window_strides=(1, 2), padding=((-1, 1), (2, 0)))),
    ],
)
def test_as_products_equals_lax_conv(x64, x_shape, k_shape, kwargs):
    x, w = _pair(jnp.float64, x_shape, k_shape)
    _same_function(lambda x, w: lax.conv_general_dilated(x, w, dimension_numbers=NHWC, **kwargs), (x, w))


def test_as_products_other_layouts_and_one_spatial_dimension(x64):
    x, w = _pair(jnp.float64, (2, 4, 7, 7), (5, 4, 3, 3))  # NCHW, OIHW (lax's default)
    _same_function(lambda x, w: lax.conv_general_dilated(x, w, (2, 2), "SAME"), (x, w))
    x, w = _pair(jnp.float64, (2, 10, 3), (3, 3, 4))
    _same_function(lambda x, w: lax.conv_general_dilated(x, w, (2,), "SAME", dimension_numbers=("NWC", "WIO", "NWC")),
                   (x, w))


@pytest.mark.parametrize("pool, shape", [
    (lambda x: __import__("flax.linen").linen.max_pool(x, (2, 2), strides=(2, 2)), (2, 8, 6, 3)),
    (lambda x: __import__("flax.linen").linen.max_pool(x, (3, 3), strides=(2, 2), padding="SAME"), (2, 8, 7, 3)),
    (lambda x: __import__("flax.linen").linen.avg_pool(x, (2, 2), strides=(1, 1), padding="SAME"), (2, 8, 7, 3)),
    (lambda x: __import__("flax.linen").linen.avg_pool(x, (2, 2), strides=(2, 2)), (2, 8, 6, 3)),
])
def test_as_products_equals_pooling(x64, pool, shape):
    _same_function(pool, (jax.random.normal(jax.random.key(3), shape, jnp.float64),))


class _UserCNN:
    """A researcher's own Flax CNN (not make_model): convolutions, strides, SAME padding, pooling."""

    @staticmethod
    def make():
        import flax.linen as nn

        class Net(nn.Module):
            @nn.compact
            def __call__(self, x):
                x = nn.max_pool(nn.relu(nn.Conv(4, (3, 3), strides=2, padding="SAME")(x)), (2, 2), strides=(2, 2))
                x = nn.avg_pool(nn.Conv(6, (3, 3), feature_group_count=2)(x), (2, 2), padding="SAME")
                return nn.Dense(3)(x.reshape(x.shape[0], -1))

        net = Net()
        params = net.init(jax.random.key(0), jnp.ones((1, 12, 12, 3)))
        return net.apply, jax.tree.map(lambda a: a.astype(jnp.float64), params)


def test_as_products_of_a_user_network_under_jit_vmap_and_closures(x64):
    from iterlin.conv import as_products

    apply_fn, params = _UserCNN.make()
    x = jax.random.normal(jax.random.key(1), (3, 12, 12, 3), jnp.float64)
    leaves, tree = jax.tree.flatten(params)
    flat = lambda x, *leaves: apply_fn(jax.tree.unflatten(tree, leaves), x)  # noqa: E731
    _same_function(flat, (x, *leaves))
    _same_function(jax.jit(flat), (x, *leaves))  # inside a jit-ed function: the call is inlined
    prod = as_products(apply_fn)
    assert as_products(apply_fn) is prod and as_products(prod) is prod  # memoised: programs are reused
    np.testing.assert_allclose(jax.vmap(prod, (None, 0))(params, x[:, None])[:, 0], apply_fn(params, x), atol=1e-12)
    scaled = jax.jit(lambda p, x, s: as_products(lambda q, y: apply_fn(q, y) * s)(p, x))  # closes over a tracer
    np.testing.assert_allclose(scaled(params, x, 2.0), 2 * apply_fn(params, x), atol=1e-12)


def test_as_products_keeps_what_it_does_not_rewrite(x64):
    from iterlin.conv import as_products

    x, w = _pair(jnp.float64, (1, 5, 5, 5, 2), (2, 2, 2, 2, 3))  # 3 spatial dimensions: kept

    def conv3d(x, w):
        return lax.conv_general_dilated(x, w, (1, 1, 1), "VALID", dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))

    assert "conv_general_dilated" in _primitives(as_products(conv3d), x, w)
    np.testing.assert_array_equal(as_products(conv3d)(x, w), conv3d(x, w))

    def mlp(x):  # nothing to rewrite: fn itself is called, the same program
        return jnp.tanh(x @ jnp.ones((5, 2)))

    z = jnp.ones((3, 5))
    assert str(jax.make_jaxpr(as_products(mlp))(z)) == str(jax.make_jaxpr(mlp)(z))


def test_lower_convolutions_rule():
    from iterlin.conv import as_products, lower_convolutions

    f = lambda p, x: x  # noqa: E731
    assert lower_convolutions(f, "xla") is f
    assert lower_convolutions(f, "matmul") is as_products(f)
    assert lower_convolutions(f) is (as_products(f) if jax.default_backend() == "cpu" else f)
    with pytest.raises(ValueError, match="conv"):
        lower_convolutions(f, "fast")
