"""Tests for iterlin.models: shapes, parameter counts, features, BatchNorm modes, validation."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from iterlin.models import CNN, MLP, ResNet18, Model, cnn_features, count_params, make_model


def _images(seed, n, dtype=jnp.float32):
    return jax.random.normal(jax.random.PRNGKey(seed), (n, 32, 32, 3), dtype)


# ----------------------------------------------------------------------------------------------
# CNN
# ----------------------------------------------------------------------------------------------


def test_cnn_output_shape_and_param_count():
    model = make_model("cnn", jax.random.PRNGKey(0))
    assert isinstance(model, Model) and model.refresh is None
    expected = (
        (5 * 5 * 3 * 50 + 50)
        + (5 * 5 * 50 * 50 + 50)
        + (1250 * 120 + 120)
        + (120 * 84 + 84)
        + (84 * 10 + 10)
    )
    assert count_params(model.params) == expected == 227484
    assert model.params["conv1"]["kernel"].shape == (5, 5, 3, 50)
    assert set(model.params) == {"conv1", "conv2", "fc1", "fc2", "fc3"}
    out = model.apply_fn(model.params, _images(1, 4))
    assert out.shape == (4, 10) and out.dtype == jnp.float32


def test_cnn_features_shapes_and_consistency():
    model = make_model("cnn", jax.random.PRNGKey(0))
    x = _images(2, 3)
    feats = cnn_features(model.params, x)
    assert set(feats) == {"layer1", "layer2", "logits"}
    assert feats["layer1"].shape == (3, 14 * 14 * 50)
    assert feats["layer2"].shape == (3, 5 * 5 * 50)
    assert feats["logits"].shape == (3, 10)
    np.testing.assert_allclose(feats["logits"], model.apply_fn(model.params, x), rtol=1e-6, atol=1e-6)
    direct = CNN().apply({"params": model.params}, x, return_features=True)
    np.testing.assert_array_equal(direct["layer2"], feats["layer2"])


def test_cnn_layer1_is_conv_relu_maxpool(x64):
    """layer1 = flatten(maxpool_2x2/2(relu(conv5x5_VALID(x) + b))), computed here with jax.lax."""
    model = make_model("cnn", jax.random.PRNGKey(3), dtype=jnp.float64)
    x = _images(4, 2, jnp.float64)
    p = model.params["conv1"]
    h = jax.lax.conv_general_dilated(
        x, p["kernel"], (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")
    ) + p["bias"]
    h = jax.lax.reduce_window(jnp.maximum(h, 0.0), -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    assert h.shape == (2, 14, 14, 50)
    feats = cnn_features(model.params, x)
    assert feats["layer1"].dtype == jnp.float64
    np.testing.assert_allclose(feats["layer1"], h.reshape(2, -1), rtol=1e-12, atol=1e-12)


def test_apply_fn_under_jit_vmap_jvp(x64):
    model = make_model("cnn", jax.random.PRNGKey(5), dtype=jnp.float64)
    x = _images(6, 2, jnp.float64)
    out = model.apply_fn(model.params, x)
    np.testing.assert_allclose(jax.jit(model.apply_fn)(model.params, x), out, rtol=1e-12, atol=1e-12)
    xs = jnp.stack([x, 2.0 * x])  # vmap over a leading axis of batches
    vout = jax.vmap(model.apply_fn, in_axes=(None, 0))(model.params, xs)
    np.testing.assert_allclose(vout[0], out, rtol=1e-12, atol=1e-12)
    # jvp in the parameters against a central finite difference.
    v = jax.tree.map(lambda a: jax.random.normal(jax.random.PRNGKey(7), a.shape, a.dtype), model.params)
    primal, tangent = jax.jvp(lambda p: model.apply_fn(p, x), (model.params,), (v,))
    np.testing.assert_allclose(primal, out, rtol=1e-12, atol=1e-12)
    eps = 1e-8  # small enough that no ReLU / max-pool switch is crossed for these seeds
    plus = model.apply_fn(jax.tree.map(lambda a, b: a + eps * b, model.params, v), x)
    minus = model.apply_fn(jax.tree.map(lambda a, b: a - eps * b, model.params, v), x)
    np.testing.assert_allclose(tangent, (plus - minus) / (2 * eps), rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# MLP
# ----------------------------------------------------------------------------------------------


def test_mlp_maps_n1_to_n1():
    model = make_model("mlp", jax.random.PRNGKey(0))
    assert model.refresh is None
    x = jnp.linspace(-2.0, 2.0, 7)[:, None]
    out = model.apply_fn(model.params, x)
    assert out.shape == (7, 1)
    assert count_params(model.params) == (1 * 50 + 50) + 4 * (50 * 50 + 50) + (50 * 1 + 1)
    assert [k for k in model.params] == ["dense0", "dense1", "dense2", "dense3", "dense4", "out"]
    # ReLU network: not constant (the hidden layers are used).
    assert float(jnp.std(out)) > 0.0


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
    key = jax.random.PRNGKey(0)
    return {
        "plain": make_model("resnet18", key),
        "batch": make_model("resnet18_bn", key),
        "frozen": make_model("resnet18_bn", key, bn_mode="frozen"),
    }


def test_resnet18_param_counts(resnets):
    assert _resnet18_expected_count(True) == 11173962  # the well-known CIFAR ResNet-18 count
    assert count_params(resnets["plain"].params) == _resnet18_expected_count(False) == 11169162
    assert count_params(resnets["batch"].params) == _resnet18_expected_count(True)
    assert count_params(resnets["frozen"].params["params"]) == _resnet18_expected_count(True)
    # batch_stats: a mean and a variance per BN channel.
    assert count_params(resnets["frozen"].params["batch_stats"]) == 2 * 4800
    assert resnets["plain"].params["conv1"]["kernel"].shape == (3, 3, 3, 64)
    assert "bias" in resnets["plain"].params["conv1"] and "bn1" not in resnets["plain"].params
    assert "bias" not in resnets["batch"].params["conv1"] and "bn1" in resnets["batch"].params


def test_resnet18_output_shapes(resnets):
    x = _images(1, 2)
    for kind in ("plain", "batch", "frozen"):
        m = resnets[kind]
        assert m.apply_fn(m.params, x).shape == (2, 10), kind
    assert resnets["frozen"].refresh is not None
    assert resnets["plain"].refresh is None and resnets["batch"].refresh is None


def test_batch_mode_depends_on_batch_frozen_does_not(resnets):
    x = _images(2, 3)
    x_changed = x.at[2].set(_images(3, 1)[0])  # change only example 2
    for kind, depends in (("batch", True), ("frozen", False), ("plain", False)):
        m = resnets[kind]
        params = m.params if kind != "frozen" else m.refresh(m.params, _images(4, 4))
        f = jax.jit(m.apply_fn)
        a, b = f(params, x), f(params, x_changed)
        changed = not np.allclose(a[0], b[0], rtol=1e-6, atol=1e-6)
        assert changed == depends, kind
        assert not np.allclose(a[2], b[2], rtol=1e-6, atol=1e-6), kind  # the changed example did


def test_frozen_refresh_gives_exact_batch_statistics(x64):
    # 8x8 images keep this float64 test cheap; the architecture does not depend on the image size.
    frozen = make_model(
        "resnet18_bn", jax.random.PRNGKey(1), bn_mode="frozen", input_shape=(8, 8, 3), dtype=jnp.float64
    )
    x = jax.random.normal(jax.random.PRNGKey(5), (3, 8, 8, 3), jnp.float64)
    refreshed = jax.jit(frozen.refresh)(frozen.params, x)
    assert jax.tree.structure(refreshed) == jax.tree.structure(frozen.params)
    # First BN layer: statistics of the stem convolution's output over (N, H, W).
    h = jax.lax.conv_general_dilated(
        x,
        frozen.params["params"]["conv1"]["kernel"],
        (1, 1),
        ((1, 1), (1, 1)),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )
    mean = h.mean(axis=(0, 1, 2))
    var = ((h - mean) ** 2).mean(axis=(0, 1, 2))
    stats = refreshed["batch_stats"]["bn1"]
    assert stats["mean"].dtype == jnp.float64
    np.testing.assert_allclose(stats["mean"], mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(stats["var"], var, rtol=1e-10, atol=1e-12)
    # Every BN layer was re-estimated (initial stats are mean 0, var 1).
    for leaf in jax.tree.leaves(refreshed["batch_stats"]):
        assert not (np.all(leaf == 0.0) or np.all(leaf == 1.0))
    # Parameters are untouched by refresh.
    for a, b in zip(jax.tree.leaves(refreshed["params"]), jax.tree.leaves(frozen.params["params"])):
        np.testing.assert_array_equal(a, b)


def test_frozen_after_refresh_equals_batch_mode_on_that_batch(resnets):
    frozen, batch = resnets["frozen"], resnets["batch"]
    x = _images(8, 3)
    refreshed = frozen.refresh(frozen.params, x)
    out_frozen = frozen.apply_fn(refreshed, x)
    out_batch = batch.apply_fn(refreshed["params"], x)
    np.testing.assert_allclose(out_frozen, out_batch, rtol=1e-4, atol=1e-4)
    # ... and differs from the frozen network at the initial (mean 0, var 1) statistics.
    assert not np.allclose(frozen.apply_fn(frozen.params, x), out_batch, rtol=1e-2, atol=1e-2)


def test_frozen_batch_stats_get_zero_gradient_and_tangent(resnets):
    m = resnets["frozen"]
    x = _images(6, 2)
    params = m.refresh(m.params, x)
    grads = jax.jit(jax.grad(lambda p: jnp.sum(m.apply_fn(p, x) ** 2)))(params)
    for leaf in jax.tree.leaves(grads["batch_stats"]):
        np.testing.assert_array_equal(leaf, 0.0)
    assert any(float(jnp.max(jnp.abs(g))) > 0.0 for g in jax.tree.leaves(grads["params"]))
    # A tangent on batch_stats alone has no effect on the output's tangent.
    v = {
        "params": jax.tree.map(jnp.zeros_like, params["params"]),
        "batch_stats": jax.tree.map(jnp.ones_like, params["batch_stats"]),
    }
    _, tangent = jax.jit(lambda p, v: jax.jvp(lambda q: m.apply_fn(q, x), (p,), (v,)))(params, v)
    np.testing.assert_array_equal(tangent, 0.0)


def test_batch_mode_is_pure_function_of_params_and_x(resnets):
    m = resnets["batch"]
    x = _images(7, 2)
    out1 = m.apply_fn(m.params, x)
    out2 = jax.jit(m.apply_fn)(m.params, x)
    np.testing.assert_allclose(out1, out2, rtol=1e-5, atol=1e-5)
    # Linearisable as is: the jvp in the parameters runs and has the output's shape.
    v = jax.tree.map(jnp.ones_like, m.params)
    _, tangent = jax.jit(lambda p, v: jax.jvp(lambda q: m.apply_fn(q, x), (p,), (v,)))(m.params, v)
    assert tangent.shape == (2, 10) and bool(jnp.all(jnp.isfinite(tangent)))


# ----------------------------------------------------------------------------------------------
# dtype, count_params, validation
# ----------------------------------------------------------------------------------------------


def test_float64_models(x64):
    for name in ("cnn", "mlp"):
        m = make_model(name, jax.random.PRNGKey(0), dtype=jnp.float64)
        assert all(leaf.dtype == jnp.float64 for leaf in jax.tree.leaves(m.params)), name
        x = jnp.ones((2, 1), jnp.float64) if name == "mlp" else _images(0, 2, jnp.float64)
        assert m.apply_fn(m.params, x).dtype == jnp.float64, name


def test_typed_key_and_num_classes_and_input_shape():
    m = make_model("cnn", jax.random.key(0), num_classes=3, input_shape=(28, 28, 1))
    assert m.apply_fn(m.params, jnp.zeros((2, 28, 28, 1))).shape == (2, 3)
    assert m.params["fc1"]["kernel"].shape == (4 * 4 * 50, 120)
    m = make_model("mlp", jax.random.key(0), input_shape=(2,), num_classes=2)
    assert m.apply_fn(m.params, jnp.zeros((5, 2))).shape == (5, 2)


def test_count_params():
    assert count_params({"a": jnp.zeros((2, 3)), "b": [jnp.zeros(4), jnp.zeros(())]}) == 11
    assert count_params({}) == 0


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(name="lenet"), ["name", "'lenet'", "resnet18_bn"]),
        (dict(name="resnet18_bn", bn_mode="running"), ["bn_mode", "'running'", "frozen"]),
        (dict(name="cnn", bn_mode="batch"), ["bn_mode", "'batch'", "resnet18_bn"]),
        (dict(name="resnet18", bn_mode="frozen"), ["bn_mode", "'frozen'"]),
        (dict(name="cnn", input_shape=(32, 32)), ["input_shape", "(32, 32)"]),
        (dict(name="mlp", input_shape=(1, 1)), ["input_shape", "(1, 1)"]),
        (dict(name="cnn", num_classes=0), ["num_classes", "0"]),
        (dict(name="mlp", dtype=jnp.int32), ["dtype"]),
    ],
)
def test_invalid_arguments_raise_valueerror_naming_parameter(kwargs, words):
    name = kwargs.pop("name")
    with pytest.raises(ValueError) as err:
        make_model(name, jax.random.PRNGKey(0), **kwargs)
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_frozen_apply_rejects_bare_params_collection(resnets):
    m = resnets["frozen"]
    with pytest.raises(TypeError, match="batch_stats"):
        m.apply_fn(m.params["params"], _images(0, 2))
    with pytest.raises(TypeError, match="batch_stats"):
        m.refresh(m.params["params"], _images(0, 2))


def test_modules_importable_directly():
    # The modules themselves are usable without the factory.
    x = jnp.zeros((1, 32, 32, 3))
    v = ResNet18(norm=False).init(jax.random.PRNGKey(0), x)
    assert set(v) == {"params"}
    v = MLP().init(jax.random.PRNGKey(0), jnp.zeros((1, 1)))
    assert v["params"]["out"]["kernel"].shape == (50, 1)
    assert isinstance(CNN(), nn.Module)
