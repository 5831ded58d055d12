"""Bad input is refused up front with a message naming the parameter, the value and what is allowed.

Each case goes through the public API (:func:`iterlin.training.train`, :func:`train_sweep`, the
Adam-solved and Gauss–Newton loops) as well as the :mod:`iterlin.validate` helpers. "Up front" is
checked with an ``apply_fn`` that counts its calls (a trace counts): it must never be called.
"""

from __future__ import annotations

import math
import re

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from iterlin.solvers.adam_solve import train_adam_solved
from iterlin.solvers.gauss_newton import gauss_newton_train
from iterlin.training import fit, init_state, make_step, train, train_sweep
from iterlin.tree import tree_stack
from iterlin.validate import check_choice, check_int, check_K, check_nonnegative, check_positive, check_xy


class Recorder:
    """``apply_fn(params, x) = x @ w`` that counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, params, x):
        self.calls += 1
        return x @ params["w"]


N = 8
X = jnp.ones((N, 3))
Y = jnp.zeros((N, 1))
PARAMS = {"w": jnp.zeros((3, 1))}
GOOD = dict(K=2, steps=4, optimizer=optax.sgd(0.1), loss="mse")


def _refused(call, exc, *fragments):
    """``call(apply_fn)`` raises ``exc`` before calling apply_fn; the message holds every fragment."""
    recorder = Recorder()
    with pytest.raises(exc) as info:
        call(recorder)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert recorder.calls == 0, f"apply_fn was called {recorder.calls} times before the error"
    return message


def _train(**change):
    kwargs = {**GOOD, **change}
    data = kwargs.pop("data", (X, Y))
    params = kwargs.pop("params", PARAMS)
    return lambda apply_fn: train(apply_fn, params, data, **kwargs)


def _sweep(**change):
    kwargs = {**GOOD, "K": [1, 3], **change}
    data = kwargs.pop("data", (X, Y))
    params = kwargs.pop("params") if "params" in kwargs else tree_stack([PARAMS] * len(kwargs["K"]))
    return lambda apply_fn: train_sweep(apply_fn, params, data, **kwargs)


# ----------------------------------------------------------------------------------------------
# K
# ----------------------------------------------------------------------------------------------

BAD_K = [0, -3, 2.5, "abc", math.nan, True, False, -math.inf, None, "5", [3], 0.5, np.float64(2.5), jnp.asarray(0)]
BAD_K_IDS = ["0", "-3", "2.5", "abc", "nan", "True", "False", "-inf", "None", "str5", "list", "0.5", "np2.5", "jnp0"]


@pytest.mark.parametrize("K", BAD_K, ids=BAD_K_IDS)
def test_check_K_rejects_with_name_value_and_what_is_allowed(K):
    with pytest.raises(ValueError) as info:
        check_K(K)
    message = str(info.value)
    assert message.startswith(f"K={K!r} is not allowed")
    assert "integer >= 1" in message and "math.inf" in message


@pytest.mark.parametrize(
    "K, expected",
    [(1, 1), (5e6, 5_000_000), (5_000_000, 5_000_000), (math.inf, math.inf), (float("inf"), math.inf),
     (np.int64(7), 7), (np.float32(4.0), 4), (jnp.asarray(3), 3), ("inf", None)],
    ids=["1", "5e6", "5000000", "math.inf", "float-inf", "np.int64", "np.float32", "jnp", "str-inf"],
)
def test_check_K_accepts_integers_integral_floats_and_infinity(K, expected):
    if expected is None:  # strings are never accepted, even spellings of infinity
        with pytest.raises(ValueError, match="K='inf'"):
            check_K(K)
        return
    got = check_K(K)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("K", BAD_K, ids=BAD_K_IDS)
def test_train_rejects_bad_K_before_any_compute(K):
    _refused(_train(K=K), ValueError, f"K={K!r}", "integer >= 1")


@pytest.mark.parametrize("K", [[1, 0], [math.nan, 1], [1, 2.5], [True, 1]], ids=["0", "nan", "2.5", "True"])
def test_train_sweep_rejects_a_bad_K_in_the_list(K):
    i = next(i for i, k in enumerate(K) if k is True or not (isinstance(k, int) and k >= 1))
    _refused(_sweep(K=K), ValueError, f"K[{i}]={K[i]!r} is not allowed", "integer >= 1")


@pytest.mark.parametrize("K", [3, "13", math.inf, []], ids=["int", "str", "inf", "empty"])
def test_train_sweep_needs_a_sequence_of_K(K):
    _refused(_sweep(K=K, params=tree_stack([PARAMS])), ValueError, f"K={K!r}", "sequence")


def test_train_sweep_params_must_be_stacked_one_per_K():
    _refused(_sweep(K=[1, 2, 3], params=tree_stack([PARAMS, PARAMS])), ValueError, "len(K)=3", "(2,)")


def test_accepted_K_values_run_through_the_public_api():
    # init_state encodes K (0 = ∞) without compiling anything ...
    for K, code in [(5e6, 5_000_000), (5_000_000, 5_000_000), (math.inf, 0), (float("inf"), 0), (np.int64(7), 7)]:
        assert int(init_state(PARAMS, optax.sgd(0.1), K).K) == code
    # ... and one sweep trains all of them.
    Ks = [5e6, 5_000_000, math.inf, float("inf"), np.int64(7)]
    params, history = train_sweep(Recorder(), tree_stack([PARAMS] * len(Ks)), (X, Y), K=Ks, steps=2,
                                  optimizer=optax.sgd(0.1), loss="mse", eval_every=1)
    assert history["n_relin"].shape == (5, 3) and not history["diverged"].any()


# ----------------------------------------------------------------------------------------------
# Learning rates and other positive reals
# ----------------------------------------------------------------------------------------------

BAD_LR = [0, 0.0, -1e-3, math.nan, math.inf, -math.inf, "0.1", True, None]
BAD_LR_IDS = ["0", "0.0", "negative", "nan", "inf", "-inf", "str", "True", "None"]


@pytest.mark.parametrize("lr", BAD_LR, ids=BAD_LR_IDS)
def test_check_positive_rejects(lr):
    with pytest.raises(ValueError) as info:
        check_positive(lr, "lr")
    assert str(info.value).startswith(f"lr={lr!r} is not allowed") and "> 0" in str(info.value)


@pytest.mark.parametrize("lr", [1e-3, 1, np.float32(0.5), jnp.asarray(0.1)], ids=["float", "int", "np", "jnp"])
def test_check_positive_accepts(lr):
    assert check_positive(lr, "lr") == pytest.approx(float(lr))


def test_check_nonnegative_allows_zero_only_as_the_boundary():
    assert check_nonnegative(0, "damping") == 0.0
    for bad in (-1e-9, math.nan, math.inf):
        with pytest.raises(ValueError, match=re.escape(f"damping={bad!r}")):
            check_nonnegative(bad, "damping")


@pytest.mark.parametrize("lr", [0, -1e-3, math.nan], ids=["0", "negative", "nan"])
def test_adam_solved_training_rejects_bad_lr_before_any_compute(lr):
    _refused(lambda f: train_adam_solved(f, PARAMS, (X, Y), lr=lr, steps=4, loss="mse"), ValueError, f"lr={lr!r}")


@pytest.mark.parametrize("name, value", [("step_size", 0.0), ("step_size", math.nan), ("damping", -1.0)])
def test_gauss_newton_rejects_bad_step_size_or_damping_before_any_compute(name, value):
    kwargs = {"damping": 1e-3, "steps": 2, name: value}
    _refused(lambda f: gauss_newton_train(f, PARAMS, (X, Y), **kwargs), ValueError, f"{name}={value!r}")


# ----------------------------------------------------------------------------------------------
# steps, batch_size, evaluation schedule
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("steps", [0, -1, 2.5, math.nan, math.inf, "10", True, None],
                         ids=["0", "-1", "2.5", "nan", "inf", "str", "True", "None"])
def test_bad_steps_are_refused(steps):
    _refused(_train(steps=steps), ValueError, f"steps={steps!r}", "integer >= 1")
    _refused(_sweep(steps=steps), ValueError, f"steps={steps!r}")


@pytest.mark.parametrize("steps", [2**31, 3e9, 1e20, 10**400], ids=["2**31", "3e9", "1e20", "10**400"])
def test_steps_beyond_the_int32_step_counter_are_refused_by_every_entry_point(steps):
    # issue 10 item 1: steps above int32 would overflow the device's step counters (or train until killed)
    fragments = (f"steps={steps!r}", "<= 2147483647", "step counters are int32")
    _refused(_train(steps=steps), ValueError, *fragments)
    _refused(_sweep(steps=steps), ValueError, *fragments)
    _refused(lambda f: train_adam_solved(f, PARAMS, (X, Y), lr=0.1, steps=steps, loss="mse"), ValueError, *fragments)
    _refused(lambda f: gauss_newton_train(f, PARAMS, (X, Y), damping=1.0, steps=steps), ValueError, *fragments)
    state = init_state(PARAMS, optax.sgd(0.1), 1)
    _refused(lambda f: fit(make_step(f, optax.sgd(0.1), "mse"), state, f, (X, Y), steps=steps, loss="mse"),
             ValueError, *fragments)


def test_the_largest_step_count_is_accepted():
    from iterlin.validate import MAX_STEPS, check_steps

    assert check_steps(MAX_STEPS) == 2**31 - 1 and check_steps(2.0**31 - 1) == 2**31 - 1
    assert check_K(2**31 - 1) == 2**31 - 1 and check_K(2**31) == math.inf  # a finite K fits int32 too


def test_adam_solved_check_every_is_bounded_like_steps():
    _refused(lambda f: train_adam_solved(f, PARAMS, (X, Y), lr=0.1, steps=4, check_every=2**31, loss="mse"),
             ValueError, "check_every=2147483648", "<= 2147483647")


def test_too_many_evaluation_points_are_refused_before_any_compute():
    from iterlin.training import MAX_EVAL_POINTS

    message = _refused(_train(steps=10**6, eval_every=1), ValueError, "eval_every=1", "1000001 evaluation points",
                       f"at most {MAX_EVAL_POINTS}", "eval_every >= 10")
    assert "steps=1000000" in message
    _refused(_train(steps=10**6, eval_steps=range(0, 10**6, 5)), ValueError, "eval_steps of 200001 distinct steps")
    _refused(_train(steps=4, eval_every=2**31), ValueError, "eval_every=2147483648")


def test_check_int_names_an_int_beyond_the_float_range():
    with pytest.raises(ValueError, match=re.escape("n=10000") + ".*is not allowed: n must be an integer >= 1"):
        check_int(10**400, "n")
    assert check_K(10**400) == math.inf
    with pytest.raises(ValueError, match="lr=.* is not allowed: lr must be a finite number > 0"):
        check_positive(10**400, "lr")
    with pytest.raises(ValueError, match=re.escape(f"n={2**53 + 1} is not allowed")):  # exact, not rounded
        check_int(2**53 + 1, "n", maximum=2**53)


def test_check_int_accepts_integral_floats():
    assert check_int(1e4, "steps") == 10_000 and check_int(np.int64(3), "steps") == 3


@pytest.mark.parametrize("batch_size", [0, -2, N + 1, 2.5, True], ids=["0", "-2", "n+1", "2.5", "True"])
def test_bad_batch_size_is_refused(batch_size):
    _refused(_train(batch_size=batch_size), ValueError, f"batch_size={batch_size!r}", f"<= {N}")
    _refused(_sweep(batch_size=batch_size), ValueError, f"batch_size={batch_size!r}")


@pytest.mark.parametrize(
    "change, fragments",
    [
        ({"eval_every": 0}, ["eval_every=0"]),
        ({"eval_every": 1.5}, ["eval_every=1.5"]),
        ({"eval_steps": [2, 5]}, ["eval_steps", "5", "<= 4"]),
        ({"eval_steps": [-1]}, ["eval_steps", "-1"]),
        ({"eval_batch_size": 0}, ["eval_batch_size=0"]),
    ],
    ids=["eval_every-0", "eval_every-1.5", "eval_steps-beyond", "eval_steps-negative", "eval_batch_size-0"],
)
def test_bad_evaluation_schedule_is_refused(change, fragments):
    _refused(_train(**change), ValueError, *fragments)


# ----------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------


def test_mismatched_x_and_y_are_refused():
    message = _refused(_train(data=(X, Y[:7])), ValueError, "x has 8 examples", "y has 7", "(7, 1)")
    assert "leading dimension" in message
    _refused(_sweep(data=(X, Y[:7])), ValueError, "x has 8 examples", "y has 7")


def test_scalar_or_empty_data_is_refused():
    _refused(_train(data=(jnp.float32(1.0), Y)), ValueError, "x", "shape ()")
    _refused(_train(data=(X[:0], Y[:0])), ValueError, "no examples")


def test_mismatched_eval_data_is_refused():
    _refused(_train(eval_data=(X[:5], Y[:4])), ValueError, "eval_data x has 5 examples", "eval_data y has 4")


@pytest.mark.parametrize("which", ["data", "eval_data"])
def test_data_that_is_not_a_pair_is_refused(which):
    bad = (X,)
    change = {"data": bad} if which == "data" else {"eval_data": bad}
    _refused(_train(**change), (ValueError, TypeError), which, "(x, y)")


def test_check_xy_names_the_arguments():
    with pytest.raises(ValueError, match=r"eval_data x has 3 examples .* but eval_data y has 2"):
        check_xy(np.zeros((3, 1)), np.zeros(2), xname="eval_data x", yname="eval_data y")


# ----------------------------------------------------------------------------------------------
# optimizer and loss
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("optimizer", ["adam", optax.adam, None, 0.1], ids=["str", "uncalled-factory", "None", "lr"])
def test_optimizer_must_be_an_optax_transformation(optimizer):
    for call in (_train(optimizer=optimizer), _sweep(optimizer=optimizer)):
        _refused(call, TypeError, f"optimizer={optimizer!r}", "optax GradientTransformation")


@pytest.mark.parametrize("loss", ["foo", "MSE", None, 1], ids=["foo", "MSE", "None", "int"])
def test_unknown_loss_is_refused(loss):
    for call in (_train(loss=loss), _sweep(loss=loss)):
        _refused(call, ValueError, f"loss={loss!r}", "'ce'", "'mse'")


INJECTED = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)


@pytest.mark.parametrize(
    "optimizer, hyperparams, fragment",
    [(optax.sgd(0.1), {"learning_rate": [0.1, 0.2]}, "holds no hyperparams; make it with optax.inject_hyperparams"),
     (INJECTED, [0.1, 0.2], "must be a mapping"),
     (INJECTED, {"lr": [0.1, 0.2]}, "'lr' is not a float hyperparameter of the optimizer (it has ['learning_rate'])"),
     (INJECTED, {"learning_rate": [0.1]}, "hyperparams['learning_rate'] must be a sequence of 2 numbers, one per run"),
     (INJECTED, {"learning_rate": 0.1}, "must be a sequence of 2 numbers"),
     (INJECTED, {"learning_rate": [0.1, math.nan]}, "hyperparams['learning_rate'] must hold finite real numbers"),
     (INJECTED, {"learning_rate": [0.1, True]}, "must hold finite real numbers"),
     (INJECTED, {"learning_rate": [0.1, "0.2"]}, "must hold finite real numbers"),
     (INJECTED, {"learning_rate": [0.1, [0.2]]}, "must hold finite real numbers")],
    ids=["not-injected", "not-a-mapping", "unknown-name", "too-few", "scalar", "nan", "bool", "str", "nested"],
)
def test_train_sweep_refuses_bad_per_run_hyperparams(optimizer, hyperparams, fragment):
    _refused(_sweep(optimizer=optimizer, hyperparams=hyperparams), ValueError,
             f"hyperparams={hyperparams!r} is not allowed: ", fragment)


def test_check_choice_lists_the_choices():
    with pytest.raises(ValueError, match=r"loss='foo' is not allowed: loss must be one of 'ce', 'mse'"):
        check_choice("foo", "loss", ("ce", "mse"))


# ----------------------------------------------------------------------------------------------
# With a BatchNorm ``refresh`` (run once at θ_0 before training): still nothing runs first
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({"K": 0}, "K=0"),
        ({"steps": 0}, "steps=0"),
        ({"batch_size": 0}, "batch_size=0"),
        ({"batch_size": 2.5}, "batch_size=2.5"),
        ({"loss": "foo"}, "loss='foo'"),
        ({"data": (X, Y[:7])}, "y has 7"),
        ({"data": (X,)}, "(x, y)"),
    ],
    ids=["K", "steps", "batch_size-0", "batch_size-2.5", "loss", "xy", "data-pair"],
)
@pytest.mark.parametrize("api", ["train", "train_sweep"])
def test_bad_input_is_refused_before_the_initial_refresh(change, fragment, api):
    refreshed = []

    def refresh(params, x):
        refreshed.append(x.shape)
        return params

    make = _train if api == "train" else _sweep
    if api == "train_sweep" and "K" in change:  # the run's K named with its index
        change, fragment = {"K": [1, change["K"]]}, fragment.replace("K=", "K[1]=")
    _refused(make(refresh=refresh, **change), (ValueError, TypeError), fragment)
    assert refreshed == [], "refresh ran before the arguments were checked"
