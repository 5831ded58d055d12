"""Iterative linearisation with each linearisation solved to convergence (Sec. 3.3 and 4.3, Fig. 8).

Section 3.3 connects iterative linearisation to second-order methods: with K → ∞ and each convex
problem solved exactly it becomes (generalised) Gauss–Newton. Section 4.3 implements this for the
softmax cross-entropy: the convex problem of linearisation i,

    min_θ  L_i(θ) = (1/N) Σ_n ℓ(f_lin_{s_i}(θ, x_n), y_n),
    f_lin_{s_i}(θ, x) = f(θ_{s_i}, x) + J(θ_{s_i}, x)(θ − θ_{s_i}),

is solved numerically by an inner optimiser (Adam in the paper, its moments fresh for every
linearisation), starting from θ_{s_i}; then θ_{s_{i+1}} ← θ (re-linearise, a "feature learning
step") and the next convex problem is solved. Each inner step is Eq. 3 with the inner optimiser;
only the re-linearisation rule (Eq. 4, ``(t + 1) mod K = 0``) is replaced by a convergence test.

Re-linearisation criterion (k = inner steps since the last re-linearisation, after the update):
the linear model is checked on the WHOLE training set when k is a multiple of ``check_every`` or
k = K, at the new parameters θ_{t+1} (the point that becomes θ_s), and we re-linearise when EITHER

1. ``target``:  its training accuracy is ≥ ``target_acc`` (default 1.0, "100 % train accuracy with
   each re-linearisation"; only for integer labels; ``target_acc=None`` disables it), OR
2. ``plateau``: its training loss L_i improved by less than ``plateau_tol`` relative to the previous
   check of the same linearisation, i.e. L_prev − L_now < plateau_tol · L_prev, one window of
   ``check_every`` steps back (the first check of a linearisation has no previous value and never
   plateaus; ``plateau_tol = 0`` disables this test), OR
3. ``K``:       k = K, the most steps one linearisation may take (the paper's K = 2·10⁵;
   ``math.inf`` for no limit).

Note: f_lin_s(θ_s) = f(θ_s), so once the network itself classifies the whole training set
correctly, every new linear model starts at 100 % and (1) fires at its first check: the run then
re-linearises every ``check_every`` steps, i.e. it becomes iterative linearisation with
K = ``check_every``. For the paper's "large constant K" use ``target_acc=None, plateau_tol=0``.

With the test never passing (unreachable target, ``plateau_tol = 0``) this is exactly
:func:`iterlin.training.train` with period K and the optimiser state reset at each
re-linearisation (``make_step(..., reset_optimizer=True)``). Mini-batches, ``"ce"`` and ``"mse"``
work as in :func:`iterlin.training.fit`; the check always uses the full, un-augmented training set.

Implementation: the whole thing is one ``step_fn`` for :func:`iterlin.training.fit` (the project's
one training loop). The inner update is Eq. 3, :func:`iterlin.training.make_linearised_update` (as in
:func:`iterlin.training.make_step`); this module only decides when to re-linearise, and each step
commits its proposal once through :func:`iterlin.training.commit_step` (the divergence guard).
``TrainState.opt_state`` is the inner optimiser's state; the criterion's state, a
:class:`SolveState`, is ``TrainState.policy``. The full-training-set check runs under ``jax.lax.cond`` so it
costs one pass over the training set (in chunks) every ``check_every`` steps, not every step.
Each re-linearisation is logged on device in fixed-size buffers (step, inner steps, training
accuracy and loss of the linear model just before it, and the reason), returned in the history.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .linearise import linearised_apply
from .losses import Loss, get_loss
from .training import (
    TrainState,
    _chunked,
    _memoise,
    _metric_sums,
    commit_step,
    fit,
    init_state,
    make_chunked_metrics,
    make_linearised_update,
)
from .tree import tree_where
from .validate import MAX_STEPS, check_int, check_K, check_nonnegative, check_positive, check_steps, check_xy

__all__ = [
    "SolveState",
    "RELIN_REASONS",
    "init_solve_state",
    "make_solve_step",
    "make_train_check",
    "relin_log",
    "train_adam_solved",
]

#: Reason codes stored in ``SolveState.relin_reason`` (index into this tuple; 0 = no entry).
RELIN_REASONS = ("", "target", "plateau", "K")

#: Upper bound on the number of re-linearisations logged per run (further ones are still counted
#: in ``TrainState.n_relin``, only their log entry is dropped).
MAX_LOG = 100_000


class SolveState(NamedTuple):
    """The criterion's state, kept in ``TrainState.policy`` (beside the inner optimiser's ``opt_state``).

    Scalars:
      inner_steps: int32, steps taken on the current linearisation (k; 0 just after re-linearising).
      prev_loss: L_i at the previous check of this linearisation (+inf before the first check).
      check_loss, check_acc: training loss / accuracy of the linear model at the last check (nan
      before any; accuracy nan for real-valued targets).
    Log, shape (log_size,), entry j for the j-th re-linearisation (j < ``TrainState.n_relin``):
      relin_step: int32, the step t + 1 after which it happened (θ_s ← θ_{t+1}).
      relin_inner_steps: int32, steps spent on the linearisation it ended.
      relin_acc, relin_loss: training accuracy / loss of that linear model at θ_{t+1}.
      relin_reason: int32 index into :data:`RELIN_REASONS` (priority target > plateau > K).
    """

    inner_steps: jax.Array
    prev_loss: jax.Array
    check_loss: jax.Array
    check_acc: jax.Array
    relin_step: jax.Array
    relin_inner_steps: jax.Array
    relin_acc: jax.Array
    relin_loss: jax.Array
    relin_reason: jax.Array


def _float():
    return jnp.result_type(float)


def init_solve_state(params, optimizer: optax.GradientTransformation, K, log_size: int) -> TrainState:
    """A fresh run linearised at ``params``: ``opt_state = optimizer.init(params)``, ``policy`` a fresh
    :class:`SolveState`.

    ``K`` (the most steps per linearisation) is stored in ``TrainState.K`` (0 encodes ∞).
    """
    log_size = check_int(log_size, "log_size")
    f, i32 = _float(), jnp.int32
    solve = SolveState(
        inner_steps=jnp.zeros((), i32),
        prev_loss=jnp.asarray(jnp.inf, f),
        check_loss=jnp.asarray(jnp.nan, f),
        check_acc=jnp.asarray(jnp.nan, f),
        relin_step=jnp.full((log_size,), -1, i32),
        relin_inner_steps=jnp.full((log_size,), -1, i32),
        relin_acc=jnp.full((log_size,), jnp.nan, f),
        relin_loss=jnp.full((log_size,), jnp.nan, f),
        relin_reason=jnp.zeros((log_size,), i32),
    )
    return init_state(params, optimizer, K, policy=solve)


def make_train_check(apply_fn: Callable, loss: str | Loss, x, y, batch_size: int = 1000) -> Callable:
    """Return ``check(params_s, params) -> (loss, acc)`` of the linear model on the whole set (x, y).

    loss = (1/N) Σ_n ℓ(f_lin_s(θ, x_n), y_n); acc = fraction of argmax f_lin_s(θ, x_n) = y_n for
    integer labels y (N,), nan for real targets (N, O). Evaluated in chunks of ``batch_size``
    examples by :func:`iterlin.training.make_chunked_metrics` (the loop ``fit`` evaluates with).
    """
    metrics = make_chunked_metrics(loss, x, y, batch_size)
    classify = jnp.issubdtype(jnp.asarray(y).dtype, jnp.integer)
    return lambda params_s, params: _lin_means(apply_fn, metrics, metrics.size, classify, params_s, params)


def _lin_means(apply_fn, metrics, n: int, classify: bool, params_s, params):
    """(loss, acc) of f_lin_s(θ) from ``metrics(models)`` sums over n examples (:func:`make_train_check`)."""
    sums = metrics({"lin": lambda xb: linearised_apply(apply_fn, params_s, params, xb)})
    acc = sums["lin_acc"] / n if classify else jnp.asarray(jnp.nan, _float())
    return sums["lin_loss"] / n, acc


def _train_check_on(apply_fn, loss: Loss, data, batch_size: int, params_s, params):
    """:func:`make_train_check`'s ``check(params_s, params)`` with the data ``(x, y)`` an argument
    (chunked here, inside the caller's trace: a compiled step reads the data it is given)."""
    x, y = data
    chunks = _chunked(x, y, batch_size)
    classify = jnp.issubdtype(y.dtype, jnp.integer)
    metrics = lambda models: _metric_sums(loss, models, chunks)  # noqa: E731
    return _lin_means(apply_fn, metrics, chunks.n, classify, params_s, params)


def make_solve_step(
    apply_fn: Callable,
    optimizer: optax.GradientTransformation,
    loss: str | Loss,
    train_data: tuple,
    *,
    target_acc: float | None = 1.0,
    check_every: int = 100,
    plateau_tol: float = 1e-4,
    refresh: Callable | None = None,
    check_batch_size: int = 1000,
) -> Callable:
    """Return ``step(state, (x, y)) -> (state, {"loss": ...})`` for :func:`iterlin.training.fit`.

    ``state`` comes from :func:`init_solve_state` (with the same ``optimizer``). One inner step of
    ``optimizer`` on the current linear model (Eq. 3, :func:`iterlin.training.make_linearised_update`),
    then the convergence check on ``train_data = (x_train, y_train)`` (see the module docstring) when
    k % check_every == 0 or k = K, and, if it passes, re-linearisation: θ_s ← θ_{t+1} (after
    ``refresh(θ_{t+1}, x)`` when given), the optimizer state re-initialised, ``n_relin`` + 1, k ← 0.
    The whole proposal (θ_{t+1}, θ_s, inner optimizer state, :class:`SolveState` in
    ``state.policy``) is committed once through :func:`iterlin.training.commit_step`: a diverging
    loss or θ_{t+1} freezes all of it, so a diverged run never re-linearises or logs. Not meant for
    ``fit(..., sweep=True)`` (under vmap ``lax.cond`` evaluates the check every step).
    """
    options = _solve_options(loss, target_acc, check_every, plateau_tol, refresh, check_batch_size)
    x_train, y_train = (jnp.asarray(a) for a in train_data)
    check_xy(x_train, y_train)
    step = _solve_step(apply_fn, optimizer, *options)

    def step_on_train_data(state: TrainState, batch):
        return step(state, batch, (x_train, y_train))

    return step_on_train_data


def _solve_options(loss, target_acc, check_every, plateau_tol, refresh, check_batch_size) -> tuple:
    """The static options of :func:`_solve_step`, validated, in its order."""
    loss = get_loss(loss)
    check_every = check_int(check_every, "check_every", maximum=MAX_STEPS, why="step counters are int32")
    plateau_tol = check_nonnegative(plateau_tol, "plateau_tol")
    target_acc = _check_target_acc(target_acc)
    check_batch_size = check_int(check_batch_size, "eval_batch_size")
    return loss, target_acc, check_every, plateau_tol, refresh, check_batch_size


@_memoise
def _solve_step(apply_fn, optimizer, loss: Loss, target_acc, check_every: int, plateau_tol: float, refresh,
                check_batch_size: int) -> Callable:
    """:func:`make_solve_step`'s step with the training set an argument, ``step(state, batch, (x, y))``
    (``takes_data``: :func:`iterlin.training.fit` passes its training data), memoised on the rest, so
    :func:`train_adam_solved` compiles once for every value of the data."""
    update = make_linearised_update(apply_fn, optimizer, loss)

    def step(state: TrainState, batch, train_data):
        x, y = batch
        solve = state.policy
        f = _float()
        classify = jnp.issubdtype(train_data[1].dtype, jnp.integer)
        # The proposal: one inner step (Eq. 3) on the current linearisation ...
        value, params, inner_opt = update(state.params, state.params_s, state.opt_state, x, y)
        # ... the criterion at θ_{t+1} ...
        k = solve.inner_steps + 1
        at_K = (state.K > 0) & (k >= state.K)
        do_check = ((k % check_every) == 0) | at_K
        nan = jnp.asarray(jnp.nan, f)
        lin_loss, lin_acc = jax.lax.cond(
            do_check,
            lambda: tuple(v.astype(f) for v in _train_check_on(apply_fn, loss, train_data, check_batch_size,
                                                               state.params_s, params)),
            lambda: (nan, nan),
        )
        if classify and target_acc is not None:
            hit_target = do_check & (lin_acc >= target_acc)
        else:
            hit_target = jnp.asarray(False)
        plateau = do_check & (solve.prev_loss - lin_loss < plateau_tol * solve.prev_loss)
        plateau = plateau if plateau_tol > 0 else jnp.asarray(False)
        relin = hit_target | plateau | at_K
        reason = jnp.where(hit_target, 1, jnp.where(plateau, 2, 3)).astype(jnp.int32)
        # ... the re-linearisation it asks for (θ_s ← θ_{t+1}, fresh inner state) ...
        if refresh is not None:
            params = jax.lax.cond(relin, lambda p: refresh(p, x), lambda p: p, params)
        params_s = tree_where(relin, params, state.params_s)
        inner_opt = tree_where(relin, optimizer.init(params), inner_opt)
        # ... and the new criterion state, with the log entry of this re-linearisation.
        j = jnp.where(relin, state.n_relin, solve.relin_step.shape[0])  # out of range → dropped
        log = lambda buf, v: buf.at[j].set(jnp.asarray(v, buf.dtype), mode="drop")  # noqa: E731
        checked = jnp.where(do_check, lin_loss, solve.prev_loss)
        solve_new = SolveState(
            inner_steps=jnp.where(relin, 0, k),
            prev_loss=jnp.where(relin, jnp.inf, checked).astype(f),
            check_loss=jnp.where(do_check, lin_loss, solve.check_loss),
            check_acc=jnp.where(do_check, lin_acc, solve.check_acc),
            relin_step=log(solve.relin_step, state.step + 1),
            relin_inner_steps=log(solve.relin_inner_steps, k),
            relin_acc=log(solve.relin_acc, lin_acc),
            relin_loss=log(solve.relin_loss, lin_loss),
            relin_reason=log(solve.relin_reason, reason),
        )
        # One commit: a diverging loss or θ_{t+1} (commit_step) freezes all of it (θ, θ_s, inner state, criterion).
        new = commit_step(state, value, params, params_s, inner_opt, relin, solve_new)
        return new, {"loss": value}

    step.takes_data = True
    return step


@functools.lru_cache(maxsize=64)
def _adam(lr: float) -> optax.GradientTransformation:
    """``optax.adam(lr)``, one object per learning rate (so its steps and programs are reused)."""
    return optax.adam(lr)


def relin_log(state: TrainState) -> dict:
    """The re-linearisation log of a run as host arrays, one entry per logged re-linearisation.

    Keys ``relin_step``, ``relin_inner_steps``, ``relin_acc``, ``relin_loss`` and ``relin_reason``
    (strings from :data:`RELIN_REASONS`: ``"target"``, ``"plateau"`` or ``"K"``).
    """
    solve = state.policy
    n = min(int(state.n_relin), int(solve.relin_step.shape[0]))
    out = {
        "relin_step": np.asarray(solve.relin_step)[:n],
        "relin_inner_steps": np.asarray(solve.relin_inner_steps)[:n],
        "relin_acc": np.asarray(solve.relin_acc)[:n],
        "relin_loss": np.asarray(solve.relin_loss)[:n],
    }
    out["relin_reason"] = np.asarray([RELIN_REASONS[r] for r in np.asarray(solve.relin_reason)[:n]], dtype=str)
    return out


def _check_target_acc(target_acc) -> float | None:
    if target_acc is None:
        return None
    v = check_positive(target_acc, "target_acc")
    if v > 1:
        raise ValueError(
            f"target_acc={target_acc!r} is not allowed: target_acc must be a number in (0, 1] "
            "(a training accuracy; 1.0 = 100 %), or None to disable the accuracy test."
        )
    return v


def train_adam_solved(
    apply_fn: Callable,
    params: Any,
    data: tuple,
    *,
    lr: float,
    steps: int,
    K=200_000,
    target_acc: float | None = 1.0,
    check_every: int = 100,
    plateau_tol: float = 1e-4,
    loss: str | Loss = "ce",
    batch_size: int | None = None,
    key=None,
    refresh: Callable | None = None,
    **fit_kwargs,
) -> tuple[Any, dict]:
    """Iterative linearisation with each linearisation solved by Adam until converged (Fig. 8).

    Args:
      apply_fn: ``apply_fn(params, x) -> (N, O)`` outputs (logits for ``"ce"``).
      params: initial parameters θ_0, the first linearisation point.
      data: ``(x, y)`` training set (x (N, ...), y (N,) int labels or (N, O) targets); the
        criterion is evaluated on all of it.
      lr: Adam learning rate (``optax.adam(lr)``, fresh moments at each linearisation).
      steps: total number of Adam steps T over all linearisations.
      K: the most steps per linearisation (paper: 2·10⁵); int ≥ 1 or ``math.inf``.
      target_acc: re-linearise once the linear model's training accuracy is ≥ this, in (0, 1];
        None disables the accuracy test (with ``plateau_tol=0`` too, every linearisation runs
        exactly K steps: the paper's constant K). Ignored for real-valued targets.
      check_every: check the criterion every this many steps of a linearisation (≥ 1).
      plateau_tol: re-linearise when the linear model's training loss improved by less than this
        fraction over the last ``check_every`` steps (≥ 0; 0 disables the plateau test).
      loss: ``"ce"`` or ``"mse"``.
      batch_size: mini-batch size for the Adam steps, or None for full batch.
      key: PRNG key for batch order and augmentation (default ``PRNGKey(0)``).
      refresh: ``refresh(params, x) -> params`` at each re-linearisation (frozen BatchNorm).
      **fit_kwargs: passed to :func:`iterlin.training.fit` (``eval_data``, ``eval_every``,
        ``eval_steps``, ``eval_batch_size`` (also the chunk size of the criterion's pass over the
        training set), ``augment``, ``callback``, ``checkpoint``, ``progress``, ``config``).

    Returns:
      ``(params, history)``: θ_T and :func:`iterlin.training.fit`'s history (per evaluation point:
      ``step``, ``n_relin``, ``{net,lin}_{train,test}_*``, …) plus ``inner_steps`` (steps into the
      current linearisation at each evaluation point) and, one entry per re-linearisation, the
      log of :func:`relin_log`: ``relin_step``, ``relin_inner_steps``, ``relin_acc``,
      ``relin_loss``, ``relin_reason``.
    """
    lr = check_positive(lr, "lr")
    steps = check_steps(steps)
    K_value = check_K(K)
    target_acc = _check_target_acc(target_acc)
    check_every = check_int(check_every, "check_every", maximum=MAX_STEPS, why="step counters are int32")
    plateau_tol = check_nonnegative(plateau_tol, "plateau_tol")
    loss = get_loss(loss)
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise ValueError(f"data must be a pair (x, y); got {type(data).__name__}")
    check_xy(*data)
    if fit_kwargs.pop("sweep", False):
        raise ValueError("sweep=True is not allowed: train_adam_solved runs one model (call it once per run)")
    eval_batch_size = check_int(fit_kwargs.get("eval_batch_size", 1000), "eval_batch_size")
    user_callback = fit_kwargs.pop("callback", None)
    config = dict(fit_kwargs.pop("config", None) or {})
    config["adam_solve"] = {
        "lr": lr,
        "K": -1 if math.isinf(K_value) else K_value,
        "target_acc": -1 if target_acc is None else target_acc,
        "check_every": check_every,
        "plateau_tol": plateau_tol,
    }

    shortest = check_every if math.isinf(K_value) else min(check_every, K_value)
    log_size = steps // shortest + 1
    if log_size > MAX_LOG:
        warnings.warn(
            f"up to {log_size} re-linearisations possible; only the first {MAX_LOG} are logged", stacklevel=2
        )
        log_size = MAX_LOG

    optimizer = _adam(lr)
    state = init_solve_state(params, optimizer, K_value, log_size)
    # The step reads the training set that fit passes it (takes_data): fit's data, as an argument.
    step_fn = _solve_step(apply_fn, optimizer, *_solve_options(loss, target_acc, check_every, plateau_tol, refresh,
                                                                  eval_batch_size))

    def callback(t, st):
        out = {"inner_steps": np.asarray(st.policy.inner_steps)}
        if user_callback is not None:
            out.update(user_callback(t, st) or {})
        return out

    state, history = fit(step_fn, state, apply_fn, data, steps=steps, loss=loss, batch_size=batch_size, key=key,
                         callback=callback, config=config, **fit_kwargs)
    history.update(relin_log(state))
    return state.params, history
