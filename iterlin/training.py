"""Iterative linearisation (Eq. 3–4, Algorithm 1): the one training loop shared by every figure.

For t = 0, 1, …, steps − 1, with θ_s the current linearisation point:

    θ_{t+1} = θ_t − η ∇_θ L(f_lin_s(θ_t, X_t))       (Eq. 3; any optax transformation, not only SGD)
    if (t + 1) mod K = 0:  θ_s ← θ_{t+1}              (Eq. 4: re-linearise, "feature learning step")

where f_lin_s(θ, x) = f(θ_s, x) + J(θ_s, x)(θ − θ_s). The loss (softmax cross-entropy or MSE) is
applied to the linearised outputs, never linearised itself (Appendix A). K = 1 is ordinary (S)GD,
K = ∞ trains the linearisation at initialisation (fixed empirical NTK). The number of
re-linearisations so far, ⌊t/K⌋, is the paper's feature-learning proxy T/K (Definition 1).

Design:

* ``make_step`` returns a pure ``step(state, batch) -> (state, metrics)``. θ_s and K live in the
  :class:`TrainState`, so re-linearising never re-compiles and a sweep can ``vmap`` over K.
* When to re-linearise is a policy (:mod:`iterlin.relin`): ``K=3`` is ``relin.every(3)``, the rule
  above; ``relin.adaptive(tol)`` re-linearises when the linear model drifts from the network,
  ``relin.until_solved(...)`` when each linearisation is solved (Fig. 8). A policy's parameters
  live in ``TrainState.K`` and ``TrainState.policy`` (arrays), its decision is a pure function of
  them, so policies of one kind with different parameters are one (vmapped) program.
* The dataset is held on device; batches are drawn inside the compiled loop from a per-epoch
  permutation keyed by ``fold_in(key, epoch)``, and augmented on device keyed by ``fold_in(key, t)``.
  Batches are therefore a pure function of (key, t): every run of a sweep sees the same batches,
  and a resumed run sees exactly the batches it would have seen.
* Between evaluation points the steps run in one ``lax.fori_loop`` with traced bounds (one
  compilation for every chunk length), on every backend; a sweep's runs are ``vmap``-ed into one
  program, on every backend (see ``_run``).
* Compile once: the step factories (``make_step``, the Gauss–Newton and Adam-solved steps) are
  memoised on what their steps close over (``apply_fn``, the optimizer, the loss, the static
  options), and the compiled programs of the loop and of evaluation are cached on their step
  function and static options, with the data, the evaluation splits, the key and the state as
  ARGUMENTS (never closed over: no array is baked into a program). A second call with the same
  ``apply_fn``, optimizer, loss and shapes, whatever the data and θ_0, compiles nothing.
* A non-finite loss or update, or a loss beyond √(largest finite value) of its dtype, freezes that
  run (its whole state stays at the one before that step) and records the step (:func:`commit_step`,
  the one guard every step function commits through): divergence is a result, not a crash; in a
  sweep the other runs continue.
* Per-algorithm state (the re-linearisation policy's state, or a Gauss–Newton run's damping) rides
  in ``TrainState.policy``, beside the optimizer state, never inside it.
* With ``checkpoint=path`` the whole state (θ, θ_s, optimizer state, policy, step, history, key) is saved
  atomically at evaluation points, and a rerun with the same arguments resumes from it.
* Several devices (``fit``'s ``devices``, ``shard_runs``, ``data_parallel``): a vmapped sweep's run
  axis is sharded over the local devices (``NamedSharding(mesh, P("runs"))``, padded to a multiple of
  the device count), or a single run's batches are (data parallel, ``P("batch")``, parameters
  replicated). Placement only: the step functions are unchanged and the results equal one device's
  (up to the order of floating-point sums). Checkpoints hold the unpadded state on the host, so a run
  resumes on any number of devices.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from .augment import flip_and_crop
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .linearise import linearised_apply
from .losses import Loss, get_loss
from .memo import memoise as _memoise
from .relin import RelinInfo, RelinPolicy, as_policy, every, log_size
from .relin import Rule as _Rule
from .relin import check_state as _check_state
from .relin import one_rule as _one_rule
from .relin import history as relin_history
from .tree import tree_all_finite, tree_index, tree_stack, tree_where
from .validate import MAX_STEPS, check_int, check_K, check_steps, check_xy

__all__ = [
    "TrainState",
    "init_state",
    "commit_step",
    "divergence_bound",
    "make_linearised_update",
    "make_step",
    "make_batch_fn",
    "fit",
    "check_train_args",
    "default_evaluation",
    "DEFAULT_EVAL_BUDGET",
    "DEFAULT_EVAL_POINTS",
    "MIN_EVAL_TRAIN",
    "train",
    "train_sweep",
]

class TrainState(NamedTuple):
    """Everything a run needs to continue (one run; a sweep stacks runs on a leading axis).

    ``policy`` is the per-algorithm state that is neither θ nor the optimizer's: the
    re-linearisation policy's state for iterative linearisation (:func:`make_step`, see
    :mod:`iterlin.relin`): ``()`` for :func:`iterlin.relin.every` (K alone), an
    :class:`iterlin.relin.AdaptiveState` for :func:`iterlin.relin.adaptive`, a
    :class:`iterlin.relin.SolveState` for :func:`iterlin.relin.until_solved` (the Adam-solved
    linearisations); the per-run hyperparameter h (a scalar array: the damping λ or the flow time τ)
    for the Gauss–Newton/spectral step (:func:`iterlin.gauss_newton.make_gauss_newton_step`), so that
    runs with different h are one vmapped program. It is frozen with the rest of the run on
    divergence (:func:`commit_step`) and saved in checkpoints with the rest of the state.
    """

    params: Any  #: θ_t
    params_s: Any  #: θ_s, the current linearisation point
    opt_state: Any  #: the optimizer's state (optax)
    step: jax.Array  #: int32 (): steps completed
    n_relin: jax.Array  #: int32 (): re-linearisations so far (T/K)
    K: jax.Array  #: int32 (): re-linearisation period (``every``) or the most steps per linearisation; 0 encodes ∞
    diverged: jax.Array  #: bool (): a non-finite or overflowing loss or update was met (commit_step); frozen
    diverged_step: jax.Array  #: int32 (): the step at which it diverged, −1 if it has not
    policy: Any = ()  #: per-algorithm state (see above); () for plain iterative linearisation


def _K_code(K) -> int:
    K = check_K(K)
    return 0 if math.isinf(K) else int(K)


def init_state(params, optimizer: optax.GradientTransformation, K, policy=(), *, steps: int | None = None) -> TrainState:
    """A fresh run linearised at ``params`` (θ_s = θ_0), with ``optimizer.init(params)`` and ``policy``.

    ``K``: a period (int ≥ 1, integral float, ``math.inf``) with ``policy`` the per-algorithm state
    (default ``()``); or a :class:`iterlin.relin.RelinPolicy`, whose ``K`` and ``init`` give
    ``TrainState.K`` and ``TrainState.policy`` (then ``policy`` must be left out, and ``steps``, the
    run's length, sizes the policy's log: :func:`iterlin.relin.log_size`).
    """
    if isinstance(K, RelinPolicy):
        if not (isinstance(policy, tuple) and policy == ()):
            raise ValueError("policy is not allowed with K a RelinPolicy: the policy's own init makes the state")
        if K.shortest and steps is None:
            raise ValueError(f"steps=None is not allowed with K={K!r}: its log is sized by the run's length")
        policy = K.init(log_size([K], check_steps(steps)) if K.shortest else 0)
        K = K.K
    i32 = lambda v: jnp.asarray(v, jnp.int32)  # noqa: E731
    return TrainState(
        params=params,
        params_s=params,
        opt_state=optimizer.init(params),
        step=i32(0),
        n_relin=i32(0),
        K=i32(_K_code(K)),
        diverged=jnp.asarray(False),
        diverged_step=i32(-1),
        policy=policy,
    )


def divergence_bound(dtype) -> float:
    """The largest loss magnitude a run may reach without counting as diverged: √(finfo(dtype).max).

    See :func:`commit_step`. A NaN compares False with it, so NaN and ±∞ count as diverged too.
    """
    return float(jnp.finfo(dtype).max) ** 0.5


def commit_step(state: TrainState, value, params, params_s, opt_state, relin, policy=None) -> TrainState:
    """Advance ``state`` by one step: THE divergence guard, through which every step function commits.

    ``value`` is the loss at θ_t; ``params``, ``params_s``, ``opt_state``, ``policy`` the proposed
    θ_{t+1}, θ_s, optimizer state and policy (``None``: keep ``state.policy``); ``relin`` (bool
    scalar) whether this step re-linearises (``n_relin`` + 1).

    Divergence is any of:

    * a loss at θ_t that is not finite, or whose magnitude exceeds :func:`divergence_bound` of
      its dtype, √(largest finite value): √(1.8·10³⁰⁸) ≈ 1.3·10¹⁵⁴ in float64, √(3.4·10³⁸) ≈
      1.8·10¹⁹ in float32. Beyond it the square of the loss no longer fits the dtype: products of
      two numbers of that size (of residuals and Jacobians in gradients, Jᵀr and Gauss–Newton
      systems) overflow, so the run has left the range where its numbers mean anything, even
      while they are still finite (Fig. 9's float64 runs whose RMSE grows to 10¹²⁸ and beyond
      before ever reaching ∞: a squared-error loss of 10²⁵⁶);
    * an update that overflowed (θ_{t+1} not finite).

    Either way the run keeps its state from before this step (θ_t, θ_s, the optimizer state and the
    policy), is marked ``diverged`` with ``diverged_step = t``, and stays frozen from then on (in a
    sweep, only that run). ``step`` counts on.
    """
    policy = state.policy if policy is None else policy
    value = jnp.asarray(value)
    ok = (jnp.abs(value) <= divergence_bound(value.dtype)) & tree_all_finite(params) & ~state.diverged
    return TrainState(
        params=tree_where(ok, params, state.params),
        params_s=tree_where(ok, params_s, state.params_s),
        opt_state=tree_where(ok, opt_state, state.opt_state),
        step=state.step + 1,
        n_relin=jnp.where(ok & relin, state.n_relin + 1, state.n_relin),
        K=state.K,
        diverged=~ok,
        diverged_step=jnp.where(~ok & ~state.diverged, state.step, state.diverged_step),
        policy=tree_where(ok, policy, state.policy),
    )


def make_linearised_update(apply_fn: Callable, optimizer: optax.GradientTransformation, loss: str | Loss) -> Callable:
    """Return ``update(params, params_s, opt_state, x, y) -> (value, params, opt_state)`` (Eq. 3).

    One step of ``optimizer`` on the mean loss of the linear model at θ_s,
    value = (1/B) Σ_n ℓ(f_lin_s(θ_t, x_n), y_n), θ_{t+1} = θ_t + optimizer update of ∇_θ value.
    A proposal only: the caller decides about re-linearisation and commits with :func:`commit_step`.
    """
    loss = get_loss(loss)

    def loss_fn(params, params_s, x, y):
        out = linearised_apply(apply_fn, params_s, params, x)
        return jnp.mean(loss.per_example(out, y))

    def update(params, params_s, opt_state, x, y):
        value, grads = jax.value_and_grad(loss_fn)(params, params_s, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return value, optax.apply_updates(params, updates), opt_state

    return update


def make_step(
    apply_fn: Callable,
    optimizer: optax.GradientTransformation,
    loss: str | Loss,
    *,
    refresh: Callable | None = None,
    reset_optimizer: bool = False,
    policy: RelinPolicy | None = None,
) -> Callable:
    """Return ``step(state, (x, y)) -> (state, {"loss": L(f_lin(θ_t, x), y)})`` (Eq. 3–4).

    One step of ``optimizer`` on the linear model at θ_s (Eq. 3, :func:`make_linearised_update`),
    then the re-linearisation policy's decision (:mod:`iterlin.relin`): ``relin, policy_state =
    decide(state.policy, info)`` with ``info`` a :class:`iterlin.relin.RelinInfo` (the step count
    t + 1, ``state.K``, ``n_relin``, the loss); if ``relin``, θ_s ← θ_{t+1}. The proposal is committed
    once through :func:`commit_step`. ``policy``: None or :func:`iterlin.relin.every` (the period
    K = ``state.K``, (t + 1) mod K = 0), :func:`iterlin.relin.adaptive` (the step also computes the
    network's loss L(f(θ_t), x) on the batch: one more forward pass) or
    :func:`iterlin.relin.until_solved` (the step reads the whole training set:
    ``step(state, batch, (x_train, y_train))``, ``step.takes_data``; :func:`fit` passes its data).
    Only the policy's kind and static options matter here; its parameters are in the state
    (:func:`init_state` with the policy), so one step function serves every value of them.

    ``step.k1`` (for :func:`iterlin.relin.every` only) is the same step for a run with K = 1,
    computed without the linearisation (plain (S)GD's cost); :func:`fit` uses it for runs whose K
    is 1 where it can pick per run.

    ``refresh(params, x) -> params``, if given, runs at each re-linearisation on the current batch
    (BatchNorm statistics frozen at θ_s and re-estimated there, see :mod:`iterlin.models`).
    ``reset_optimizer`` re-initialises the optimizer state at each re-linearisation, so each
    linearisation is solved as a fresh convex problem (Fig 8); by default the state carries over.

    Memoised: the same ``apply_fn``, ``optimizer`` (the same object), loss, ``refresh``,
    ``reset_optimizer`` and policy kind (:attr:`iterlin.relin.RelinPolicy.rule`) give the same function
    object, so :func:`fit` reuses its compiled programs.
    """
    rule = (every(1) if policy is None else as_policy(policy, "policy")).rule
    if rule.train_check and rule.check_batch_size is None:
        rule = rule._replace(check_batch_size=1000)  # fit's default eval_batch_size
    return _make_step(apply_fn, optimizer, get_loss(loss), refresh, bool(reset_optimizer), rule)


@_memoise
def _make_step(apply_fn, optimizer, loss_obj: Loss, refresh, reset_optimizer: bool, rule: _Rule) -> Callable:
    update = make_linearised_update(apply_fn, optimizer, loss_obj)

    def plain_loss(params, x, y):
        return jnp.mean(loss_obj.per_example(apply_fn(params, x), y))

    def k1_step(state: TrainState, batch):
        """K = 1 without the linearisation: θ_s = θ_t at every step, so f_lin_s(θ_t) = f(θ_t) and
        ∇_θ L(f_lin_s(θ_t)) = ∇_θ L(f(θ_t)): the same step as :func:`step` at K = 1 (equal up to
        rounding), at plain (S)GD's cost, with no Jacobian-vector product."""
        x, y = batch
        value, grads = jax.value_and_grad(plain_loss)(state.params, x, y)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        if refresh is not None:
            params = refresh(params, x)
        if reset_optimizer:
            opt_state = optimizer.init(params)
        new = commit_step(state, value, params, params, opt_state, jnp.asarray(True))
        return new, {"loss": value}

    def step(state: TrainState, batch, data=None):
        _check_state(rule, state.policy)
        x, y = batch
        value, params, opt_state = update(state.params, state.params_s, state.opt_state, x, y)
        info = RelinInfo(
            step=state.step + 1,
            K=state.K,
            n_relin=state.n_relin,
            loss=value,
            net_loss=plain_loss(state.params, x, y) if rule.net_loss else None,  # one more forward pass
            check=(functools.partial(_train_check_on, apply_fn, loss_obj, data, rule.check_batch_size,
                                     state.params_s, params) if rule.train_check else None),
        )
        relin, policy = rule.decide(state.policy, info)
        if refresh is not None:  # a cond: the extra forward runs only when re-linearising (unless vmapped)
            params = jax.lax.cond(relin, lambda p: refresh(p, x), lambda p: p, params)
        params_s = tree_where(relin, params, state.params_s)
        if reset_optimizer:
            opt_state = tree_where(relin, optimizer.init(params), opt_state)
        new = commit_step(state, value, params, params_s, opt_state, relin, policy)
        return new, {"loss": value}

    if rule.kind == "every":
        step.k1 = k1_step
    step.takes_data = rule.train_check
    return step


def _lin_means(apply_fn, metrics, n: int, classify: bool, params_s, params):
    """(loss, acc) of f_lin_s(θ) from ``metrics(models)`` sums over n examples (acc NaN unless ``classify``)."""
    sums = metrics({"lin": lambda xb: linearised_apply(apply_fn, params_s, params, xb)})
    acc = sums["lin_acc"] / n if classify else jnp.asarray(jnp.nan, jnp.result_type(float))
    return sums["lin_loss"] / n, acc


def _train_check_on(apply_fn, loss: Loss, data, batch_size: int, params_s, params):
    """(loss, acc) of the linear model f_lin_s(θ) on the whole training set ``data = (x, y)``, in chunks
    of ``batch_size`` (:func:`iterlin.relin.until_solved`'s check; accuracy NaN for real targets).
    The data is an argument, chunked here inside the caller's trace: a compiled step reads the data
    it is given."""
    x, y = data
    chunks = _chunked(x, y, batch_size)
    classify = jnp.issubdtype(y.dtype, jnp.integer)
    metrics = lambda models: _metric_sums(loss, models, chunks)  # noqa: E731
    return _lin_means(apply_fn, metrics, chunks.n, classify, params_s, params)


def make_batch_fn(x, y, batch_size: int | None, key, augment: bool = False) -> Callable:
    """Return ``batch_fn(t) -> (x_t, y_t)``, a pure function of the step index t.

    Mini-batches walk a fresh permutation each epoch, ``permutation(fold_in(key, epoch))``, dropping
    the last incomplete batch; ``batch_size=None`` is the full batch. ``augment`` applies a random
    flip and 4-pixel-padded crop keyed by ``fold_in(key, t)``.
    """
    data_key, aug_key = jax.random.split(key)

    def batch_fn(t):
        return _draw_batch(x, y, data_key, aug_key, t, batch_size, augment)

    return batch_fn


def _draw_batch(x, y, data_key, aug_key, t, batch_size: int | None, augment: bool):
    """Step t's batch of (x, y) (:func:`make_batch_fn`): pure in the arrays and keys, static in the rest."""
    n = x.shape[0]
    full = batch_size is None or batch_size == n
    steps_per_epoch = 1 if full else n // batch_size
    if full:
        xb, yb = x, y
    else:
        epoch, pos = t // steps_per_epoch, t % steps_per_epoch
        perm = jax.random.permutation(jax.random.fold_in(data_key, epoch), n)
        idx = jax.lax.dynamic_slice(perm, (pos * batch_size,), (batch_size,))
        xb, yb = x[idx], y[idx]
    if augment:
        xb = flip_and_crop(jax.random.fold_in(aug_key, t), xb)
    return xb, yb


def _batch_of(data, key, t, batch_size: int | None, augment: bool):
    """Step t's batch of ``data = (x, y)`` drawn with ``key``: ``make_batch_fn(x, y, batch_size, key,
    augment)(t)``, with the data and the key as arguments (what :func:`fit`'s programs draw)."""
    data_key, aug_key = jax.random.split(key)
    return _draw_batch(*data, data_key, aug_key, t, batch_size, augment)


@functools.partial(jax.tree_util.register_dataclass, data_fields=("x", "y"), meta_fields=("n",))
@dataclasses.dataclass(frozen=True, eq=False)
class _Chunks:
    """A set of N examples in chunks: ``x`` (C, B, ...), ``y`` (C, B, ...), zero-padded to C·B ≥ N.

    A pytree whose arrays are ``x`` and ``y`` and whose static part is N, so a compiled program
    takes the chunks as an argument while the weights (1 for the N examples, 0 for the padding)
    depend on shapes only and are a constant of the program.
    """

    x: Any
    y: Any
    n: int

    @property
    def weights(self):
        """(C, B): 1 for the N examples, 0 for the padding."""
        nc, bs = self.x.shape[:2]
        return jnp.concatenate([jnp.ones(self.n), jnp.zeros(nc * bs - self.n)]).reshape(nc, bs)


def _chunked(x, y, batch_size) -> _Chunks:
    """Pad (x, y) to a multiple of batch_size and reshape to (chunks, batch_size, ...) (:class:`_Chunks`).

    No copy of the data is made when the chunks tile it exactly.
    """
    n = x.shape[0]
    bs = min(batch_size, n)
    nc = -(-n // bs)
    pad = nc * bs - n
    if pad:
        x = jnp.concatenate([x, jnp.zeros((pad,) + x.shape[1:], x.dtype)])
        y = jnp.concatenate([y, jnp.zeros((pad,) + y.shape[1:], y.dtype)])
    return _Chunks(x.reshape((nc, bs) + x.shape[1:]), y.reshape((nc, bs) + y.shape[1:]), int(n))


def _split_chunks(x, y, batch_size) -> _Chunks:
    """``_chunked(x, y, batch_size)``, the arguments checked (an evaluation split, made once)."""
    x, y = jnp.asarray(x), jnp.asarray(y)
    check_xy(x, y)
    batch_size = check_int(batch_size, "eval_batch_size")
    return _chunked(x, y, batch_size)


def _metric_sums(loss: Loss, models: dict, chunks: _Chunks) -> dict:
    """``{"<model>_<metric>": sum over the chunks}`` for every model of ``models`` (a name to
    ``fn(x_chunk) -> outputs``), all on the same chunks in one ``lax.scan`` (memory O(chunk size)):
    THE evaluation loop, pure in ``chunks = _chunked(x, y, batch_size)``, so a compiled program takes
    them as an argument."""
    xc, yc, wc = chunks.x, chunks.y, chunks.weights
    names = ("loss", "acc") if jnp.issubdtype(yc.dtype, jnp.integer) else ("loss", "sq_err")

    def body(acc, inp):
        xb, yb, wb = inp
        new = {f"{m}_{k}": v for m, fn in models.items() for k, v in loss.metrics(fn(xb), yb, wb).items()}
        return jax.tree.map(lambda a, b: a + b.astype(a.dtype), acc, new), None

    init = {f"{m}_{k}": jnp.zeros((), jnp.result_type(float)) for m in models for k in names}
    sums, _ = jax.lax.scan(body, init, (xc, yc, wc))
    return sums


def _eval_sums(apply_fn: Callable, loss: Loss, state: TrainState, chunks: dict) -> dict:
    """``{"{net,lin}_{split}_{metric}": sum}`` of the network f(θ_t) and the linear model
    f_lin_s(θ_t) on ``chunks = {split: _chunked(x, y, batch_size)}`` (``fit``'s evaluation)."""
    models = {
        "net": lambda xb: apply_fn(state.params, xb),
        "lin": lambda xb: linearised_apply(apply_fn, state.params_s, state.params, xb),
    }
    out = {}
    for name, split in chunks.items():
        for key, v in _metric_sums(loss, models, split).items():
            model, metric = key.split("_", 1)
            out[f"{model}_{name}_{metric}"] = v
    return out


def _means(sums: dict, sizes: dict) -> dict:
    """Sums → means; ``acc`` as a fraction, ``sq_err`` → ``rmse``. Works on (R,)-batched values."""
    out = {}
    for key, v in sums.items():
        model, split, metric = key.split("_", 2)
        v = np.asarray(v, np.float64) / sizes[split]
        if metric == "sq_err":
            out[f"{model}_{split}_rmse"] = np.sqrt(v)
        else:
            out[key] = v
    return out


#: The most evaluation points a run may have: each is a pass over the evaluation data and a row
#: of the history, and a checkpoint stores the whole history again at each of them.
MAX_EVAL_POINTS = 100_001


#: The default evaluation (:func:`default_evaluation`): the images it evaluates, summed over its
#: points, are at most this fraction of the images the run trains on (steps × batch).
DEFAULT_EVAL_BUDGET = 0.1
#: The most points of the default schedule (every ``steps // 20``: 0, T/20, …, T).
DEFAULT_EVAL_POINTS = 21
#: The smallest training subset the default evaluation measures the training metrics on.
MIN_EVAL_TRAIN = 256


def default_evaluation(steps: int, batch: int, n_train: int, n_test: int = 0,
                       n_eval_train: int | None = None) -> tuple[int, int]:
    """The default evaluation schedule and training subset of :func:`fit`: ``(eval_every, n_eval_train)``.

    Evaluation is budgeted at :data:`DEFAULT_EVAL_BUDGET` of the images trained on, I = steps ·
    batch: every point evaluates the network and the linear model on the first ``n_eval_train``
    training images and on the ``n_test`` evaluation images. The training subset is
    n_sub = min(n_train, max(:data:`MIN_EVAL_TRAIN`, ⌊0.1·I / 21⌋ − n_test)) (or ``n_eval_train``
    when given) and the number of points n_pts = min(21, max(2, ⌊0.1·I / (n_sub + n_test)⌋)),
    spaced every ⌈steps / (n_pts − 1)⌉ steps (the last step is always a point). A long run gets 21
    points on the whole training split, a shorter one a subset, a short one fewer points, so that
    evaluation stays a small share of the run. Only the two ends remain when even they exceed the
    budget (a run of a few steps).

      >>> default_evaluation(steps=100_000, batch=128, n_train=4660)   # 21 points, every image
      (5000, 4660)
      >>> default_evaluation(steps=10_000, batch=128, n_train=50_000)  # 21 points, 6,095 images
      (500, 6095)
      >>> default_evaluation(steps=40, batch=256, n_train=1024)        # 4 points, 256 images
      (14, 256)
    """
    budget = DEFAULT_EVAL_BUDGET * steps * batch
    if n_eval_train is None:
        n_sub = min(n_train, max(MIN_EVAL_TRAIN, int(budget // DEFAULT_EVAL_POINTS) - n_test))
    else:
        n_sub = n_eval_train
    n_pts = int(min(DEFAULT_EVAL_POINTS, max(2, budget // (n_sub + n_test))))
    return max(1, -(-steps // (n_pts - 1))), n_sub


def _eval_steps(steps: int, eval_every: int | None, eval_steps: Sequence[int] | None) -> list[int]:
    if eval_steps is not None:
        pts = sorted({check_int(s, "eval_steps[i]", minimum=0, maximum=steps) for s in eval_steps} | {0, steps})
        if len(pts) > MAX_EVAL_POINTS:
            raise ValueError(
                f"eval_steps of {len(pts)} distinct steps (0 and steps included) is not allowed: at most "
                f"{MAX_EVAL_POINTS} evaluation points are allowed."
            )
    else:
        every = check_int(eval_every, "eval_every", maximum=MAX_STEPS)
        n = -(-steps // every) + 1  # the points 0, every, 2·every, … below steps, and steps
        if n > MAX_EVAL_POINTS:
            raise ValueError(
                f"eval_every={eval_every!r} is not allowed: with steps={steps} it gives {n} evaluation points; "
                f"at most {MAX_EVAL_POINTS} are allowed (eval_every >= {-(-steps // (MAX_EVAL_POINTS - 1))})."
            )
        pts = sorted(set(range(0, steps, every)) | {steps})
    return pts


def _check_pair(data, name: str) -> tuple:
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        got = f"a {type(data).__name__}" + (f" of length {len(data)}" if isinstance(data, (tuple, list)) else "")
        raise ValueError(f"{name} must be a pair (x, y) of arrays; got {got}.")
    return tuple(data)


def _fingerprint(*trees) -> str:
    """SHA-256 of the shapes, dtypes and bytes of every leaf: identifies the data and θ_0 of a run."""
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(trees):
        a = np.asarray(leaf)
        h.update(f"{a.shape}{a.dtype.str};".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _json_default(obj):
    if isinstance(obj, (np.ndarray, np.generic, jax.Array)):
        return np.asarray(obj).tolist()
    raise TypeError(f"{type(obj).__name__} {obj!r} is not JSON-serialisable")


def _canonical(meta: dict) -> dict:
    """``meta`` as it reads back from the checkpoint's JSON (tuples → lists, NumPy → Python)."""
    try:
        return json.loads(json.dumps(meta, default=_json_default))
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"config={meta['config']!r} is not allowed: with a checkpoint, config must be JSON-serialisable "
            f"(numbers, strings, bools, None, lists, tuples and dicts of them; NumPy scalars are converted): {e}"
        ) from None


def _same(a, b) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # nan equals nan here


def check_train_args(data, steps, loss, batch_size, eval_data) -> None:
    """Validate what ``train``, ``train_sweep`` and ``gauss_newton.gauss_newton_train`` share, before
    their initial refresh.

    ``data`` and ``eval_data`` are ``(x, y)`` pairs, ``steps`` a positive count, ``batch_size`` None or
    in 1 … len(x), ``loss`` a known loss; a bad one raises an error naming it. :func:`fit` checks the rest.
    """
    x, y = (jnp.asarray(a) for a in _check_pair(data, "data"))
    if eval_data is not None:
        eval_data = tuple(jnp.asarray(a) for a in _check_pair(eval_data, "eval_data"))
    _validate_common(x, y, steps, batch_size, eval_data)
    get_loss(loss)


def _validate_common(x, y, steps, batch_size, eval_data):
    check_xy(x, y)
    steps = check_steps(steps)
    if batch_size is not None:
        batch_size = check_int(batch_size, "batch_size", minimum=1, maximum=x.shape[0])
    if eval_data is not None:
        check_xy(*eval_data, xname="eval_data x", yname="eval_data y")
    return steps, batch_size


def _check_progress(checkpoint, history, done, state, points) -> None:
    """A resumed checkpoint's progress must agree with its contents, else :class:`CheckpointError`.

    ``done`` (evaluation points recorded) must be in 1 … len(points); every history entry must
    have exactly ``done`` rows; the recorded steps must be ``points[:done]``; and the state's step
    counter (of every run) must be ``points[done - 1]``, the last point recorded. So an edited or
    mixed-up counter is refused instead of returning a truncated history as final.
    """

    def refuse(detail: str):
        raise CheckpointError(
            f"checkpoint {checkpoint} is inconsistent: {detail}. Delete it to start this run afresh."
        )

    n = len(points)
    if isinstance(done, bool) or not isinstance(done, int) or not 1 <= done <= n:
        refuse(f"its progress counter done={done!r} must be an integer in 1..{n} (the evaluation points)")
    if not isinstance(history, dict) or not history:
        refuse(f"its history is {type(history).__name__}, not a dict of per-point lists")
    rows = {k: len(v) if isinstance(v, list) else None for k, v in history.items()}
    wrong = {k: r for k, r in rows.items() if r != done}
    if wrong:
        shown = ", ".join(f"{k}: {'not a list' if r is None else r}" for k, r in sorted(wrong.items())[:4])
        refuse(f"done={done} evaluation points, but the history has other row counts ({shown})")
    if history.get("step") != list(points[:done]):
        refuse(f"done={done}: the recorded steps {str(history.get('step'))[:80]} are not the evaluation points "
               f"{str(list(points[:done]))[:80]}")
    steps = sorted({int(v) for v in np.ravel(np.asarray(state.step))})
    if steps != [points[done - 1]]:
        refuse(f"done={done} means the state is at step {points[done - 1]}, but its step counter is "
               f"{steps[0] if len(steps) == 1 else steps}")


class _Placement(NamedTuple):
    """Where :func:`fit` puts a run's arrays: a one-axis mesh over the chosen devices.

    ``axis`` is ``"runs"`` (a vmapped sweep: the state's and the per-run keys' leading run axis is
    sharded, ``P("runs")``; the data and a shared key are replicated) or ``"batch"`` (one run, data
    parallel: the state, the data and the key are replicated, ``P()``, and each step's batch is
    constrained to ``P("batch")``, its leading example axis split over the devices).
    """

    mesh: Mesh
    axis: str

    @property
    def size(self) -> int:
        return int(self.mesh.devices.size)

    def sharding(self, *spec) -> NamedSharding:
        return NamedSharding(self.mesh, P(*spec))


def _check_devices(devices) -> list:
    """``devices``: None (every local device) or a non-empty sequence of distinct local devices."""
    if devices is None:
        return list(jax.local_devices())
    ok = isinstance(devices, (list, tuple)) and len(devices) > 0 and all(isinstance(d, jax.Device) for d in devices)
    if not ok:
        raise ValueError(f"devices={devices!r} is not allowed: devices must be None (every local device) or a "
                         "non-empty list of jax devices, e.g. jax.local_devices()[:2]")
    local = set(jax.local_devices())
    if len(set(devices)) != len(devices) or any(d not in local for d in devices):
        raise ValueError(f"devices={devices!r} is not allowed: the devices must be distinct and local "
                         f"(among jax.local_devices() = {jax.local_devices()})")
    return list(devices)


def _placement(devices, shard_runs, data_parallel, *, sweep: bool, vectorise, batch_size, n_train: int):
    """Validate ``fit``'s device arguments; return ``(placement or None, vectorise)``.

    ``shard_runs``: None shards a sweep's runs when they are vmapped and there is more than one
    device; True asks for it (and makes ``vectorise=None`` vmap); False never shards.
    ``data_parallel``: one run's batches split over the devices. ``vectorise`` comes back resolved
    (None: vmap).
    The mesh is built with ``jax.sharding.Mesh`` (automatic axes: jit propagates the inputs'
    shardings), not ``jax.make_mesh``, whose default axis types differ between JAX versions.
    """
    devices = _check_devices(devices)
    for name, value, allowed in (("shard_runs", shard_runs, (None, True, False)),
                                 ("data_parallel", data_parallel, (True, False)),
                                 ("vectorise", vectorise, (None, True, False))):
        if not any(value is a for a in allowed):
            raise ValueError(f"{name}={value!r} is not allowed: {name} must be one of {allowed}")
    if shard_runs and not sweep:
        raise ValueError("shard_runs=True is not allowed for a single run: it shards a sweep's run axis "
                         "(train_sweep, or fit with sweep=True); for one run use data_parallel=True")
    if shard_runs and vectorise is False:
        raise ValueError("shard_runs=True is not allowed with vectorise=False: runs are sharded where they are "
                         "vmapped together; pass vectorise=True or None")
    if data_parallel and sweep:
        raise ValueError("data_parallel=True is not allowed for a sweep: a sweep spreads its runs over the "
                         "devices (shard_runs); data_parallel splits the batch of a single run (train, or fit "
                         "with sweep=False)")
    if vectorise is None:
        vectorise = True
    if data_parallel:
        n = len(devices)
        examples = n_train if batch_size is None else int(batch_size)
        if examples % n:
            raise ValueError(
                f"batch_size={batch_size!r} is not allowed with data_parallel=True over {n} devices: the batch "
                f"({examples} examples{', the full training set' if batch_size is None else ''}) must split "
                f"evenly over the devices, i.e. be a multiple of {n}"
            )
        return _Placement(Mesh(np.asarray(devices, dtype=object), ("batch",)), "batch"), vectorise
    if sweep and vectorise and (shard_runs or (shard_runs is None and len(devices) > 1)):
        return _Placement(Mesh(np.asarray(devices, dtype=object), ("runs",)), "runs"), vectorise
    return None, vectorise


def _pad_runs(tree, runs: int, padded: int):
    """Lengthen the leading run axis of every leaf from ``runs`` to ``padded`` by repeating the last run."""
    if padded == runs:
        return tree
    idx = np.minimum(np.arange(padded), runs - 1)
    return jax.tree.map(lambda a: a[idx], tree)


def _unpad_runs(tree, runs: int, padded: int):
    """The first ``runs`` runs of a padded tree (:func:`_pad_runs`' inverse)."""
    return tree if padded == runs else jax.tree.map(lambda a: a[:runs], tree)


class _Evaluation(NamedTuple):
    """What :func:`_run` evaluates at its points: the network ``apply_fn`` and its linearisation,
    with ``loss``, on ``splits = {name: _chunked(x, y, batch_size)}``."""

    apply_fn: Callable
    loss: Loss
    splits: dict


@_memoise
def _eval_program(apply_fn: Callable, loss: Loss, over_runs: str | None) -> Callable:
    """The compiled ``evaluate(state, splits) -> sums`` (:func:`_eval_sums`). ``over_runs``: None
    (one run), ``"map"`` (the state's run axis evaluated one run after the other with ``lax.map``:
    one run's memory) or ``"vmap"`` (vmapped, for a run axis sharded over devices); the splits are
    shared. The splits are an argument: one program for every value of the data, compiled once per
    shape."""

    def evaluate(state, splits):
        return _eval_sums(apply_fn, loss, state, splits)

    if over_runs == "map":
        return jax.jit(lambda state, splits: jax.lax.map(lambda st: evaluate(st, splits), state))
    return jax.jit(jax.vmap(evaluate, in_axes=(0, None)) if over_runs == "vmap" else evaluate)


class _Programs(NamedTuple):
    """The compiled steps of one step function (:func:`_step_programs`)."""

    loop: Callable  #: ``loop(state, t0, t1, key, data)``: steps t0 … t1 − 1 in one ``fori_loop``
    step: Callable  #: ``step(state, t, key, data)``: step t


@_memoise
def _step_programs(step_fn: Callable, batch_size, augment: bool, vmapped: bool, per_run_batches: bool,
                   batch_sharding) -> _Programs:
    """``step_fn``'s compiled programs: step t on the batch :func:`_batch_of` ``(data, key, t,
    batch_size, augment)``, with the state, the step bounds, the key and the data as arguments.

    Memoised on the step function and the static options, so a second :func:`fit` with the same
    (memoised) step function and shapes compiles nothing (jit's own cache holds one executable per
    shape). ``vmapped``: the state has a leading run axis, ``step_fn`` is vmapped over it; the
    batch is shared, or drawn per run from a key per run (``per_run_batches``). ``batch_sharding``
    (data parallel): each batch is constrained to it. A step function with ``takes_data = True``
    is called ``step_fn(state, batch, data)`` (it reads the whole training set, e.g. the
    Adam-solved criterion); others ``step_fn(state, batch)``.
    """
    if getattr(step_fn, "takes_data", False):
        step3 = step_fn
    else:

        def step3(state, batch, data):
            return step_fn(state, batch)

    vstep = jax.vmap(step3, in_axes=(0, 0 if per_run_batches else None, None)) if vmapped else step3

    def draw(data, key, t):
        if vmapped and per_run_batches:
            batch = jax.vmap(lambda k: _batch_of(data, k, t, batch_size, augment))(key)
        else:
            batch = _batch_of(data, key, t, batch_size, augment)
        return batch if batch_sharding is None else jax.lax.with_sharding_constraint(batch, batch_sharding)

    def run_step(state, t, key, data):
        return vstep(state, draw(data, key, t), data)[0]

    def run_loop(state, t0, t1, key, data):
        return jax.lax.fori_loop(t0, t1, lambda t, st: run_step(st, t, key, data), state)

    return _Programs(loop=jax.jit(run_loop), step=jax.jit(run_step))


def _run(
    step_fn,
    state,
    data,
    key,
    evaluation: _Evaluation,
    points,
    *,
    batch_size,
    augment: bool,
    sweep: bool,
    checkpoint,
    meta,
    callback,
    progress,
    stop_when_diverged,
    compiled_loop=None,
    per_run_batches=False,
    vectorise: bool = True,
    placement: _Placement | None = None,
):
    """Run the compiled chunks between evaluation points; evaluate, checkpoint, report.

    Step t's batch is ``_batch_of(data, key, t, batch_size, augment)`` (:func:`make_batch_fn`);
    ``key`` is one key, or with ``per_run_batches`` one key per run (leading run axis). The
    programs are cached (:func:`_step_programs`, :func:`_eval_program`) and take the data, the key,
    the evaluation splits and the state as arguments. A sweep's runs are ``vmap``-ed
    (``vectorise``, the default), or stepped one run after the other between evaluation points;
    the steps between evaluation points run in one ``fori_loop`` (``compiled_loop``, the default)
    or one dispatch each. Every way the results are the same (tests compare them in float64).
    A vmapped sweep on one device is evaluated one run after the other inside one program
    (``lax.map``: the memory of one run's evaluation); sharded over devices, vmapped.

    ``placement`` (:func:`_placement`): with axis ``"runs"`` the R runs are padded to R' (the next
    multiple of the device count, repeating the last run and its key) and placed with
    ``P("runs")``; the compiled programs follow their inputs' shardings. Only the first R runs are
    evaluated, passed to ``callback``, checkpointed and returned. With axis ``"batch"`` the state is
    replicated and each batch is constrained to ``P("batch")``. The state is placed
    after a checkpoint is loaded (a checkpoint holds the unpadded state on the host).
    """
    history: dict[str, list] = {}
    done = 0
    if checkpoint is not None and os.path.exists(checkpoint):
        try:
            (state, hist_leaves), saved = load_checkpoint(checkpoint, (state, ()))
        except CheckpointError as e:
            raise CheckpointError(f"{e}. Delete it to start this run afresh.") from e
        run = saved.get("run") or {}
        if not _same(run, meta):
            diff = "; ".join(
                f"{k}: saved {json.dumps(run.get(k))[:80]}, now {json.dumps(meta.get(k))[:80]}"
                for k in sorted(set(run) | set(meta)) if not _same(run.get(k), meta.get(k))
            )
            raise CheckpointError(
                f"checkpoint {checkpoint} was written by a different run configuration ({diff}); "
                "use another checkpoint path or delete it."
            )
        history, done = saved.get("history"), saved.get("done")
        _check_progress(checkpoint, history, done, state, points)

    use_loop = True if compiled_loop is None else bool(compiled_loop)
    loop_runs = sweep and not vectorise
    runs = np.shape(jax.tree.leaves(state)[0])[0] if sweep else 1
    padded = runs  # R': the runs stepped, ≥ R (see ``placement``)

    # K = 1 runs take ``step_fn.k1`` (no Jacobian-vector product) wherever the choice is per run:
    # a lone run, runs stepped one by one, or a vmapped sweep whose every run has K = 1.
    k1_fn = getattr(step_fn, "k1", None)
    K_codes = np.ravel(np.asarray(jax.device_get(state.K)))
    if k1_fn is not None and (not sweep or vectorise) and np.all(K_codes == 1):
        step_fn = k1_fn
    run_step_fns = [k1_fn if k1_fn is not None and k == 1 else step_fn for k in K_codes]

    batch_sharding = None
    if placement is not None and placement.axis == "runs":
        padded = -(-runs // placement.size) * placement.size
        state = jax.device_put(_pad_runs(state, runs, padded), placement.sharding("runs"))
        if per_run_batches:
            key = jax.device_put(_pad_runs(key, runs, padded), placement.sharding("runs"))
        else:
            key = jax.device_put(key, placement.sharding())
    elif placement is not None:  # data parallel: θ replicated, each batch split over the devices
        state, key = jax.device_put((state, key), placement.sharding())
        batch_sharding = placement.sharding("batch")

    def view(state):
        """The R runs of the (possibly padded) state."""
        return _unpad_runs(state, runs, padded)

    vmapped = sweep and vectorise
    if loop_runs:  # one program per distinct step function, for one run at a time
        programs = {fn: _step_programs(fn, batch_size, augment, False, False, None) for fn in set(run_step_fns)}
    else:
        programs = _step_programs(step_fn, batch_size, augment, vmapped, bool(per_run_batches and vmapped),
                                  batch_sharding)
    veval = _eval_program(evaluation.apply_fn, evaluation.loss,
                          ("vmap" if placement is not None and placement.axis == "runs" else "map") if vmapped
                          else None)

    def run_key(i):
        return key[i] if per_run_batches else key

    def run_chunk(state, t0, t1):
        """Steps t0 … t1 − 1: one compiled ``fori_loop`` (``use_loop``) or one jitted step per
        dispatch (the batch still drawn on device)."""
        if loop_runs:
            out = []
            for i in range(runs):
                st, k = tree_index(state, i), run_key(i)
                prog = programs[run_step_fns[i]]
                if use_loop:
                    st = prog.loop(st, jnp.int32(t0), jnp.int32(t1), k, data)
                else:
                    for t in range(t0, t1):
                        st = prog.step(st, jnp.int32(t), k, data)
                out.append(st)
            return tree_stack(out)
        if use_loop:
            return programs.loop(state, jnp.int32(t0), jnp.int32(t1), key, data)
        for t in range(t0, t1):
            state = programs.step(state, jnp.int32(t), key, data)
        return state

    def evaluate(state):
        if loop_runs:
            per_run = [jax.device_get(veval(tree_index(state, i), evaluation.splits)) for i in range(runs)]
            return {k: np.stack([np.asarray(v[k]) for v in per_run]) for k in per_run[0]}
        out = jax.device_get(veval(state, evaluation.splits))
        return {k: np.asarray(v)[:runs] for k, v in out.items()} if padded != runs else out

    bar = None
    if progress:
        from .progress import progress_bar  # a bar on a terminal, plain lines elsewhere

        # ``done`` points are recorded, the last at step points[done - 1]: the state's step.
        bar = progress_bar(points[-1], initial=points[done - 1] if done > 0 else 0)

    def record(state, t):
        vals = _means(evaluate(state), {name: c.n for name, c in evaluation.splits.items()})
        vals["step"] = t
        state = view(state)
        vals["n_relin"] = np.asarray(state.n_relin)
        if callback is not None:
            vals.update(callback(t, state) or {})
        for k, v in vals.items():
            history.setdefault(k, []).append(np.asarray(v).tolist())

    if done == 0:
        record(state, 0)
        done = 1
    for i in range(done, len(points)):
        if stop_when_diverged and bool(np.all(np.asarray(view(state).diverged))):
            break  # every run diverged (also when resuming a run that stopped so)
        t0, t1 = points[i - 1], points[i]
        state = run_chunk(state, t0, t1)
        record(state, t1)
        if checkpoint is not None:
            save_checkpoint(checkpoint, (view(state), ()), {"run": meta, "history": history, "done": i + 1})
        if bar is not None:
            bar.update(t1 - t0)
    if bar is not None:
        bar.close()

    state = view(state)
    hist = {k: np.asarray(v) for k, v in history.items()}
    if sweep:  # per-point lists of per-run values (E, R, ...) → (R, E, ...); step stays (E,)
        hist = {k: (v if k == "step" else np.moveaxis(v, 0, 1)) for k, v in hist.items()}
    hist["diverged"] = np.asarray(state.diverged)
    hist["diverged_step"] = np.asarray(state.diverged_step)
    return state, hist


def fit(
    step_fn: Callable,
    state: TrainState,
    apply_fn: Callable,
    data: tuple,
    *,
    steps: int,
    loss: str | Loss = "ce",
    batch_size: int | None = None,
    key=None,
    eval_data: tuple | None = None,
    eval_every: int | None = None,
    eval_steps: Sequence[int] | None = None,
    eval_batch_size: int = 1000,
    eval_train_size: int | None = None,
    augment: bool = False,
    callback: Callable | None = None,
    checkpoint: str | os.PathLike | None = None,
    progress: bool = False,
    sweep: bool = False,
    config: dict | None = None,
    compiled_loop: bool | None = None,
    vectorise: bool | None = None,
    devices: Sequence[jax.Device] | None = None,
    shard_runs: bool | None = None,
    data_parallel: bool = False,
) -> tuple[TrainState, dict]:
    """The one training loop: run ``step_fn(state, batch) -> (state, metrics)`` for ``steps`` steps.

    Used by :func:`train`, :func:`train_sweep`, the Gauss–Newton loop and the Adam-solved loop.
    Batches come from :func:`make_batch_fn` on device; at evaluation points the network and the
    current linear model are evaluated on the whole train (and test) split, ``callback`` is run, and
    with ``checkpoint`` set the state and history are saved atomically (a rerun resumes; a rerun with
    a different ``config`` or data is refused rather than silently mixed). With ``sweep=True`` the
    state has a leading run axis and ``step_fn`` is vmapped over it: batches are shared, unless
    ``key`` holds one key per run (raw keys of shape (R, 2), or typed keys of shape (R,)), when run i
    draws its batches (and augmentation) from ``key[i]`` exactly as a lone run with that key would
    (seeds trained side by side in one program). ``eval_train_size``: the training metrics are
    measured on the first ``eval_train_size`` training images (default: all of them when a schedule
    is given), so that evaluation stays a small share of a long run. Without ``eval_every`` and
    ``eval_steps`` the schedule is :func:`default_evaluation`'s (for ``eval_train_size`` when given,
    else with its subset): evaluation budgeted at a tenth of the images trained on, up to 21 points.
    ``compiled_loop``: run the steps between evaluation points in one compiled ``fori_loop``
    (True, or None: the default) or one jitted step per dispatch (False, the same results).
    ``vectorise``: a sweep's runs ``vmap``-ed together (True, or None: the default) or stepped one
    after the other between evaluation points (False, the same results). (XLA:CPU runs a
    convolution slower inside a loop, jax-ml/jax#12868, and a vmapped one slower than its runs one
    by one; the models of :func:`iterlin.models.make_model` lower their convolutions to matrix
    products on the CPU, which have neither penalty: ``benchmarks/bench_train.py`` measures both.)

    Several devices (one process; placement only, the results equal one device's up to the order
    of floating-point sums):

    * ``devices``: the devices to spread the work over, a non-empty list of distinct local devices;
      None: ``jax.local_devices()``.
    * ``shard_runs`` (sweeps): the state's leading run axis (every leaf (R, ...)) and, with one key
      per run, the keys (R, ...) are sharded over ``devices`` with ``NamedSharding(mesh,
      P("runs"))``; the data and a shared key are replicated. R is padded up to the next multiple
      R' of the device count by repeating the last run (its θ_0, K and key); the padding is computed
      and dropped: the history, ``callback``, the checkpoint and the returned state hold the R runs.
      None (default): shard when the runs are vmapped (``vectorise``, the default) and there is
      more than one device; True: shard (``vectorise=False`` is refused); False: never. Runs
      stepped one after the other (``vectorise=False``) stay on the default device.
    * ``data_parallel`` (a single run, ``sweep=False``): the state (θ, θ_s, optimizer state) and the
      data are replicated (``P()``) and each step's batch (B, ...) is split over ``devices`` on its
      example axis (``P("batch")``); the compiled step computes the same mean gradient, each device
      summing its B/n examples. B (``batch_size``, or N for the full batch) must be a multiple of
      the device count. Evaluation runs replicated.

    A checkpoint holds the unpadded state on the host, so a run resumes with any ``devices``.

    Compile once: the compiled programs are cached on ``step_fn`` (the same object: the step
    factories are memoised) and the static options (``batch_size``, ``augment``, the loss, how the
    runs are stepped and placed), and take the state, the key, the data and the evaluation splits as
    arguments; a second call with the same ``step_fn``, ``apply_fn``, loss and shapes compiles
    nothing, whatever the values of the data and the state.
    Returns the final state and the history (see :func:`train`).
    """
    x, y = (jnp.asarray(a) for a in _check_pair(data, "data"))
    if eval_data is not None:
        eval_data = tuple(jnp.asarray(a) for a in _check_pair(eval_data, "eval_data"))
    steps, batch_size = _validate_common(x, y, steps, batch_size, eval_data)
    placement, vectorise = _placement(devices, shard_runs, data_parallel, sweep=sweep, vectorise=vectorise,
                                      batch_size=batch_size, n_train=x.shape[0])
    loss = get_loss(loss)
    if eval_train_size is not None:
        eval_train_size = check_int(eval_train_size, "eval_train_size")
        if eval_train_size > x.shape[0]:
            raise ValueError(f"eval_train_size={eval_train_size} is not allowed: it must be <= the {x.shape[0]} "
                             "training examples, or None for all of them")
    if eval_steps is None and eval_every is None:  # the default: budgeted (default_evaluation)
        n_test = 0 if eval_data is None else int(eval_data[0].shape[0])
        eval_every, eval_train_size = default_evaluation(
            steps, x.shape[0] if batch_size is None else batch_size, x.shape[0], n_test, eval_train_size)
    points = _eval_steps(steps, eval_every, eval_steps)
    eval_batch_size = check_int(eval_batch_size, "eval_batch_size")
    key = jax.random.PRNGKey(0) if key is None else jnp.asarray(key)
    key_data = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    per_run = key_data.ndim == 2
    if per_run:
        runs = np.shape(jax.tree.leaves(state)[0])[0] if sweep else None
        if not sweep or key_data.shape[0] != runs:
            raise ValueError(
                f"key of shape {tuple(key_data.shape)} is not allowed: one key per run needs sweep=True and "
                f"a leading axis equal to the number of runs ({runs}); else pass one key"
            )
    n_eval_train = x.shape[0] if eval_train_size is None else eval_train_size
    splits = {"train": (x[:n_eval_train], y[:n_eval_train])}
    if eval_data is not None:
        splits["test"] = eval_data
    chunks = {name: _split_chunks(a, b, eval_batch_size) for name, (a, b) in splits.items()}
    data = (x, y)
    if placement is not None:  # the data on every device: batches are drawn where the runs are
        data, chunks = jax.device_put((data, chunks), placement.sharding())
    evaluation = _Evaluation(apply_fn, loss, chunks)
    meta = {
        "config": config or {},
        "steps": steps,
        "batch_size": batch_size,
        "points": points,
        "augment": bool(augment),
        "loss": loss.name,
        "n_train": int(x.shape[0]),
        "key": np.asarray(key_data).ravel().tolist(),
        "eval_train": int(n_eval_train),
        "K": np.asarray(state.K).tolist(),
    }
    if checkpoint is not None:  # identify the data and θ_0 too, so that a checkpoint is never mixed up
        meta["data"] = _fingerprint(x, y, eval_data)
        meta["init"] = _fingerprint(state)
        meta = _canonical(meta)
    return _run(
        step_fn, state, data, key, evaluation, points, batch_size=batch_size, augment=bool(augment), sweep=sweep,
        checkpoint=checkpoint, meta=meta, callback=callback, progress=progress, stop_when_diverged=True,
        compiled_loop=compiled_loop, per_run_batches=per_run, vectorise=vectorise, placement=placement,
    )


def _check_optimizer(optimizer):
    if not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(f"optimizer={optimizer!r} is not allowed: optimizer must be an optax GradientTransformation")
    return optimizer


def _check_placement_kwargs(fit_kwargs: dict, *, sweep: bool, data, batch_size) -> None:
    """:func:`fit`'s checks of ``devices``/``shard_runs``/``data_parallel``, made before any compute."""
    _placement(fit_kwargs.get("devices"), fit_kwargs.get("shard_runs"), fit_kwargs.get("data_parallel", False),
               sweep=sweep, vectorise=fit_kwargs.get("vectorise"), batch_size=batch_size,
               n_train=int(np.shape(data[0])[0]))


def _initial_refresh(refresh, params, data, batch_size):
    """θ_0's statistics (BatchNorm "frozen") from the first ``batch_size`` training images."""
    x = jnp.asarray(data[0])
    return refresh(params, x if batch_size is None else x[:batch_size])


def train(
    apply_fn: Callable,
    params: Any,
    data: tuple,
    *,
    K,
    steps: int,
    optimizer: optax.GradientTransformation,
    loss: str | Loss = "ce",
    batch_size: int | None = None,
    key=None,
    refresh: Callable | None = None,
    reset_optimizer: bool = False,
    **fit_kwargs,
) -> tuple[Any, dict]:
    """Train ``apply_fn`` by iterative linearisation with period K, or another policy (Algorithm 1).

    Args:
      apply_fn: ``apply_fn(params, x) -> (N, O)`` outputs (logits for ``"ce"``).
      params: initial parameters θ_0 (any pytree); the first linearisation point.
      data: ``(x, y)`` training set, held on device: x (N, ...), y (N,) int labels or (N, O) targets.
      K: when to re-linearise: a period (int ≥ 1, an integral float such as 5e6, or ``math.inf``),
        i.e. :func:`iterlin.relin.every` ``(K)``, or any policy of :mod:`iterlin.relin`
        (``K=relin.adaptive(0.1)``, ``K=relin.until_solved(...)``).
      steps: number of optimisation steps T.
      optimizer: any optax transformation (its state is kept across re-linearisations, unless
        ``reset_optimizer``).
      loss: ``"ce"`` (softmax cross-entropy on the linearised logits) or ``"mse"`` (½‖f − y‖²).
      batch_size: mini-batch size, or None for full batch.
      key: PRNG key for batch order and augmentation (default ``PRNGKey(0)``).
      refresh: ``refresh(params, x) -> params`` applied at each re-linearisation (BatchNorm "frozen").
      reset_optimizer: re-initialise the optimizer's state at each re-linearisation (each
        linearisation a fresh convex problem, as Fig. 8's Adam-solved runs); default False.
      **fit_kwargs: passed to :func:`fit`: ``eval_data=(x_test, y_test)``; ``eval_every`` or
        ``eval_steps`` (step 0 and the last step are always evaluated; default
        :func:`default_evaluation`: up to 21 points, budgeted at a tenth of the images trained on);
        ``eval_batch_size``; ``augment`` (random flip + 4-pixel crop on device, NHWC);
        ``callback(step, state) -> dict`` run on the host at evaluation points, its values appended
        to the history (kernel distances, probe accuracies); ``checkpoint`` (file path: saved
        atomically at evaluation points, resumed when rerun with the same configuration);
        ``progress`` (a progress bar); ``config`` (a dict identifying the run in the checkpoint);
        ``data_parallel=True`` (each batch split over ``devices``, default every local device, θ
        replicated; the batch size must be a multiple of the device count; see :func:`fit`).

    Returns:
      ``(params, history)``: θ_T and a dict of arrays over evaluation points: ``step``, ``n_relin``
      (T/K so far), and ``{net,lin}_{train,test}_{loss,acc|rmse}`` for the network f(θ_t) and the
      current linear model f_lin_s(θ_t); plus ``diverged`` and ``diverged_step`` (−1 if finite),
      and the steps at which the run re-linearised, ``relin_step`` (J,) (θ_s ← θ_t after t =
      ``relin_step[j]`` steps; at most :data:`iterlin.relin.MAX_LOG` of them), with the policy's log
      (:func:`iterlin.relin.history`: ``relin_gap`` for ``adaptive``; ``relin_inner_steps``,
      ``relin_acc``, ``relin_loss``, ``relin_reason`` for ``until_solved``).

    Example:
      Full-batch SGD on the MSE of 4 points, re-linearising every K = 10 steps. The network and its
      current linearisation coincide right after a re-linearisation (steps 0 and 50) and drift
      apart in between (step 25):

      >>> import jax.numpy as jnp, optax
      >>> from iterlin import train
      >>> def f(params, x):  # a two-layer MLP: (N, 1) -> (N, 1), P = 12
      ...     return jnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"]
      >>> params0 = {"w1": jnp.array([[1.0, -2.0, 0.5, 1.5]]), "b1": jnp.array([0.0, 0.5, -0.5, 0.2]),
      ...            "w2": jnp.array([[1.0], [0.5], [-1.0], [0.3]])}
      >>> x = jnp.array([[-1.0], [-0.3], [0.4], [1.0]])
      >>> y = jnp.sin(3 * x)
      >>> params, hist = train(f, params0, (x, y), K=10, steps=50, optimizer=optax.sgd(0.5),
      ...                      loss="mse", eval_every=25)
      >>> hist["step"].tolist(), hist["n_relin"].tolist()
      ([0, 25, 50], [0, 2, 5])
      >>> print(hist["net_train_loss"].round(4), hist["lin_train_loss"].round(4))
      [0.2898 0.0918 0.0513] [0.2898 0.0921 0.0513]
      >>> hist["relin_step"].tolist()
      [10, 20, 30, 40, 50]

      The same network re-linearised when its linear model's loss on the batch is more than 1 % off
      the network's (:func:`iterlin.relin.adaptive`):

      >>> from iterlin import relin
      >>> params, hist = train(f, params0, (x, y), K=relin.adaptive(0.01), steps=50, optimizer=optax.sgd(0.5),
      ...                      loss="mse", eval_every=25)
      >>> hist["relin_step"].tolist(), hist["n_relin"].tolist()
      ([2, 13, 37, 46], [0, 2, 4])
    """
    _check_optimizer(optimizer)
    policy = as_policy(K)
    _check_reset(reset_optimizer)
    check_train_args(data, steps, loss, batch_size, fit_kwargs.get("eval_data"))
    _check_placement_kwargs(fit_kwargs, sweep=False, data=data, batch_size=batch_size)
    (policy,), fit_kwargs = _policy_for_fit([policy], fit_kwargs)
    if refresh is not None:  # statistics at θ_0 before the first linearisation
        params = _initial_refresh(refresh, params, data, batch_size)
    state = init_state(params, optimizer, policy, steps=steps)
    step_fn = make_step(apply_fn, optimizer, loss, refresh=refresh, reset_optimizer=reset_optimizer, policy=policy)
    state, history = fit(step_fn, state, apply_fn, data, steps=steps, loss=loss, batch_size=batch_size, key=key,
                         **fit_kwargs)
    history.update(relin_history(state))
    return state.params, history


def _check_reset(reset_optimizer) -> bool:
    if not isinstance(reset_optimizer, (bool, np.bool_)):
        raise ValueError(f"reset_optimizer={reset_optimizer!r} is not allowed: reset_optimizer must be True or False")
    return bool(reset_optimizer)


def _policy_for_fit(policies: list, fit_kwargs: dict) -> tuple[list, dict]:
    """The policies with ``until_solved``'s check chunked like the evaluation (``eval_batch_size``,
    when it names no ``check_batch_size``), and ``fit_kwargs`` with the policies in ``config`` (so a
    checkpoint names them; :func:`iterlin.relin.every` adds nothing: K is already recorded)."""
    ebs = check_int(fit_kwargs.get("eval_batch_size", 1000), "eval_batch_size")
    policies = [p._replace(check_batch_size=ebs) if p.train_check and p.check_batch_size is None else p
                for p in policies]
    _one_rule(policies)
    if any(p.kind != "every" for p in policies):
        config = dict(fit_kwargs.get("config") or {})
        config["relin"] = [p.describe() for p in policies]
        fit_kwargs = {**fit_kwargs, "config": config}
    return policies, fit_kwargs


def train_sweep(
    apply_fn: Callable,
    params: Any,
    data: tuple,
    *,
    K: Sequence,
    steps: int,
    optimizer: optax.GradientTransformation,
    loss: str | Loss = "ce",
    batch_size: int | None = None,
    key=None,
    refresh: Callable | None = None,
    reset_optimizer: bool = False,
    **fit_kwargs,
) -> tuple[Any, dict]:
    """Several runs (values of K and/or initial parameters) trained in ONE compiled program.

    ``params`` is stacked on a leading run axis of size R (see :func:`iterlin.tree.tree_stack`, e.g.
    one initialisation per seed, or the same one repeated); ``K`` is a sequence of R periods, or of R
    re-linearisation policies of ONE kind (:mod:`iterlin.relin`) whose parameters may differ, e.g.
    ``K=[relin.adaptive(tol) for tol in (0.01, 0.1, 1.0)]``: the parameters are arrays in the state,
    so the runs are still one program. All runs see the same batch sequence (the same ``key``), so
    they differ only in K and θ_0; run i equals ``train`` of run i alone. A diverged run is frozen
    while the others continue.

    With more than one local device and the runs vmapped (``vectorise``, the default on every backend),
    the run axis is sharded over the devices (``NamedSharding(mesh, P("runs"))``; R padded to a
    multiple of the device count by repeating the last run, the padding dropped from the results);
    ``devices=[...]`` picks the devices, ``shard_runs=True/False`` forces it on/off (see :func:`fit`).

    Returns ``(params, history)`` with params stacked (R, ...) and history arrays of shape (R, E)
    (``step`` is (E,), ``diverged``/``diverged_step`` are (R,); the re-linearisation steps
    ``relin_step`` and the policy's log are (R, J), padded with −1 or NaN, see
    :func:`iterlin.relin.history`). Other arguments as :func:`train`.

    Example:
      K = 1 (gradient descent), K = 10 and K = ∞ (the linearisation at θ_0) from the same θ_0:

      >>> import math
      >>> import jax.numpy as jnp, optax
      >>> from iterlin import train_sweep, tree_stack
      >>> def f(params, x):  # a two-layer MLP: (N, 1) -> (N, 1), P = 12
      ...     return jnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"]
      >>> params0 = {"w1": jnp.array([[1.0, -2.0, 0.5, 1.5]]), "b1": jnp.array([0.0, 0.5, -0.5, 0.2]),
      ...            "w2": jnp.array([[1.0], [0.5], [-1.0], [0.3]])}
      >>> x = jnp.array([[-1.0], [-0.3], [0.4], [1.0]])
      >>> y = jnp.sin(3 * x)
      >>> params, hist = train_sweep(f, tree_stack([params0] * 3), (x, y), K=[1, 10, math.inf], steps=50,
      ...                            optimizer=optax.sgd(0.5), loss="mse", eval_every=50)
      >>> hist["n_relin"][:, -1].tolist()  # T/K re-linearisations per run
      [50, 5, 0]
      >>> print(hist["net_train_loss"].round(4))  # (R, E): runs × evaluation points
      [[0.2898 0.0449]
       [0.2898 0.0513]
       [0.2898 0.1414]]
    """
    if isinstance(K, (str, bytes, RelinPolicy)) or not hasattr(K, "__len__"):
        raise ValueError(f"K={K!r} is not allowed: K must be a sequence of periods (or policies), one per run")
    policies = [as_policy(k) for k in K]
    Ks = [_K_code(p.K) for p in policies]
    leaves = jax.tree.leaves(params)
    if not leaves or any(np.shape(leaf)[:1] != (len(Ks),) for leaf in leaves):
        raise ValueError(
            f"params must be stacked on a leading run axis of size len(K)={len(Ks)}; got leading shapes "
            f"{sorted({np.shape(leaf)[:1] for leaf in leaves})}"
        )
    _check_optimizer(optimizer)
    _check_reset(reset_optimizer)
    check_train_args(data, steps, loss, batch_size, fit_kwargs.get("eval_data"))
    _check_placement_kwargs(fit_kwargs, sweep=True, data=data, batch_size=batch_size)
    policies, fit_kwargs = _policy_for_fit(policies, fit_kwargs)
    if refresh is not None:
        params = jax.vmap(lambda p: _initial_refresh(refresh, p, data, batch_size))(params)
    size = log_size(policies, steps)  # one log size for every run, so that their states stack
    policy_states = tree_stack([p.init(size) for p in policies])
    state = jax.vmap(lambda p, k, ps: init_state(p, optimizer, 1, policy=ps)._replace(K=k))(
        params, jnp.asarray(Ks, jnp.int32), policy_states)
    step_fn = make_step(apply_fn, optimizer, loss, refresh=refresh, reset_optimizer=reset_optimizer,
                        policy=policies[0])
    state, history = fit(step_fn, state, apply_fn, data, steps=steps, loss=loss, batch_size=batch_size, key=key,
                         sweep=True, **fit_kwargs)
    history.update(relin_history(state, sweep=True))
    return state.params, history
