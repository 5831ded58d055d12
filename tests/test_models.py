"""Tests for iterlin.models: shapes, parameter counts, features, BatchNorm modes, validation.

Kept fast on CPU by sharing compilations: test data come from NumPy (every new jax.random shape
is a fresh XLA compilation), the ResNets are built once per module and every ResNet call uses the
same jitted functions on batches of 3 images.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from iterlin.models import (
    CNN,
    MLP,
    Model,
    ResNet18,
    cnn_features,
    count_params,
    make_model,
    quintic_model,
    resolve_conv,
    torch_default_init,
)
from iterlin.tree import tree_allclose, tree_index, tree_size


def _images(seed, n, dtype=np.float32, size=32):
    return jnp.asarray(np.random.default_rng(seed).standard_normal((n, size, size, 3)), dtype)


# ----------------------------------------------------------------------------------------------
# CNN
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cnn():
    # An "rbg" key compiles faster than the default threefry on CPU; the model ignores the key's kind.
    return make_model("cnn", jax.random.key(0, impl="rbg"))


def test_cnn_output_shape_and_param_count(cnn):
    assert isinstance(cnn, Model) and cnn.refresh is None
    expected = (
        (5 * 5 * 3 * 50 + 50)
        + (5 * 5 * 50 * 50 + 50)
        + (1250 * 120 + 120)
        + (120 * 84 + 84)
        + (84 * 10 + 10)
    )
    assert count_params(cnn.params) == expected == 227484
    assert cnn.params["conv1"]["kernel"].shape == (5, 5, 3, 50)
    assert set(cnn.params) == {"conv1", "conv2", "fc1", "fc2", "fc3"}
    out = cnn.apply_fn(cnn.params, _images(1, 4))
    assert out.shape == (4, 10) and out.dtype == jnp.float32


def test_cnn_features_shapes_and_consistency(cnn):
    x = _images(2, 4)
    feats = cnn_features(cnn.params, x)
    assert set(feats) == {"layer1", "layer2", "logits"}
    assert feats["layer1"].shape == (4, 14 * 14 * 50)
    assert feats["layer2"].shape == (4, 5 * 5 * 50)
    assert feats["logits"].shape == (4, 10)
    np.testing.assert_allclose(feats["logits"], cnn.apply_fn(cnn.params, x), rtol=1e-6, atol=1e-6)
    direct = CNN(conv=resolve_conv("auto")).apply({"params": cnn.params}, x, return_features=True)
    np.testing.assert_array_equal(direct["layer2"], feats["layer2"])  # the same lowering: the same numbers


def test_cnn_layer1_is_conv_relu_maxpool(cnn):
    """layer1 = flatten(maxpool_2x2/2(relu(conv5x5_VALID(x) + b))), recomputed in NumPy-checked lax."""
    x = _images(4, 4)
    p = cnn.params["conv1"]
    h = jax.lax.conv_general_dilated(
        x, p["kernel"], (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")
    ) + p["bias"]
    h = np.maximum(np.asarray(h), 0.0)  # (4, 28, 28, 50)
    pooled = h.reshape(4, 14, 2, 14, 2, 50).max(axis=(2, 4))
    feats = cnn_features(cnn.params, x)
    np.testing.assert_allclose(feats["layer1"], pooled.reshape(4, -1), rtol=1e-5, atol=1e-5)


def test_cnn_under_jit_vmap_jvp(cnn):
    x = _images(6, 2)
    f = jax.jit(cnn.apply_fn)
    out = f(cnn.params, x)
    np.testing.assert_allclose(out, cnn.apply_fn(cnn.params, x), rtol=1e-5, atol=1e-5)
    xs = jnp.stack([x, 2.0 * x])  # vmap over a leading axis of batches
    vout = jax.jit(jax.vmap(cnn.apply_fn, in_axes=(None, 0)))(cnn.params, xs)
    np.testing.assert_allclose(vout[0], out, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(vout[1], f(cnn.params, 2.0 * x), rtol=1e-5, atol=1e-5)
    # jvp in the parameters: primal = f, and uᵀ(J v) = (Jᵀu)ᵀ v against reverse mode.
    rng = np.random.default_rng(7)
    v = jax.tree.map(lambda a: jnp.asarray(rng.standard_normal(a.shape), a.dtype), cnn.params)
    u = jnp.asarray(rng.standard_normal(out.shape), out.dtype)
    primal, tangent = jax.jit(lambda p, v: jax.jvp(lambda q: cnn.apply_fn(q, x), (p,), (v,)))(cnn.params, v)
    np.testing.assert_allclose(primal, out, rtol=1e-5, atol=1e-5)
    g = jax.jit(jax.grad(lambda p: jnp.sum(u * cnn.apply_fn(p, x))))(cnn.params)
    lhs = float(jnp.sum(u * tangent))
    rhs = sum(float(jnp.vdot(a, b)) for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(v)))
    np.testing.assert_allclose(lhs, rhs, rtol=1e-4)


@pytest.mark.parametrize("name", ["cnn", "resnet18", "resnet18_bn", "mlp"])
def test_float64_models_abstractly(x64, name):
    """dtype reaches every layer: parameters and outputs are float64 (traced abstractly, no compile)."""
    shape = (2, 1) if name == "mlp" else (2, 32, 32, 3)

    def build_and_apply(key, x):
        m = make_model(name, key, dtype=jnp.float64)
        return m.params, m.apply_fn(m.params, x)

    params, out = jax.eval_shape(build_and_apply, jax.random.PRNGKey(0), jax.ShapeDtypeStruct(shape, jnp.float64))
    assert all(leaf.dtype == jnp.float64 for leaf in jax.tree.leaves(params))
    assert out.dtype == jnp.float64 and out.shape == (2, 1 if name == "mlp" else 10)


def test_cnn_other_input_shape():
    m = make_model("cnn", jax.random.key(1, impl="rbg"), input_shape=(28, 28, 3))
    assert m.params["fc1"]["kernel"].shape == (4 * 4 * 50, 120)
    assert m.apply_fn(m.params, jnp.zeros((2, 28, 28, 3))).shape == (2, 10)


# ----------------------------------------------------------------------------------------------
# MLP
# ----------------------------------------------------------------------------------------------


def test_mlp_maps_n1_to_n1():
    model = make_model("mlp", jax.random.key(0))  # a typed threefry key; PRNGKey elsewhere
    assert model.refresh is None
    x = jnp.linspace(-2.0, 2.0, 7)[:, None]
    out = model.apply_fn(model.params, x)
    assert out.shape == (7, 1)
    assert count_params(model.params) == (1 * 50 + 50) + 4 * (50 * 50 + 50) + (50 * 1 + 1)
    assert list(model.params) == ["dense0", "dense1", "dense2", "dense3", "dense4", "out"]
    assert float(jnp.std(out)) > 0.0  # not constant: the hidden layers are used


def test_mlp_float64_jvp_matches_finite_difference(x64):
    model = make_model("mlp", jax.random.PRNGKey(0), input_shape=(2,), num_classes=2, dtype=jnp.float64)
    assert all(leaf.dtype == jnp.float64 for leaf in jax.tree.leaves(model.params))
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.standard_normal((5, 2)))
    out = model.apply_fn(model.params, x)
    assert out.shape == (5, 2) and out.dtype == jnp.float64
    v = jax.tree.map(lambda a: jnp.asarray(rng.standard_normal(a.shape)), model.params)
    primal, tangent = jax.jvp(lambda q: model.apply_fn(q, x), (model.params,), (v,))
    np.testing.assert_allclose(primal, out, rtol=1e-12, atol=1e-12)
    eps = 1e-7  # small enough that no ReLU switches for these seeds
    plus = model.apply_fn(jax.tree.map(lambda a, b: a + eps * b, model.params, v), x)
    minus = model.apply_fn(jax.tree.map(lambda a, b: a - eps * b, model.params, v), x)
    np.testing.assert_allclose(tangent, (plus - minus) / (2 * eps), rtol=1e-6, atol=1e-8)


# ----------------------------------------------------------------------------------------------
# ResNet-18
# ----------------------------------------------------------------------------------------------


def _resnet18_expected_count(norm: bool, num_classes: int = 10) -> int:
    """Parameters of the CIFAR ResNet-18: every conv is followed by a BN (2·C params) when norm,
    else it has a bias (C params)."""
    convs = [(3, 3, 64)]  # (kernel size, in, out) of the stem
    cin = 64
    for width, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for j in range(2):
            s = stride if j == 0 else 1
            convs += [(3, cin, width), (3, width, width)]
            if s != 1 or cin != width:
                convs.append((1, cin, width))
            cin = width
    total = sum(k * k * i * o + (2 * o if norm else o) for k, i, o in convs)
    return total + 512 * num_classes + num_classes


@pytest.fixture(scope="module")
def resnets():
    """The three ResNet variants (same key, so "batch" and "frozen" share their parameters) and
    jitted apply / refresh functions, compiled once for batches of 3 images. An "rbg" key halves
    the initialisation's compile time on CPU (the models are agnostic to the key's kind)."""
    key = jax.random.key(0, impl="rbg")
    models = {
        "plain": make_model("resnet18", key),
        "batch": make_model("resnet18_bn", key),
        "frozen": make_model("resnet18_bn", key, bn_mode="frozen"),
    }
    apply = {k: jax.jit(m.apply_fn) for k, m in models.items()}
    return models, apply, jax.jit(models["frozen"].refresh)


def test_resnet18_param_counts(resnets):
    models, _, _ = resnets
    assert _resnet18_expected_count(True) == 11173962  # the well-known CIFAR ResNet-18 count
    assert count_params(models["plain"].params) == _resnet18_expected_count(False) == 11169162
    assert count_params(models["batch"].params) == _resnet18_expected_count(True)
    assert count_params(models["frozen"].params["params"]) == _resnet18_expected_count(True)
    # batch_stats: a mean and a variance per BN channel (4800 channels in 20 BN layers).
    assert count_params(models["frozen"].params["batch_stats"]) == 2 * 4800
    assert models["plain"].params["conv1"]["kernel"].shape == (3, 3, 3, 64)
    assert "bias" in models["plain"].params["conv1"] and "bn1" not in models["plain"].params
    assert "bias" not in models["batch"].params["conv1"] and "bn1" in models["batch"].params
    assert tree_allclose(models["batch"].params, models["frozen"].params["params"], rtol=0, atol=0)


def test_resnet18_output_shapes(resnets):
    models, apply, _ = resnets
    x = _images(1, 3)
    for kind in ("plain", "batch", "frozen"):
        out = apply[kind](models[kind].params, x)
        assert out.shape == (3, 10) and bool(jnp.all(jnp.isfinite(out))), kind
    assert models["frozen"].refresh is not None
    assert models["plain"].refresh is None and models["batch"].refresh is None


def test_batch_mode_depends_on_batch_frozen_does_not(resnets):
    models, apply, refresh = resnets
    x = _images(2, 3)
    x_changed = x.at[2].set(_images(3, 1)[0])  # change only example 2
    frozen_params = refresh(models["frozen"].params, _images(4, 3))
    for kind, depends in (("batch", True), ("frozen", False), ("plain", False)):
        params = frozen_params if kind == "frozen" else models[kind].params
        a, b = apply[kind](params, x), apply[kind](params, x_changed)
        assert (not np.allclose(a[0], b[0], rtol=1e-6, atol=1e-6)) == depends, kind
        assert not np.allclose(a[2], b[2], rtol=1e-6, atol=1e-6), kind  # the changed example did


def test_frozen_refresh_gives_exact_batch_statistics(resnets):
    # float32 (a float64 ResNet-18 costs ~10 s of compilation on CPU). The tolerance still separates
    # the exact statistics from the usual mistakes: the unbiased variance differs by a factor
    # 3072/3071 (3e-4) for 3 images of 32x32, a momentum-weighted update by far more.
    models, _, refresh = resnets
    frozen = models["frozen"]
    x = _images(5, 3)
    refreshed = refresh(frozen.params, x)
    assert jax.tree.structure(refreshed) == jax.tree.structure(frozen.params)
    # First BN layer: statistics of the stem convolution's output over (N, H, W).
    h = jax.lax.conv_general_dilated(
        x,
        frozen.params["params"]["conv1"]["kernel"],
        (1, 1),
        ((1, 1), (1, 1)),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
        precision=jax.lax.Precision.HIGHEST,
    )
    h = np.asarray(h, np.float64)
    mean = h.mean(axis=(0, 1, 2))
    var = ((h - mean) ** 2).mean(axis=(0, 1, 2))
    stats = refreshed["batch_stats"]["bn1"]
    np.testing.assert_allclose(stats["mean"], mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats["var"], var, rtol=1e-5, atol=1e-7)
    assert not np.allclose(stats["var"], var * 3072 / 3071, rtol=1e-5, atol=1e-7)  # the check can fail
    # Every BN layer was re-estimated (the initial stats are mean 0, var 1).
    for leaf in jax.tree.leaves(refreshed["batch_stats"]):
        assert not (np.all(leaf == 0.0) or np.all(leaf == 1.0))
    # The parameters are untouched by refresh.
    assert tree_allclose(refreshed["params"], frozen.params["params"], rtol=0, atol=0)


def test_frozen_after_refresh_equals_batch_mode_on_that_batch(resnets):
    models, apply, refresh = resnets
    x = _images(8, 3)
    refreshed = refresh(models["frozen"].params, x)
    out_frozen = apply["frozen"](refreshed, x)
    out_batch = apply["batch"](refreshed["params"], x)
    np.testing.assert_allclose(out_frozen, out_batch, rtol=1e-4, atol=1e-4)
    # ... and differs from the frozen network at the initial (mean 0, var 1) statistics.
    assert not np.allclose(apply["frozen"](models["frozen"].params, x), out_batch, rtol=1e-2, atol=1e-2)


def test_frozen_batch_stats_get_zero_gradient(resnets):
    models, _, refresh = resnets
    m = models["frozen"]
    x = _images(6, 3)
    params = refresh(m.params, x)
    grads = jax.jit(jax.grad(lambda p: jnp.sum(m.apply_fn(p, x) ** 2)))(params)
    assert jax.tree.structure(grads) == jax.tree.structure(params)
    for leaf in jax.tree.leaves(grads["batch_stats"]):
        np.testing.assert_array_equal(leaf, 0.0)
    assert all(float(jnp.max(jnp.abs(g))) > 0.0 for g in jax.tree.leaves(grads["params"]))


def test_batch_mode_is_linearisable_as_is(resnets):
    models, apply, _ = resnets
    m = models["batch"]
    x = _images(7, 3)
    v = jax.tree.map(jnp.ones_like, m.params)
    primal, tangent = jax.jit(lambda p, v: jax.jvp(lambda q: m.apply_fn(q, x), (p,), (v,)))(m.params, v)
    np.testing.assert_allclose(primal, apply["batch"](m.params, x), rtol=1e-5, atol=1e-5)
    assert tangent.shape == (3, 10) and bool(jnp.all(jnp.isfinite(tangent)))
    assert float(jnp.max(jnp.abs(tangent))) > 0.0


def test_frozen_apply_rejects_bare_params_collection(resnets):
    models, _, _ = resnets
    m = models["frozen"]
    with pytest.raises(TypeError, match="batch_stats"):
        m.apply_fn(m.params["params"], _images(0, 3))
    with pytest.raises(TypeError, match="batch_stats"):
        m.refresh(m.params["params"], _images(0, 3))


def test_modules_usable_without_the_factory():
    v = MLP().init(jax.random.PRNGKey(0), jnp.zeros((1, 1)))
    assert v["params"]["out"]["kernel"].shape == (50, 1)
    v = jax.eval_shape(ResNet18(norm=False).init, jax.random.PRNGKey(0), jnp.zeros((1, 32, 32, 3)))
    assert set(v) == {"params"} and count_params(v["params"]) == _resnet18_expected_count(False)
    assert isinstance(CNN(), nn.Module)


@pytest.mark.parametrize("name, dtype", [("cnn", "float32"), ("cnn", "float64"), ("mlp", "float32")])
def test_make_model_initialises_as_flax_op_by_op(name, dtype, request):
    """make_model compiles ``init`` as one program: the parameters are Flax's op-by-op ``init``'s,
    bit for bit, for either kind of key."""
    if dtype == "float64":
        request.getfixturevalue("x64")
    module = CNN(dtype=jnp.float64) if dtype == "float64" else CNN() if name == "cnn" else MLP()
    shape = (1,) if name == "mlp" else (32, 32, 3)
    for key in (jax.random.PRNGKey(3), jax.random.key(5)):
        m = make_model(name, key, dtype=jnp.dtype(dtype), conv="xla" if name == "cnn" else "auto")
        ref = module.init(key, jnp.zeros((1, *shape), dtype))["params"]
        assert jax.tree.structure(m.params) == jax.tree.structure(ref)
        for a, b in zip(jax.tree.leaves(m.params), jax.tree.leaves(ref)):
            assert a.dtype == b.dtype and np.array_equal(np.asarray(a), np.asarray(b))


# ----------------------------------------------------------------------------------------------
# count_params, validation
# ----------------------------------------------------------------------------------------------


def test_count_params():
    tree = {"a": jnp.zeros((2, 3)), "b": [jnp.zeros(4), jnp.zeros(())]}
    assert count_params(tree) == 11 == tree_size(tree)  # one implementation
    assert count_params(jax.eval_shape(lambda: tree)) == 11  # shapes only
    assert count_params({}) == 0


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(name="lenet"), ["name", "'lenet'", "resnet18_bn"]),
        (dict(name=3), ["name", "3"]),
        (dict(name="resnet18_bn", bn_mode="running"), ["bn_mode", "'running'", "frozen"]),
        (dict(name="cnn", bn_mode="batch"), ["bn_mode", "'batch'", "resnet18_bn"]),
        (dict(name="resnet18", bn_mode="frozen"), ["bn_mode", "'frozen'"]),
        (dict(name="cnn", input_shape=(32, 32)), ["input_shape", "(32, 32)"]),
        (dict(name="mlp", input_shape=(1, 1)), ["input_shape", "(1, 1)"]),
        (dict(name="cnn", input_shape=(32, 0, 3)), ["input_shape", "(32, 0, 3)"]),
        (dict(name="cnn", num_classes=0), ["num_classes", "0"]),
        (dict(name="mlp", num_classes=2.5), ["num_classes", "2.5"]),
        (dict(name="mlp", dtype=jnp.int32), ["dtype"]),
    ],
)
def test_invalid_arguments_raise_valueerror_naming_parameter(kwargs, words):
    name = kwargs.pop("name")
    with pytest.raises(ValueError) as err:
        make_model(name, jax.random.PRNGKey(0), **kwargs)
    for w in words:
        assert w in str(err.value), (w, str(err.value))


# ----------------------------------------------------------------------------------------------
# The quintic model: PyTorch's default nn.Linear initialisation (this edition's choice)
# ----------------------------------------------------------------------------------------------


def test_torch_default_init_draws_uniform_within_one_over_sqrt_fan_in():
    mlp = make_model("mlp", jax.random.PRNGKey(0))
    p = torch_default_init(jax.random.PRNGKey(1), mlp.params)
    assert jax.tree.structure(p) == jax.tree.structure(mlp.params)
    for name, layer in p.items():
        bound = 1.0 / np.sqrt(layer["kernel"].shape[0])
        for leaf, ref in ((layer["kernel"], mlp.params[name]["kernel"]), (layer["bias"], mlp.params[name]["bias"])):
            assert leaf.shape == ref.shape and leaf.dtype == ref.dtype
            assert np.all(np.abs(np.asarray(leaf)) <= bound)
        if layer["kernel"].size >= 2500:  # 50 × 50: the draws fill the interval (uniform, not normal)
            k = np.asarray(layer["kernel"])
            assert k.max() > 0.95 * bound and k.min() < -0.95 * bound
            assert abs(k.std() - bound / np.sqrt(3)) < 0.05 * bound
    assert np.all(np.asarray(p["dense0"]["bias"]) != 0)  # biases are drawn too (Flax's are zero)
    assert tree_allclose(p, torch_default_init(jax.random.PRNGKey(1), mlp.params), rtol=0, atol=0)
    assert not tree_allclose(p, torch_default_init(jax.random.PRNGKey(2), mlp.params))


def test_quintic_model_is_stacked_over_seeds(x64):
    apply_fn, params = quintic_model([3, 0, 7], jnp.float64)
    base = make_model("mlp", jax.random.PRNGKey(0), dtype=jnp.float64).params
    assert all(leaf.shape[0] == 3 and leaf.dtype == jnp.float64 for leaf in jax.tree.leaves(params))
    for i, seed in enumerate([3, 0, 7]):
        assert tree_allclose(tree_index(params, i), torch_default_init(jax.random.PRNGKey(seed), base), rtol=0, atol=0)
    x = jnp.linspace(-3.0, 3.0, 5, dtype=jnp.float64)[:, None]
    assert apply_fn(tree_index(params, 0), x).shape == (5, 1)


def test_quintic_model_ntk_has_full_rank_on_the_quintic_data(x64):
    """Why this initialisation: the NTK on the 20 training points has rank 20 (Flax's default: 4)."""
    from iterlin.solvers.closed_form import residual_spectrum
    from iterlin.data import quintic

    d = quintic(20, 10, dtype=np.float64)
    apply_fn, params = quintic_model([0], jnp.float64)
    sigma, _ = residual_spectrum(apply_fn, tree_index(params, 0), d.x_train, d.y_train)
    assert int(np.sum(np.asarray(sigma) > 1e-10 * float(sigma[-1]))) == 20
    flax = make_model("mlp", jax.random.PRNGKey(0), dtype=jnp.float64)
    sigma, _ = residual_spectrum(flax.apply_fn, flax.params, d.x_train, d.y_train)
    assert int(np.sum(np.asarray(sigma) > 1e-10 * float(sigma[-1]))) == 4


@pytest.mark.parametrize(
    "params, words",
    [
        ({}, ["params", "Dense"]),
        ({"a": {"kernel": jnp.zeros((2, 3))}}, ["params", "Dense"]),
        ([jnp.zeros(2)], ["params", "Dense"]),
        ({"a": {"kernel": jnp.zeros((2, 3)), "bias": jnp.zeros(2)}}, ["params['a']", "(2, 3)", "(2,)"]),
        ({"a": {"kernel": jnp.zeros((2, 2, 3)), "bias": jnp.zeros(3)}}, ["params['a']", "(2, 2, 3)"]),
    ],
)
def test_torch_default_init_refuses_other_trees(params, words):
    with pytest.raises(ValueError) as err:
        torch_default_init(jax.random.PRNGKey(0), params)
    for w in words:
        assert w in str(err.value), (w, str(err.value))


@pytest.mark.parametrize("seeds", [[], 3, "012", [1, -1], [0.5], [True]])
def test_quintic_model_refuses_bad_seeds(seeds):
    with pytest.raises(ValueError, match="seeds="):
        quintic_model(seeds)
