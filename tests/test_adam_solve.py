"""Tests for iterlin.solvers.adam_solve: each linearisation solved by Adam until a convergence test passes."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from iterlin.solvers.adam_solve import train_adam_solved
from iterlin.relin import RELIN_REASONS, SolveState
from iterlin.checkpoint import CheckpointError
from iterlin.linearise import linearised_apply
from iterlin.losses import get_loss
from iterlin.models import make_model
from iterlin.relin import history, until_solved
from iterlin.training import fit, init_state, make_step
from iterlin.tree import tree_allclose

LR = 1e-2


@pytest.fixture(scope="module")
def mlp():
    return make_model("mlp", jax.random.PRNGKey(0), input_shape=(2,), num_classes=2)


@pytest.fixture(scope="module")
def easy():
    """Linearly separable 2-d points (a margin around the line x0 + 0.5 x1 = 0)."""
    x = np.array(jax.random.normal(jax.random.PRNGKey(1), (64, 2)), np.float32)
    s = x[:, 0] + 0.5 * x[:, 1]
    x[:, 0] += 0.3 * np.sign(s)
    return jnp.asarray(x), jnp.asarray(s > 0, jnp.int32)


@pytest.fixture(scope="module")
def hard():
    """Every input appears twice with both labels: 100 % training accuracy is impossible."""
    x = jax.random.normal(jax.random.PRNGKey(2), (16, 2))
    y = jax.random.bernoulli(jax.random.PRNGKey(3), 0.5, (16,)).astype(jnp.int32)
    return jnp.concatenate([x, x]), jnp.concatenate([y, 1 - y])


_JITTED = {}


def _lin_metrics(apply_fn, params_s, params, x, y, loss="ce"):
    """Training metrics of f_lin_s(θ) computed directly (independently of the module under test)."""
    if (apply_fn, loss) not in _JITTED:
        metrics = get_loss(loss).metrics
        _JITTED[apply_fn, loss] = jax.jit(lambda ps, p, x, y: metrics(linearised_apply(apply_fn, ps, p, x), y))
    m = _JITTED[apply_fn, loss](params_s, params, x, y)
    return {k: float(v) / x.shape[0] for k, v in m.items()}


# --------------------------------------------------------------------------------------------
# Criterion never passes: two routes to one result
# --------------------------------------------------------------------------------------------

K_HARD, STEPS_HARD = 7, 30


@pytest.fixture(scope="module")
def reference(mlp, hard):
    """fit(make_step(adam, reset_optimizer=True)) with period K: the plain route."""
    adam = optax.adam(LR)
    state = init_state(mlp.params, adam, K_HARD)
    step = make_step(mlp.apply_fn, adam, "ce", reset_optimizer=True)
    return fit(step, state, mlp.apply_fn, hard, steps=STEPS_HARD, batch_size=8, eval_every=5)


def test_equals_periodic_K_with_adam_reset_when_criterion_never_passes(mlp, hard, reference):
    ref_state, ref_hist = reference
    params, hist = train_adam_solved(
        mlp.apply_fn, mlp.params, hard, lr=LR, steps=STEPS_HARD, K=K_HARD, target_acc=1.0,
        check_every=3, plateau_tol=0.0, batch_size=8, eval_every=5,
    )
    assert tree_allclose(params, ref_state.params, rtol=1e-6, atol=1e-7)
    assert list(hist["relin_step"]) == [7, 14, 21, 28]
    assert list(hist["relin_reason"]) == ["K"] * 4
    assert list(hist["relin_inner_steps"]) == [K_HARD] * 4
    assert np.all(hist["relin_acc"] < 1.0)  # checked (at K) and indeed below the target
    for k, v in ref_hist.items():
        np.testing.assert_allclose(hist[k], v, rtol=1e-5, atol=1e-6, err_msg=k)
    np.testing.assert_array_equal(hist["inner_steps"], np.asarray(hist["step"]) % K_HARD)


def test_state_matches_reference_including_adam_state(mlp, hard, reference):
    """The lower-level API train_adam_solved is made of, with the accuracy test disabled
    (target_acc=None): make_step with the policy until_solved and reset_optimizer, through fit."""
    ref_state, _ = reference
    adam = optax.adam(LR)
    policy = until_solved(target_acc=None, check_every=3, plateau_tol=0.0, max_period=K_HARD)
    state = init_state(mlp.params, adam, policy, steps=STEPS_HARD)
    # the criterion rides in TrainState.policy; opt_state is the inner optimizer's own state
    assert isinstance(state.policy, SolveState) and state.policy.relin_step.shape[0] >= STEPS_HARD // K_HARD
    assert jax.tree.structure(state.opt_state) == jax.tree.structure(adam.init(mlp.params))
    step = make_step(mlp.apply_fn, adam, "ce", reset_optimizer=True, policy=policy)
    state, _ = fit(step, state, mlp.apply_fn, hard, steps=STEPS_HARD, batch_size=8, eval_every=5)
    assert tree_allclose(state.params_s, ref_state.params_s, rtol=1e-6, atol=1e-7)
    assert tree_allclose(state.opt_state, ref_state.opt_state, rtol=1e-6, atol=1e-7)
    assert int(state.n_relin) == int(ref_state.n_relin) == STEPS_HARD // K_HARD
    assert int(state.K) == K_HARD and int(state.step) == STEPS_HARD


# --------------------------------------------------------------------------------------------
# Easy data: each linearisation solved to the target, earlier than K; fresh Adam state
# --------------------------------------------------------------------------------------------

K_EASY, STEPS_EASY, CHECK_EASY = 1000, 80, 4


@pytest.fixture(scope="module")
def easy_run(mlp, easy):
    """One run evaluated after every step; the callback snapshots θ_t and the inner Adam state."""
    snaps = {}

    def callback(t, state):
        adam_state = state.opt_state[0]  # optax.adam = chain(scale_by_adam, scale): ScaleByAdamState
        snaps[t] = {
            "params": state.params,
            "params_s": state.params_s,
            "count": int(adam_state.count),
            "mu_norm": float(sum(jnp.sum(jnp.abs(v)) for v in jax.tree.leaves(adam_state.mu))),
            "nu_norm": float(sum(jnp.sum(jnp.abs(v)) for v in jax.tree.leaves(adam_state.nu))),
        }
        return {"adam_count": snaps[t]["count"]}

    params, hist = train_adam_solved(
        mlp.apply_fn, mlp.params, easy, lr=3e-3, steps=STEPS_EASY, K=K_EASY, target_acc=1.0,
        check_every=CHECK_EASY, plateau_tol=0.0, eval_every=1, callback=callback,
    )
    return params, hist, snaps


def test_each_linearisation_solved_to_target_before_relinearising(mlp, easy, easy_run):
    _, hist, snaps = easy_run
    x, y = easy
    steps = list(hist["relin_step"])
    assert len(steps) >= 3 and hist["n_relin"][-1] == len(steps)
    assert len(steps) > STEPS_EASY // K_EASY  # re-linearised earlier than K
    assert np.all(hist["relin_inner_steps"] < K_EASY)
    assert list(hist["relin_reason"]) == ["target"] * len(steps)
    assert np.all(hist["relin_acc"] >= 1.0)
    np.testing.assert_array_equal(np.cumsum(hist["relin_inner_steps"]), steps)
    # Independent check from the snapshots: linearisation i is the model linearised at the previous
    # re-linearisation point; at its last step its training accuracy is 100 %, at every earlier
    # check it was not (so it re-linearised at the first check that passed).
    start = 0
    for t in steps:
        assert tree_allclose(snaps[t]["params_s"], snaps[t]["params"], rtol=0, atol=0)  # θ_s ← θ_t
        theta_s = snaps[start]["params_s"]
        m = _lin_metrics(mlp.apply_fn, theta_s, snaps[t]["params"], x, y)
        assert m["acc"] == 1.0
        np.testing.assert_allclose(hist["relin_loss"][steps.index(t)], m["loss"], rtol=1e-4, atol=1e-6)
        for c in range(start + CHECK_EASY, t, CHECK_EASY):
            assert _lin_metrics(mlp.apply_fn, theta_s, snaps[c]["params"], x, y)["acc"] < 1.0
        start = t
    # the linear models, then the network, reach 100 % training accuracy
    assert hist["net_train_acc"][-1] == 1.0


def test_adam_state_is_fresh_after_each_relinearisation(easy_run):
    _, hist, snaps = easy_run
    relins = set(hist["relin_step"].tolist())
    assert relins
    for t in hist["step"]:
        t = int(t)
        # Adam's step count is the number of steps into the current linearisation
        assert snaps[t]["count"] == hist["inner_steps"][t]
        if t in relins:
            assert snaps[t]["count"] == 0 and snaps[t]["mu_norm"] == 0.0 and snaps[t]["nu_norm"] == 0.0
        elif t > 0:
            assert snaps[t]["count"] > 0 and snaps[t]["mu_norm"] > 0.0
    np.testing.assert_array_equal(hist["adam_count"], hist["inner_steps"])  # user callback merged


# --------------------------------------------------------------------------------------------
# MSE, mini-batches, plateau
# --------------------------------------------------------------------------------------------


def test_mse_minibatch_plateau(mlp):
    model = make_model("mlp", jax.random.PRNGKey(4), input_shape=(1,), num_classes=1)
    x = jnp.linspace(-2, 2, 32)[:, None]
    y = jnp.sin(2 * x)
    snaps = {}

    def callback(t, state):
        snaps[t] = (state.params, state.params_s)
        return {}

    tol, check = 0.05, 5
    _, hist = train_adam_solved(
        model.apply_fn, model.params, (x, y), lr=1e-2, steps=80, K=30, loss="mse", check_every=check,
        plateau_tol=tol, batch_size=8, eval_every=1, callback=callback,
    )
    reasons = list(hist["relin_reason"])
    assert "plateau" in reasons and set(reasons) <= {"plateau", "K"}
    assert np.all(np.isnan(hist["relin_acc"]))  # no accuracy for real targets
    assert "lin_train_rmse" in hist
    start = 0
    for t, k, r in zip(hist["relin_step"], hist["relin_inner_steps"], reasons):
        t, k = int(t), int(k)
        theta_s = snaps[start][1]
        now = _lin_metrics(model.apply_fn, theta_s, snaps[t][0], x, y, "mse")["loss"]
        prev = _lin_metrics(model.apply_fn, theta_s, snaps[t - check][0], x, y, "mse")["loss"] if k > check else None
        if r == "plateau":
            assert prev is not None and prev - now < tol * prev + 1e-6
        else:
            assert k == 30
        for c in range(start + 2 * check, t, check):  # earlier checks: still improving
            a = _lin_metrics(model.apply_fn, theta_s, snaps[c - check][0], x, y, "mse")["loss"]
            b = _lin_metrics(model.apply_fn, theta_s, snaps[c][0], x, y, "mse")["loss"]
            assert a - b >= tol * a - 1e-6
        start = t


# --------------------------------------------------------------------------------------------
# Checkpoint / resume and validation
# --------------------------------------------------------------------------------------------


def test_checkpoint_resume_and_config_mismatch(mlp, easy, tmp_path):
    path = tmp_path / "run.npz"
    kw = dict(lr=3e-3, steps=20, K=50, check_every=4, eval_every=10, checkpoint=path)
    p1, h1 = train_adam_solved(mlp.apply_fn, mlp.params, easy, **kw)
    p2, h2 = train_adam_solved(mlp.apply_fn, mlp.params, easy, **kw)  # finished run: resumed as is
    assert tree_allclose(p1, p2, rtol=0, atol=0)
    assert set(h1) == set(h2)
    for k in h1:
        np.testing.assert_array_equal(h1[k], h2[k], err_msg=k)
    with pytest.raises(CheckpointError):
        train_adam_solved(mlp.apply_fn, mlp.params, easy, **{**kw, "check_every": 5})


@pytest.mark.parametrize(
    "bad, name",
    [
        ({"lr": 0.0}, "lr"),
        ({"lr": -1e-3}, "lr"),
        ({"lr": math.nan}, "lr"),
        ({"steps": 0}, "steps"),
        ({"steps": 2.5}, "steps"),
        ({"K": 0}, "K"),
        ({"K": 2.5}, "K"),
        ({"target_acc": 0.0}, "target_acc"),
        ({"target_acc": 1.5}, "target_acc"),
        ({"target_acc": "all"}, "target_acc"),
        ({"check_every": 0}, "check_every"),
        ({"plateau_tol": -1e-3}, "plateau_tol"),
        ({"plateau_tol": math.inf}, "plateau_tol"),
        ({"loss": "hinge"}, "loss"),
        ({"eval_batch_size": 0}, "eval_batch_size"),
        ({"sweep": True}, "sweep"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(mlp, easy, bad, name):
    kw = {"lr": LR, "steps": 10, **bad}
    with pytest.raises(ValueError, match=name):
        train_adam_solved(mlp.apply_fn, mlp.params, easy, **kw)


def test_bad_data_raises(mlp, easy):
    x, y = easy
    with pytest.raises(ValueError, match="x"):
        train_adam_solved(mlp.apply_fn, mlp.params, (x, y[:-1]), lr=LR, steps=10)
    with pytest.raises(ValueError, match="data"):
        train_adam_solved(mlp.apply_fn, mlp.params, x, lr=LR, steps=10)


def test_an_empty_relin_log_and_the_reasons(mlp):
    state = init_state(mlp.params, optax.adam(LR), until_solved(max_period=math.inf), steps=10)
    assert int(state.K) == 0  # K = ∞
    log = history(state)
    assert set(log.as_dict()) == {"relin_step", "relin_inner_steps", "relin_acc", "relin_loss", "relin_reason"}
    assert log.gap is None and all(len(v) == 0 for v in log.as_dict().values())
    assert RELIN_REASONS[1:] == ("target", "plateau", "K")


@pytest.mark.parametrize("batch_size", [5, 16, 1000])  # padded chunks, exact tiling, one chunk
def test_the_criterion_checks_the_linear_model_on_the_whole_training_set(mlp, easy, batch_size):
    """What a re-linearisation logs is f_lin at θ_s = θ_0, evaluated at θ_K, on all of (x, y) in
    chunks of ``eval_batch_size``, computed directly here; no accuracy for real targets (MSE)."""
    x, y = easy
    K = 3
    for loss, targets in (("ce", y), ("mse", jax.nn.one_hot(y, 2))):
        params_at = {}

        def callback(t, state):
            params_at[t] = state.params

        _, hist = train_adam_solved(mlp.apply_fn, mlp.params, (x, targets), lr=0.05, steps=K, K=K, target_acc=None,
                                    check_every=K, plateau_tol=0.0, loss=loss, eval_every=K,
                                    eval_batch_size=batch_size, callback=callback)
        assert list(hist["relin_step"]) == [K] and list(hist["relin_reason"]) == ["K"]
        m = _lin_metrics(mlp.apply_fn, mlp.params, params_at[K], x, targets, loss)
        assert not tree_allclose(params_at[K], mlp.params)  # θ_K moved: the check is not at θ_s
        np.testing.assert_allclose(float(hist["relin_loss"][0]), m["loss"], rtol=1e-5)
        if loss == "ce":
            assert float(hist["relin_acc"][0]) == pytest.approx(m["acc"], abs=1e-7)
        else:
            assert np.isnan(float(hist["relin_acc"][0]))
