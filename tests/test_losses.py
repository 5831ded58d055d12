import jax
import jax.numpy as jnp
import numpy as np
import pytest

from iterlin.losses import get_loss, mse_targets


def test_cross_entropy_matches_log_softmax():
    logits = jax.random.normal(jax.random.PRNGKey(0), (6, 4))
    y = jnp.array([0, 1, 2, 3, 1, 0])
    ce = get_loss("ce").per_example(logits, y)
    ref = -np.log(np.exp(logits) / np.exp(logits).sum(-1, keepdims=True))[np.arange(6), y]
    np.testing.assert_allclose(ce, ref, rtol=1e-5)


def test_mse_is_half_squared_error_and_accepts_labels():
    out = jnp.array([[1.0, 2.0], [0.0, 0.0]])
    np.testing.assert_allclose(get_loss("mse").per_example(out, jnp.array([[0.0, 0.0], [1.0, 1.0]])), [2.5, 1.0])
    # integer labels become one-hot targets
    np.testing.assert_allclose(get_loss("mse").per_example(out, jnp.array([1, 0])), [0.5 * (1 + 1), 0.5 * (0 + 1)])


def test_metrics_are_weighted_sums():
    out = jnp.array([[2.0, 0.0], [0.0, 2.0], [5.0, 0.0]])
    m = get_loss("ce").metrics(out, jnp.array([0, 0, 1]), jnp.array([1.0, 1.0, 0.0]))
    assert float(m["acc"]) == 1.0  # the third (masked) example is wrong but weighted 0
    r = get_loss("mse").metrics(jnp.array([[1.0], [3.0]]), jnp.array([[0.0], [0.0]]))
    assert float(r["sq_err"]) == 10.0


def test_unknown_loss_is_named():
    with pytest.raises(ValueError, match="loss='hinge'.*'ce', 'mse'"):
        get_loss("hinge")


def test_mse_targets_are_one_hot_labels_or_reshaped_targets():
    out = jnp.zeros((3, 4), jnp.float32)
    np.testing.assert_array_equal(mse_targets(out, jnp.array([2, 0, 3])), np.eye(4)[[2, 0, 3]])
    assert mse_targets(out, jnp.array([2, 0, 3])).dtype == jnp.float32
    col = jnp.zeros((3, 1))
    np.testing.assert_array_equal(mse_targets(col, jnp.array([1.5, 2.0, -1.0])), [[1.5], [2.0], [-1.0]])
