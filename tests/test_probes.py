"""Linear probes (Fig. 6), filter snapshots (Fig. 7) and their training callbacks."""

from types import SimpleNamespace

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import iterlin
from iterlin.analysis.probes import (
    DEFAULT_LAMBDAS,
    _ridge_scores,
    filter_tracker,
    filters_to_image,
    first_layer_filters,
    fit_linear_probe,
    heldout_tracker,
    probe_tracker,
)
from iterlin.tree import tree_stack


def _blobs(rng, n, d, centres, noise=1.0):
    y = np.arange(n) % len(centres)
    return (centres[y] + noise * rng.normal(size=(n, d))).astype(np.float32), y


@pytest.mark.parametrize("d", [12, 150])  # primal (D ≤ n) and dual (D > n)
def test_probe_separates_separable_features(d):
    rng = np.random.default_rng(0)
    centres = 8.0 * rng.normal(size=(3, d))
    x_tr, y_tr = _blobs(rng, 90, d, centres)
    x_te, y_te = _blobs(rng, 60, d, centres)
    res = fit_linear_probe(x_tr, y_tr, x_te, y_te, num_classes=3)
    assert res.train_acc == 1.0 and res.test_acc == 1.0 and res.val_acc == 1.0
    assert res.lam in DEFAULT_LAMBDAS
    assert res.test_correct.shape == (60,) and res.test_correct.dtype == bool and res.test_correct.all()
    # deterministic: the same λ, accuracies and per-image results again
    again = fit_linear_probe(x_tr, y_tr, x_te, y_te, num_classes=3)
    assert again[:4] == res[:4]
    np.testing.assert_array_equal(again.test_correct, res.test_correct)


def test_probe_on_random_labels_is_near_chance_on_test():
    rng = np.random.default_rng(1)
    x_tr, x_te = rng.normal(size=(300, 20)), rng.normal(size=(400, 20))
    y_tr, y_te = rng.integers(0, 4, 300), rng.integers(0, 4, 400)
    res = fit_linear_probe(x_tr, y_tr, x_te, y_te, num_classes=4, seed=3)
    assert abs(res.test_acc - 0.25) < 0.1
    assert res.test_correct.mean() == pytest.approx(res.test_acc)  # two routes to the test accuracy
    assert res.train_acc > res.test_acc  # it fits noise on the training set, which does not transfer
    assert fit_linear_probe(x_tr, y_tr, x_te, y_te, num_classes=4, seed=3)[:4] == res[:4]
    # the chosen λ is always one of the grid's
    grid = (0.03, 0.3, 3.0)
    assert fit_linear_probe(x_tr, y_tr, x_te, y_te, num_classes=4, lambdas=grid).lam in grid
    assert fit_linear_probe(x_tr, y_tr, x_te, y_te, num_classes=4, lambdas=(0.5,)).lam == 0.5


@pytest.mark.parametrize("n, d", [(40, 6), (12, 30)])  # primal and dual
def test_ridge_scores_match_the_closed_form(x64, n, d):
    rng = np.random.default_rng(2)
    z, z_eval = rng.normal(size=(n, d)), rng.normal(size=(5, d))
    y1h = np.eye(3)[rng.integers(0, 3, n)]
    lams = np.array([1e-3, 0.1, 10.0])
    got = np.asarray(_ridge_scores(jnp.asarray(z), jnp.asarray(y1h), jnp.asarray(z_eval), jnp.asarray(lams)))
    zc, yc = z - z.mean(0), y1h - y1h.mean(0)
    for lam, g in zip(lams, got):
        w = np.linalg.solve(zc.T @ zc + n * lam * np.eye(d), zc.T @ yc)  # argmin (1/n)‖Z_cW − Y_c‖² + λ‖W‖²
        np.testing.assert_allclose(g, (z_eval - z.mean(0)) @ w + y1h.mean(0), rtol=1e-8, atol=1e-10)


def test_probe_rejects_bad_arguments():
    x, y = np.zeros((10, 3)), np.zeros(10, int)
    with pytest.raises(ValueError, match="num_classes"):
        fit_linear_probe(x, y, x, y, num_classes=1)
    with pytest.raises(ValueError, match="y_train"):
        fit_linear_probe(x, y + 5, x, y, num_classes=3)
    with pytest.raises(ValueError, match="features_test"):
        fit_linear_probe(x, y, np.zeros((10, 4)), y, num_classes=3)
    with pytest.raises(ValueError, match="lambdas"):
        fit_linear_probe(x, y, x, y, num_classes=3, lambdas=(0.1, -1.0))
    with pytest.raises(ValueError, match="val_fraction"):
        fit_linear_probe(x, y, x, y, num_classes=3, val_fraction=1.0)
    with pytest.raises(ValueError, match="y_train"):
        fit_linear_probe(x, np.zeros(9, int), x, y, num_classes=3)


def test_filters_to_image():
    np.testing.assert_allclose(filters_to_image(np.array([-0.5, 0.0, 0.5])), [0.0, 0.5, 1.0])
    np.testing.assert_allclose(filters_to_image(np.array([-3.0, 0.25, 2.0])), [0.0, 0.75, 1.0])  # clipped
    np.testing.assert_allclose(filters_to_image(np.array([-1.0, 1.0]), vrange=1.0), [0.0, 1.0])
    assert filters_to_image(np.zeros((5, 5, 3))).shape == (5, 5, 3)
    with pytest.raises(ValueError, match="vrange"):
        filters_to_image(np.zeros(3), vrange=0)


# ----------------------------------------------------------------------------------------------
# Trackers
# ----------------------------------------------------------------------------------------------


class TinyCNN(nn.Module):
    """A small stand-in for the paper's CNN with the same parameter and feature names."""

    @nn.compact
    def __call__(self, x, return_features=False):
        h = nn.max_pool(nn.relu(nn.Conv(4, (5, 5), padding="VALID", name="conv1")(x)), (2, 2), strides=(2, 2))
        layer1 = h.reshape(h.shape[0], -1)
        h = nn.relu(nn.Conv(6, (3, 3), padding="VALID", name="conv2")(h))
        layer2 = h.reshape(h.shape[0], -1)
        logits = nn.Dense(3, name="fc3")(layer2)
        return {"layer1": layer1, "layer2": layer2, "logits": logits} if return_features else logits


@pytest.fixture(scope="module")
def cnn_problem():
    model = TinyCNN()
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(48, 12, 12, 3)), jnp.float32)
    y = jnp.asarray(np.arange(48) % 3)
    params = jax.jit(model.init)(jax.random.PRNGKey(0), x[:1])["params"]
    apply_fn = lambda p, x: model.apply({"params": p}, x)  # noqa: E731
    features_fn = lambda p, x: model.apply({"params": p}, x, return_features=True)  # noqa: E731
    return apply_fn, features_fn, params, x, y


def test_trackers_inside_train(cnn_problem):
    apply_fn, features_fn, params, x, y = cnn_problem
    probes = probe_tracker(features_fn, (x[:32], y[:32]), (x[32:], y[32:]), num_classes=3, batch_size=20)
    filters = filter_tracker(first_layer_filters, n=3)
    final, hist = iterlin.train(apply_fn, params, (x, y), K=2, steps=6, optimizer=optax.sgd(0.05),
                                eval_every=3, callback=lambda t, s: {**probes(t, s), **filters(t, s)})
    np.testing.assert_array_equal(hist["step"], [0, 3, 6])
    for layer in ("layer1", "layer2"):
        for k in ("train_acc", "test_acc"):
            v = hist[f"probe_{layer}_{k}"]
            assert v.shape == (3,) and np.all((0 <= v) & (v <= 1))
        assert set(hist[f"probe_{layer}_lam"]) <= set(DEFAULT_LAMBDAS)
    for layer in ("layer1", "layer2"):  # per test image, at every point; its mean is the test accuracy
        c = hist[f"probe_{layer}_test_correct"]
        assert c.shape == (3, len(y) - 32) and c.dtype == bool
        np.testing.assert_allclose(c.mean(axis=1), hist[f"probe_{layer}_test_acc"], rtol=1e-6)
    # the probe at step 0 is the probe of the initial network's features
    f0 = features_fn(params, x)
    ref = fit_linear_probe(f0["layer2"][:32], y[:32], f0["layer2"][32:], y[32:], num_classes=3)
    assert hist["probe_layer2_test_acc"][0] == pytest.approx(ref.test_acc)
    delta = hist["filters_delta"]
    assert delta.shape == (3, 5, 5, 3, 3)
    np.testing.assert_array_equal(delta[0], 0.0)
    w0, w6 = params["conv1"]["kernel"][..., :3], final["conv1"]["kernel"][..., :3]
    np.testing.assert_allclose(delta[-1], w6 - w0, rtol=1e-6, atol=1e-7)
    assert np.abs(delta[-1]).max() > 0


def test_trackers_on_a_sweep_state_match_single_runs(cnn_problem):
    apply_fn, features_fn, params, x, y = cnn_problem
    other = jax.tree.map(lambda a: a * 0.5, params)
    stacked = tree_stack([params, other])
    sweep_state = SimpleNamespace(step=np.zeros(2, np.int32), params=stacked)
    make_probes = lambda: probe_tracker(features_fn, (x[:32], y[:32]), (x[32:], y[32:]), num_classes=3,  # noqa: E731
                                        layers=("layer2",))
    got = make_probes()(0, sweep_state)
    assert got["probe_layer2_test_acc"].shape == (2,)
    for r, p in enumerate([params, other]):
        single = make_probes()(0, SimpleNamespace(step=np.int32(0), params=p))
        assert single["probe_layer2_test_acc"] == got["probe_layer2_test_acc"][r]
        np.testing.assert_array_equal(single["probe_layer2_test_correct"], got["probe_layer2_test_correct"][r])
    assert got["probe_layer2_test_correct"].shape == (2, len(y) - 32)
    filt = filter_tracker(n=2, params0=stacked)
    moved = tree_stack([jax.tree.map(lambda a: a + 0.1, params), other])
    d = filt(4, SimpleNamespace(step=np.full(2, 4, np.int32), params=moved))["filters_delta"]
    assert d.shape == (2, 5, 5, 3, 2)
    np.testing.assert_allclose(d[0], 0.1, rtol=1e-5)
    np.testing.assert_array_equal(d[1], 0.0)


def test_tracker_arguments_are_checked(cnn_problem):
    _, features_fn, params, x, y = cnn_problem
    cb = probe_tracker(features_fn, (x[:8], y[:8]), (x[8:16], y[8:16]), num_classes=3, layers=("layer7",))
    with pytest.raises(ValueError, match="layer7"):
        cb(0, SimpleNamespace(step=np.int32(0), params=params))
    with pytest.raises(ValueError, match="train_xy"):
        probe_tracker(features_fn, (x[:8], y[:7]), (x, y))
    with pytest.raises(TypeError, match="get_filters"):
        filter_tracker("conv1")
    with pytest.raises(ValueError, match="n=9"):
        filter_tracker(n=9)(0, SimpleNamespace(step=np.int32(0), params=params))


def test_heldout_tracker_equals_the_loop_s_own_evaluation():
    """Two routes to one number: the tracker scoring (x_val, y_val) at every evaluation point equals
    fit's own evaluation of the network and of the current linear model given the same images as
    its test split, run by run of a sweep over K (K = 1, 3, ∞: the linear model at θ_s, θ_0 for ∞),
    with a chunk size that does not divide N (the padding is masked)."""
    from _toy import tiny_problem

    apply_fn, params, x, y = tiny_problem(n=40)
    x_tr, y_tr, x_val, y_val = x[:24], y[:24], x[24:], y[24:]
    _, h = iterlin.train_sweep(apply_fn, tree_stack([params] * 3), (x_tr, y_tr), K=[1, 3, float("inf")], steps=9,
                               optimizer=optax.sgd(0.5), batch_size=8, eval_data=(x_val, y_val), eval_every=3,
                               callback=heldout_tracker(apply_fn, x_val, y_val, batch_size=5, per_image=True))
    assert np.asarray(h["net_val_acc"]).shape == (3, 4)
    np.testing.assert_allclose(h["net_val_acc"], h["net_test_acc"], atol=1e-6)
    np.testing.assert_allclose(h["lin_val_acc"], h["lin_test_acc"], atol=1e-6)
    for model in ("net", "lin"):  # each image's record, of which the accuracy is the mean
        hits = np.asarray(h[f"{model}_val_per_image"])
        assert hits.shape == (3, 4, 16) and hits.dtype == bool
        np.testing.assert_array_equal(hits.mean(axis=-1), h[f"{model}_val_acc"])
    assert not np.allclose(h["lin_val_acc"][2], h["net_val_acc"][2])  # K = ∞: the linear model is not the network


def test_heldout_tracker_arguments_are_checked():
    from _toy import tiny_problem

    apply_fn, params, x, y = tiny_problem(n=8)
    with pytest.raises(ValueError, match="batch_size=0 is not allowed"):
        heldout_tracker(apply_fn, x, y, batch_size=0)
    with pytest.raises(ValueError):
        heldout_tracker(apply_fn, x, y[:7])
    single = heldout_tracker(apply_fn, x, y)(0, SimpleNamespace(step=np.int32(0), params=params, params_s=params))
    assert set(single) == {"net_val_acc", "lin_val_acc"} and single["net_val_acc"] == single["lin_val_acc"]
    with pytest.raises(ValueError, match="name='test set' is not allowed: name must be an identifier"):
        heldout_tracker(apply_fn, x, y, name="test set")
    named = heldout_tracker(apply_fn, x, y, name="test_set", per_image=True)(
        0, SimpleNamespace(step=np.int32(0), params=params, params_s=params))
    assert set(named) == {"net_test_set_acc", "lin_test_set_acc", "net_test_set_per_image", "lin_test_set_per_image"}
    assert named["net_test_set_per_image"].shape == (8,) and named["net_test_set_per_image"].mean() == named["net_test_set_acc"]
